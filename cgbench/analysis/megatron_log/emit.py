"""``cgbench run --emit-megatron-log FILE``: a simulated run written as Megatron's console log.

The run is simulated again with the step-by-step engine and a backend that watches each step
(``StepWatch``): its shape, graph and duration, and the engine's state when it ran (queue, paused
requests, the KV blocks its requests hold, evictions so far). That second run must be the run: its
step counts and step times are checked against the result's metrics before anything is written.
Then every logged step becomes one line in the step-line format of the run's Megatron rule set
(``engine.megatron_rules``: 0.19.2 writes megatron-core 0.19's, main writes main's), through the
same pieces the reader parses (``cgbench.workload.megatron_log_format``).

What each field holds, as Megatron defines it: ``step`` counts steps from 1 (Megatron logs after
its counter moved on); ``time`` is the step's simulated duration; ``reqs: a`` the step's requests
(``P + D``), ``p`` the paused ones, ``w`` those queued while it ran, ``f`` the requests completed by
its end and ``e`` the evictions by its end; ``blocks`` the simulator's KV pool: blocks held by the
step's requests and by paused ones, the pool's active part and the paused budget (main's
``allocatable``: the free blocks). The wall clock starts at 00:00:00. Not simulated, written as 0:
``mem`` (tensor count, allocated and reserved GB) and the capture pool sizes. A header names the
run (model, grid and its digest, policy, hardware, host µs per op, seed), so a reader can tell an
emitted log from Megatron's and refuse one of another model or grid by name.
"""

from __future__ import annotations

import gzip
import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cgbench.backends.sim.host_profiles import host_profile
from cgbench.backends.sim.watched import WatchedBackend
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.engine.contract import StepWork
from cgbench.engine.ledger import COMPLETED
from cgbench.engine.request import Request
from cgbench.grids.build import build_grid
from cgbench.pipeline import build_engine, make_backend, metrics_of
from cgbench.workload import megatron_log_format as fmt
from cgbench.workload.megatron_log import EMITTED_MARK

# the metrics the watched re-run must reproduce exactly (else it is not the run)
CHECKED_METRICS = ("steps", "graphed_steps", "eager_steps", "eager_steps_by_reason", "graphed_time_s",
                   "eager_time_s", "makespan_s")


def log_version(cfg: BenchConfig) -> str:
    """The step-line format of the run's Megatron rule set."""
    return fmt.MAIN if cfg.engine.megatron_rules == "main" else fmt.V019


def grid_digest(graphs: Sequence[tuple[int, int, int]]) -> str:
    """A short digest of a graph list in stored order (what the header and the reader compare)."""
    text = ";".join(f"{t},{p},{d}" for t, p, d in graphs)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def check_emittable(cfg: BenchConfig) -> None:
    """Refuse, before the run, what cannot be written as one rank's log."""
    if cfg.backend.name != "sim":
        raise ConfigError("--emit-megatron-log: writes a simulated run (backend=sim); a real engine run "
                          "is logged by Megatron itself")
    e = cfg.engine
    if e.num_speculative_tokens > 0 or e.prefix_caching:
        raise ConfigError("--emit-megatron-log: with " + ("speculative decoding" if e.num_speculative_tokens > 0
                                                          else "prefix caching")
                          + " Megatron's step line carries cumulative suffixes (acceptance, prefix-cache hits) "
                          "the simulator does not keep per step: such a run is not emitted")
    if cfg.engine.ep_size > 1 or cfg.engine.dp_size > 1:
        raise ConfigError("--emit-megatron-log: writes one rank's log; an expert- or data-parallel run "
                          f"(engine.ep_size={cfg.engine.ep_size}, engine.dp_size={cfg.engine.dp_size}) is "
                          "not emitted")


class StepWatch(WatchedBackend):
    """The ``sim`` backend's prices, with each step's shape, graph, duration and engine state kept
    (compact arrays). ``engine`` is set once the engine is built."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.engine: Any = None
        self.columns: dict[str, array] = {name: array("q") for name in (
            "T", "P", "D", "gT", "gP", "gD", "queued", "paused", "active_used", "paused_used", "free",
            "evicted_before")}
        self.durations = array("d")

    def __len__(self) -> int:
        return len(self.durations)

    def run_step(self, work: StepWork, decodes: Sequence[Request]) -> float:
        duration = self.priced(work, decodes)
        e, c = self.engine, self.columns
        graph = work.graph or (-1, -1, -1)
        held = sum(r.blocks for r in decodes) + sum(a.request.blocks for a in work.admitted)
        for name, value in (("T", work.tokens), ("P", work.prefills), ("D", work.decodes), ("gT", graph[0]),
                            ("gP", graph[1]), ("gD", graph[2]), ("queued", len(e.queue)),
                            ("paused", len(e.paused)), ("active_used", held),
                            ("paused_used", sum(r.blocks for r in e.paused)), ("free", e.ctx.free_blocks),
                            ("evicted_before", e.state.stats.evicted_events)):
            c[name].append(value)
        self.durations.append(duration)
        return duration


@dataclass(frozen=True)
class Emitted:
    data: bytes  # the file's bytes (gzip'd for a .gz name)
    lines: int  # step lines written
    steps: int  # steps of the run
    version: str


def header_lines(cfg: BenchConfig, graphs: Sequence[tuple[int, int, int]], interval: int, version: str) -> list[str]:
    """The emitted log's own lines: what ran (read back by the reader), what is not simulated."""
    hw = cfg.hardware
    op_us = hw.host_op_us if hw.host_op_us is not None else host_profile(hw).op_us
    fields = {"model": cfg.model.name, "model_kind": cfg.model.kind, "grid": cfg.cg.kind, "graphs": len(graphs),
              "grid_digest": grid_digest(graphs), "policy": cfg.policy.name, "hardware": hw.name,
              "host_op_us": op_us, "host_calibration": hw.host_calibration or "none", "tp": cfg.engine.tp_size,
              "block_size": cfg.engine.block_size, "chunked_prefill": cfg.engine.chunked_prefill,
              "rules": cfg.engine.megatron_rules, "seed": cfg.seed, "interval": interval}
    return [EMITTED_MARK + " ".join(f"{k}={v}" for k, v in fields.items()),
            f"cgbench: a simulated run (cgbench run --emit-megatron-log), in Megatron {version}'s step-line format; "
            "blocks are the simulator's KV pool; mem and the capture pool sizes are not simulated (written as 0)"]


def _clock(t_s: float) -> str:
    whole = int(t_s)
    return f"{whole // 3600 % 24:02d}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def watched_run(cfg: BenchConfig, metrics: dict[str, Any]) -> tuple[StepWatch, Any, Any]:
    """The run again, watched step by step; checked against ``metrics`` (the result's)."""
    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    grid = build_grid(oracle.cg, oracle.engine, oracle.model)
    backend, _, _ = make_backend(oracle, grid)
    watch = StepWatch(backend)
    engine = build_engine(oracle, backend=watch, grid=grid)
    watch.engine = engine
    state = engine.run()
    again = metrics_of(engine, state, oracle.slo, oracle.engine)
    for key in CHECKED_METRICS:
        if again.get(key) != metrics.get(key):
            raise AssertionError(f"--emit-megatron-log: the watched re-run differs from the run in {key}: "
                                 f"{again.get(key)!r} != {metrics.get(key)!r}")
    return watch, state, grid


def log_text(cfg: BenchConfig, metrics: dict[str, Any], *, interval: int = 1, rank: int = 0) -> tuple[str, int, int]:
    """The log of ``cfg``'s run (whose metrics are ``metrics``): (text, step lines, steps)."""
    if interval < 1:
        raise ConfigError(f"--emit-megatron-log: the logging interval must be >= 1, got {interval}")
    check_emittable(cfg)
    watch, state, grid = watched_run(cfg, metrics)
    version = log_version(cfg)
    graphs = [tuple(g) for g in grid.graphs]
    lines = header_lines(cfg, graphs, interval, version)  # type: ignore[arg-type]
    if graphs:
        lines.append("> dynamic_engine.py: building cuda graphs for ")
        lines += [fmt.shape_text(g) for g in graphs]  # type: ignore[arg-type]
        lines += [fmt.capture_line(i, len(graphs), g) for i, g in enumerate(graphs, 1)]  # type: ignore[arg-type]
    finish = state.requests.int_column("finish_step")
    fate = state.requests.int_column("fate")
    finished_at = [0] * (len(watch) + 1)
    for step, outcome in zip(finish, fate, strict=True):
        if outcome == COMPLETED and 0 <= step < len(watch):
            finished_at[step] += 1
    e = cfg.engine
    c = watch.columns
    pool, budget = state_pool(cfg)
    evicted_total = state.stats.evicted_events
    done = 0
    t = 0.0
    written = 0
    for i in range(len(watch)):
        t += watch.durations[i]
        done += finished_at[i]
        if (i + 1) % interval:
            continue
        P = c["P"][i]
        graph = None if c["gT"][i] < 0 else (c["gT"][i], c["gP"][i], c["gD"][i])
        evicted = c["evicted_before"][i + 1] if i + 1 < len(watch) else evicted_total
        values = fmt.LineValues(
            rank=rank, step=i + 1, clock=_clock(t), ms=watch.durations[i] * 1000.0,
            kind="non-decode" if P else "decode", real=(c["T"][i], P, c["D"][i]), graph=graph,
            active=P + c["D"][i], max_requests=e.max_requests, paused=c["paused"][i], waiting=c["queued"][i],
            finished=done, evicted=evicted, active_used=c["active_used"][i], active_total=pool,
            paused_used=c["paused_used"][i], paused_total=budget, allocatable=c["free"][i])
        lines.append(fmt.format_line(values, version, color=P == 0))
        written += 1
    return "\n".join(lines) + "\n", written, len(watch)


def state_pool(cfg: BenchConfig) -> tuple[int, int]:
    """(the KV pool's active blocks, the paused budget) of ``cfg``'s engine."""
    e = cfg.engine
    return e.resolved_kv_blocks(), e.paused_blocks


def log_bytes(cfg: BenchConfig, metrics: dict[str, Any], path: str | Path, *, interval: int = 1,
              rank: int = 0) -> Emitted:
    """The bytes of ``cfg``'s run as Megatron's log, for ``path`` (gzip'd when its name ends in
    ``.gz``); ``metrics``: the run's, which the watched re-run must reproduce."""
    text, lines, steps = log_text(cfg, metrics, interval=interval, rank=rank)
    data = text.encode("utf-8")
    if Path(path).name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    return Emitted(data, lines, steps, log_version(cfg))

