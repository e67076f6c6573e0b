"""Limits checked before any work: a config that would take more memory or time than the machine
has is refused at once with the numbers and the key to change, not after minutes of swapping.

``validate_within_limits`` is what ``cgbench.config.compose`` calls on every composed config:

1. every number is finite and every integer fits in 64 bits (``schema.check_finite``);
2. names that become parts of file names are plain names (``safeio.safe_name``);
3. sizes that are expanded before validation (``model.layer_pattern`` x ``model.pattern_repeat``)
   are bounded;
4. the cross-field rules of ``schema.validate``;
5. ranges the simulated clock can represent (``check_ranges``: hardware rates, arrival spans);
6. estimates of what the run would build: the captured-graph grid (``estimate_graphs``) and the
   memory the simulated requests take (``estimate_request_bytes``).

The memory limit is ``CGBENCH_MEMORY_LIMIT_GB`` (default 4) GiB; every other limit is far above any
real engine's (a few hundred graphs, ~100 layers).
"""

from __future__ import annotations

import dataclasses
import math
import os

from cgbench.config.registry.grids import graph_estimate
from cgbench.config.registry.workloads import workload_source
from cgbench.config.schema import BenchConfig, CGConfig, ConfigError, EngineConfig, check_finite, validate
from cgbench.safeio import safe_name

MAX_LAYERS = 10_000
MAX_GRAPHS = 100_000
# ``cgbench grid`` tabulates coverage over every (P, D) pair: (max_requests + 1)^2 cells, ~12 int64
# tables of them.
MAX_COVERAGE_REQUESTS = 2_048
# Peak memory of one simulated run per request, measured with workload.num_requests of 20,000 and
# 100,000 (1,190 and 1,214 bytes of peak RSS per request), rounded up. Not covered: ``run --trace
# --requests`` keeps per-step and per-request records, ~8,800 bytes a request in all (20,000 requests).
BYTES_PER_REQUEST = 1_500
DEFAULT_MEMORY_LIMIT_GB = 4.0
MEMORY_LIMIT_ENV = "CGBENCH_MEMORY_LIMIT_GB"

MAX_SWEEP_POINTS = 10_000  # composing a point takes ~1.5 ms: 10,000 points plan in ~15 s (progress lines in a log)

# config values that become parts of file names (result paths, sweep folders)
NAME_KEYS = (("model", "name"), ("workload", "name"), ("hardware", "name"), ("sweep", "name"))


def memory_limit_bytes() -> int:
    raw = os.environ.get(MEMORY_LIMIT_ENV, "")
    if not raw:
        return int(DEFAULT_MEMORY_LIMIT_GB * 2**30)
    try:
        gb = float(raw)
    except ValueError:
        gb = math.nan
    if not math.isfinite(gb) or gb <= 0:
        raise ConfigError(f"{MEMORY_LIMIT_ENV}: must be a positive number of GiB, got {raw!r}")
    return int(gb * 2**30)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_names(cfg: BenchConfig) -> None:
    for group, key in NAME_KEYS:
        safe_name(getattr(getattr(cfg, group), key), f"{group}.{key}")


# token counts and sizes: far above any engine's, and sums of a few stay within int64 (numpy's width)
MAX_SIZE = 2**40
SIZE_KEYS = (("engine", ("max_tokens", "max_requests", "max_sequence_length", "kv_blocks", "block_size")),
             ("cg", ("max_capture_size", "piecewise_max_tokens", "cuda_graph_max_tokens")))
SIZE_LISTS = ("capture_sizes", "piecewise_sizes", "graphs")
# expert- and data-parallel ranks: each is a whole engine in memory, built before the run starts; the
# largest deployments Megatron's inference serves are a few hundred GPUs
MAX_RANKS = 1_024


def check_sizes(cfg: BenchConfig) -> None:
    """Sizes that ``validate`` itself would expand (the layer string) come first; then every token
    count and size is at most ``MAX_SIZE`` (a 2^63 capture size would overflow the grid's int64
    arithmetic, not be refused)."""
    for group, keys in SIZE_KEYS:
        for key in keys:
            v = getattr(getattr(cfg, group), key)
            if isinstance(v, int) and v > MAX_SIZE:
                raise ConfigError(f"{group}.{key}: {v:,} is more than the {MAX_SIZE:,} limit of a size")
    for key in SIZE_LISTS:
        for i, v in enumerate(getattr(cfg.cg, key)):
            values = v if isinstance(v, (list, tuple)) else [v]
            if any(isinstance(x, int) and x > MAX_SIZE for x in values):
                raise ConfigError(f"cg.{key}[{i}]: {v} holds a size above the {MAX_SIZE:,} limit")
    for key in ("ep_size", "dp_size"):
        v = getattr(cfg.engine, key)
        if isinstance(v, int) and v > MAX_RANKS:
            raise ConfigError(f"engine.{key}: {v:,} ranks, more than the {MAX_RANKS:,}-rank limit (each rank is a "
                              "whole simulated engine with its own KV pool); lower engine." + key)
    m = cfg.model
    if m.pattern_repeat >= 1 and len(m.layer_pattern) * m.pattern_repeat > MAX_LAYERS:
        raise ConfigError(f"model.pattern_repeat: {len(m.layer_pattern)} layers x {m.pattern_repeat:,} = "
                          f"{len(m.layer_pattern) * m.pattern_repeat:,} layers, more than the {MAX_LAYERS:,}-layer "
                          "limit; lower model.pattern_repeat")


def estimate_graphs(cfg: BenchConfig) -> tuple[int, str]:
    """An upper estimate of how many graphs the ``cg`` config builds (the lists built on the way
    included), and the key that drives it: the estimate its grid family registers."""
    return graph_estimate(cfg.cg, cfg.engine)


def estimate_request_bytes(cfg: BenchConfig) -> int:
    """Peak memory of the simulated requests (a trace's count is known only once it is read)."""
    if cfg.workload.trace:
        return 0
    return cfg.workload.num_requests * BYTES_PER_REQUEST


# Rates the simulator's clock can represent: below these a step or an arrival gap is more than
# ~30 years (1e9 s) and sums of them lose all precision or overflow to infinity.
MIN_RATE = {"hardware.peak_flops": 1e6, "hardware.hbm_bandwidth": 1e6}
MAX_RATE = {"hardware.peak_flops": 1e24, "hardware.hbm_bandwidth": 1e21}
MAX_SIM_SECONDS = 1e9


def check_ranges(cfg: BenchConfig) -> None:
    h = cfg.hardware
    for key, eff_key in (("peak_flops", "flops_efficiency"), ("hbm_bandwidth", "bandwidth_efficiency")):
        name = f"hardware.{key}"
        effective = getattr(h, key) * getattr(h, eff_key)
        if not MIN_RATE[name] <= effective <= MAX_RATE[name]:
            raise ConfigError(f"{name}: {getattr(h, key):g} x hardware.{eff_key} {getattr(h, eff_key):g} = "
                              f"{effective:g} per second, outside the simulated range "
                              f"[{MIN_RATE[name]:g}, {MAX_RATE[name]:g}]")
    # the kernel classes' own rates (attention, the Mamba scan): a 1e-300 efficiency divides by zero
    for eff_key, key in (("attention_efficiency", "peak_flops"), ("scan_efficiency", "peak_flops"),
                         ("attention_bandwidth_efficiency", "hbm_bandwidth")):
        name, eff = f"hardware.{key}", getattr(h, eff_key)
        if isinstance(eff, (int, float)) and not MIN_RATE[name] <= getattr(h, key) * eff <= MAX_RATE[name]:
            raise ConfigError(f"hardware.{eff_key}: {getattr(h, key):g} x {eff:g} = {getattr(h, key) * eff:g} per "
                              f"second, outside the simulated range [{MIN_RATE[name]:g}, {MAX_RATE[name]:g}]")
    for f in dataclasses.fields(h):  # every host or GPU time (a sum of 1e300 us is infinite)
        v = getattr(h, f.name)
        if f.name.endswith("_us") and isinstance(v, (int, float)) and v * 1e-6 > MAX_SIM_SECONDS:
            raise ConfigError(f"hardware.{f.name}: {v:g} us is longer than {MAX_SIM_SECONDS:g} s")
    w = cfg.workload
    open_loop = "rate" in workload_source("arrival", w.arrival.process, "workload.arrival.process").reads
    if w.trace is None and open_loop and w.arrival.rate > 0:
        span = w.num_requests / w.arrival.rate
        if span > MAX_SIM_SECONDS:
            raise ConfigError(f"workload.arrival.rate: {w.num_requests:,} requests at {w.arrival.rate:g}/s arrive "
                              f"over about {span:.3g} s, more than {MAX_SIM_SECONDS:g} s; raise the rate")


def check_grid_size(cg: CGConfig, engine: EngineConfig) -> None:
    """Refuse a grid config whose graph lists would exceed ``MAX_GRAPHS`` (before building them)."""
    graphs, key = estimate_graphs(BenchConfig(cg=cg, engine=engine))
    if graphs > MAX_GRAPHS:
        raise ConfigError(f"{key}: cg.kind={cg.kind} would build about {graphs:,} graphs, more than the "
                          f"{MAX_GRAPHS:,}-graph limit; lower {key}")


def check_estimates(cfg: BenchConfig) -> None:
    check_grid_size(cfg.cg, cfg.engine)
    need, limit = estimate_request_bytes(cfg), memory_limit_bytes()
    if need > limit:
        raise ConfigError(f"workload.num_requests: {cfg.workload.num_requests:,} requests need about {_gib(need)} "
                          f"({BYTES_PER_REQUEST:,} bytes each), more than the {_gib(limit)} limit; lower "
                          f"workload.num_requests (or raise {MEMORY_LIMIT_ENV})")


def check_trace_memory(lines: int, where: str) -> None:
    """A trace of ``lines`` lines holds at most that many requests: refused before parsing when they
    would need more than the memory limit."""
    need, limit = lines * BYTES_PER_REQUEST, memory_limit_bytes()
    if need > limit:
        raise ConfigError(f"workload.trace: {where}: up to {lines:,} requests need about {_gib(need)} "
                          f"({BYTES_PER_REQUEST:,} bytes each), more than the {_gib(limit)} limit; use a "
                          f"shorter trace (or raise {MEMORY_LIMIT_ENV})")


def check_coverage_size(max_requests: int) -> None:
    """``cgbench grid``'s coverage tables hold (max_requests + 1)^2 cells each."""
    if max_requests > MAX_COVERAGE_REQUESTS:
        cells = (max_requests + 1) ** 2
        raise ConfigError(f"engine.max_requests: the coverage table of {max_requests:,} requests has {cells:,} "
                          f"cells ({_gib(cells * 8 * 12)}); the limit is {MAX_COVERAGE_REQUESTS:,} requests: "
                          "lower engine.max_requests")


def check_sweep_axis(key: str, sweep: object) -> None:
    """A Hydra ``range()`` axis: a zero or non-finite step, or more values than a sweep may hold,
    is refused before the values are listed."""
    start, stop, step = (getattr(sweep, k, None) for k in ("start", "stop", "step"))
    if step is None or start is None or stop is None:
        return  # a choice list: its values are already in memory
    if any(isinstance(v, float) and not math.isfinite(v) for v in (start, stop, step)):
        raise ConfigError(f"{key}: range({start}, {stop}, {step}) needs finite numbers")
    if step == 0:
        raise ConfigError(f"{key}: range({start}, {stop}, {step}): the step must not be 0")
    count = max(0, math.ceil((stop - start) / step))
    if count > MAX_SWEEP_POINTS:
        raise ConfigError(f"{key}: range({start}, {stop}, {step}) has {count:,} values, more than the "
                          f"{MAX_SWEEP_POINTS:,}-point limit of a sweep; use a larger step or split the sweep")


def check_sweep_points(axes: list[list[str]]) -> None:
    """The Cartesian product of the axes, refused before it is built when it is too large."""
    total = math.prod(len(a) for a in axes)
    if total > MAX_SWEEP_POINTS:
        sizes = " x ".join(str(len(a)) for a in axes if len(a) > 1)
        raise ConfigError(f"sweep: {sizes} = {total:,} points, more than the {MAX_SWEEP_POINTS:,}-point limit; "
                          "sweep fewer values or split the sweep")


def validate_within_limits(cfg: BenchConfig) -> BenchConfig:
    """The checks of the module docstring, in order; returns ``cfg``."""
    check_finite(cfg)
    check_names(cfg)
    check_sizes(cfg)
    validate(cfg)
    check_ranges(cfg)
    check_estimates(cfg)
    return cfg
