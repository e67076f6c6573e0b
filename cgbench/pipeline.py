"""The composition root: config -> grid, policy, workload stream, backend, engine -> one result document.

Each part is built once, here, and handed only the settings it reads. ``run_point`` returns the
complete document, every metric and every health flag included, whoever asks (``cgbench run``, a
sweep point, advise): the commands only print and write it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from cgbench.backends.sim.capture import grid_capture_estimate
from cgbench.backends.sim.factory import host_cost_label
from cgbench.backends.sim.log_calibration import log_calibration_of
from cgbench.config.labels import run_labels
from cgbench.config.plain import config_dict
from cgbench.config.schema import REQUIRED_PERCENTILES, BenchConfig, EngineConfig, PolicyConfig, SloConfig
from cgbench.engine import build
from cgbench.engine.build import Topology
from cgbench.engine.contract import StepBackend
from cgbench.engine.core import Engine, RunState
from cgbench.engine.dp import DPEngine
from cgbench.engine.ep import EPEngine, ep_graphs
from cgbench.engine.gating import GatingStatus, gating_status
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.scheduler import gating_without_prefill_graphs
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.grids.megatron import idle_mixed_prefill_count
from cgbench.results.deferrals import deferral_record
from cgbench.results.document import environment, provenance
from cgbench.results.health import (
    explain_wait_limit,
    gating_flag,
    health_warnings,
    link_state_file,
    throughput_collapse,
    ttft_collapse,
)
from cgbench.results.load_metrics import load_metrics
from cgbench.results.metrics import graph_usage_records, request_record
from cgbench.results.peer_metrics import peer_metrics
from cgbench.results.percentiles import percentiles_in_effect
from cgbench.results.prefix_metrics import prefix_metrics
from cgbench.results.small_metrics import ledger_metrics
from cgbench.results.spec_metrics import spec_metrics
from cgbench.workload.stream import RequestStream, make_stream, open_workload
from cgbench.workload.trace_summary import TraceSummary


def make_backend(cfg: BenchConfig, grid: Grid) -> tuple[StepBackend, str, str | None]:
    """(backend, device description, torch version or None)."""
    if cfg.backend.name == "torch":
        from cgbench.backends.torch.backend import TorchBackend  # imports torch: only on request

        backend = TorchBackend(cfg.model, cfg.engine, cfg.backend, seed=cfg.seed, grid=grid)
        return backend, backend.device_name, backend.torch_version
    from cgbench.backends.sim.backend import SimBackend
    from cgbench.backends.sim.factory import make_cost_model

    cost = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    backend = SimBackend(cost)
    return backend, backend.device, None


def run_device(cfg: BenchConfig) -> str | None:
    """The device a ``backend=torch`` run runs on (cpu, cuda), its label; None on the simulator."""
    if cfg.backend.name != "torch":
        return None
    from cgbench.backends.torch.probe import device_kind

    return device_kind(cfg.backend.device)


def build_engine(cfg: BenchConfig, *, trace: bool = False, backend: StepBackend | None = None,
                 grid: Grid | None = None, stream: RequestStream | None = None) -> Engine | EPEngine | DPEngine:
    """The engine for ``cfg`` (``cgbench.engine.build``); ``backend``, ``grid`` and ``stream`` when the
    caller built them already. The event-proportional engine runs whenever the backend prices its
    steps (``backend.pricer``), unless ``engine.oracle`` asks for the step-by-step one (or a plug-in's
    own policy object, or a stochastic ``engine.spec_acceptance``, needs it)."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    if backend is None:
        backend, _, _ = make_backend(cfg, grid)
    if stream is None:
        stream = make_stream(cfg.workload, cfg.seed)
    return build.build_engine(build.Parts(cfg, grid, make_policy(cfg.policy), backend, trace), stream)


def gating_of(cfg: BenchConfig, grid: Grid | None = None) -> GatingStatus:
    """Whether ``cfg``'s run gates admission, and why (``engine.gating.gating_status``)."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    cg, grid, why = ep_graphs(cfg, grid)  # expert parallelism may turn prefill graphs off
    return gating_status(make_policy(cfg.policy), cg, grid, non_decode_off_by=why)


def preflight_warnings(cfg: BenchConfig, grid: Grid | None = None) -> list[dict[str, str]]:
    """Warnings about a config, known before it runs (``{code, message}``, one line each): for
    ``cgbench run``, ``grid`` and ``schedule`` to print on stderr first."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    msg = gating_without_prefill_graphs(make_policy(cfg.policy), cfg.cg, grid,
                                        chunked_prefill=cfg.engine.chunked_prefill)
    out = [{"code": "gating_without_prefill_graphs", "message": msg}] if msg else []
    idle = idle_mixed_prefill_count(cfg.cg, cfg.engine)
    if idle:
        out.append({"code": "mixed_prefill_count_no_effect", "message": idle})
    return out


def metrics_of(engine: Topology, state: RunState, slo: SloConfig,
               engine_cfg: EngineConfig | None = None, percentiles: Sequence[int] = REQUIRED_PERCENTILES, *,
               open_loop: bool = False) -> dict[str, Any]:
    """The run's metrics, its summaries reporting ``percentiles`` (``metrics.percentiles``): those of
    every run and the peers' set, then the blocks of the engine's topology (``ep``, ``dp``), the prefix
    cache's (one engine's KV pool), when ``engine_cfg`` speculates the ``spec`` block, and when
    ``open_loop`` (arrivals fixed in advance) the ``load`` block if they span some time."""
    # numpy first: the metrics need it (the gap histogram's fold, the large-ledger path). Imported
    # here a tiny run measured 20 ms less than when the fold imported it (medians of 6 whole runs; the
    # cause, inside numpy's typing modules, was not found)
    import numpy  # noqa: F401

    counters = engine.counters
    with percentiles_in_effect(percentiles):
        # the peers' block first: its arrays are then freed before the inter-token gaps are folded into
        # the histogram's arrays, which the run keeps (the lower peak memory of a long run)
        peers = peer_metrics(state.stats, state.requests, makespan_s=state.now_s)
        m = ledger_metrics(state.stats, state.requests, makespan_s=state.now_s, slo=slo, outcome=state.outcome,
                           diagnosis=state.diagnosis, counters=asdict(counters))
        m.update(peers)
    if open_loop:
        load = load_metrics(state.requests, state.now_s)
        if load is not None:
            m["load"] = load
    m["gating_active"] = engine.gating_active
    m["num_graphs"] = len(engine.grid.graphs)
    m.update(engine.metric_blocks())
    pc = engine.prefix_cache
    if pc is not None:
        m["prefix_cache"] = prefix_metrics(pc.counters, counters.prefix_full_size_deferrals)
    if engine_cfg is not None and engine_cfg.num_speculative_tokens > 0:
        ranks = engine.ranks
        kind = "event_proportional" if all(r.event_proportional for r in ranks) else "step_by_step"
        m["spec"] = spec_metrics(engine_cfg, state.stats, m["output_tokens"], [r.ctx.acceptance for r in ranks],
                                 engine.dummy_steps, kind)
    return m


def run_point(cfg: BenchConfig, overrides: list[str] | None = None, *, trace: bool = False,
              requests: bool = False) -> dict[str, Any]:
    """Run one benchmark point and return its complete result document."""
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    backend, device, torch_version = make_backend(cfg, grid)
    stream, trace_summary = open_workload(cfg.workload, cfg.seed)
    engine = build_engine(cfg, trace=trace, backend=backend, grid=grid, stream=stream)
    state = engine.run()
    doc: dict[str, Any] = provenance()
    doc["overrides"] = list(overrides or [])
    doc["labels"] = run_labels(cfg, doc["overrides"], device=run_device(cfg))
    doc["labels"]["host_cost"] = host_cost(cfg)
    doc["config"] = config_dict(cfg)
    doc["environment"] = environment(cfg.backend.name, device, torch_version)
    calibration = log_calibration_of(cfg.hardware) if cfg.backend.name == "sim" else None
    if calibration is not None:  # the production log the cost model was fitted to
        doc["environment"]["calibration"] = calibration.describe()
    doc["metrics"] = metrics_of(engine, state, cfg.slo, cfg.engine, cfg.metrics.percentiles,
                                open_loop=cfg.workload.open_loop)
    gating = gating_of(cfg, grid)
    if gating.active != doc["metrics"]["gating_active"]:
        raise AssertionError(f"gating: the engine ran with gating_active={doc['metrics']['gating_active']}, "
                             f"the condition says {gating.text}")
    doc["gating"] = gating.to_json()  # the metric's why, for every table that shows it
    if trace_summary is not None:
        doc["trace"] = trace_summary.to_json()
    doc["deferrals"] = deferral_record(state.requests)  # what ``cgbench explain`` reads
    doc["warnings"] = point_warnings(cfg, grid, doc["metrics"], trace_summary, doc["deferrals"])
    doc["graph_usage"] = graph_usage_records(state.stats, [tuple(g) for g in grid.graphs])
    doc["capture"] = grid_capture_estimate(grid, cfg.model, cfg.hardware, cfg.engine)
    extra = backend.report()
    if extra is not None:
        doc["backend_report"] = extra
    if trace:
        doc["steps"] = [s.to_json() for s in state.trace]
    if requests:
        doc["requests"] = [_request_doc(r, backend) for r in state.requests]
    return doc


def host_cost(cfg: BenchConfig) -> str:
    """What priced the run's host time per op, and from where (the header's ``host`` part)."""
    if cfg.backend.name != "sim":
        return f"measured: backend={cfg.backend.name} runs the model (no host model)"
    return host_cost_label(cfg.backend, cfg.hardware)


def point_warnings(cfg: BenchConfig, grid: Grid, metrics: dict[str, Any], trace: TraceSummary | None = None,
                   deferrals: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every warning a result carries: the config's (known before it ran), the run's health flags
    and, for a gating flag on the simulator, the throughput and p99 TTFT comparisons with the no-gating
    ``budget`` policy (``throughput_collapse``, ``ttft_collapse``: one more simulation, of that policy)."""
    flags = preflight_warnings(cfg, grid) + health_warnings(metrics, cfg, trace, deferrals)
    if gating_flag(flags) is not None and cfg.backend.name == "sim" and cfg.policy.name != "budget":
        no_gating = simulate(replace(cfg, policy=PolicyConfig(name="budget")))
        flags += [f for f in (throughput_collapse(metrics, no_gating), ttft_collapse(metrics, no_gating))
                  if f is not None]
    return flags


def simulate(cfg: BenchConfig) -> dict[str, Any]:
    """The metrics of ``cfg``'s run, nothing else of its document."""
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    backend, _, _ = make_backend(cfg, grid)
    engine = build_engine(cfg, backend=backend, grid=grid)
    return metrics_of(engine, engine.run(), cfg.slo, cfg.engine, cfg.metrics.percentiles,
                      open_loop=cfg.workload.open_loop)


def explain_gating_flag(cfg: BenchConfig, doc: dict[str, Any], state_path: Path) -> dict[str, Any] | None:
    """The ``cgbench schedule`` state of the first case of ``doc``'s gating flag, for the caller to
    save at ``state_path`` (the flag then names that file). None without a gating flag, off the
    simulator, under expert parallelism (no single engine state), or when no round shows it; a
    data-parallel run's (``ep_size`` 1) is the first rank's round that shows it.

    A second, step-by-step simulation up to that round: the run itself used the event-proportional
    engine, which stretches repeated deferral rounds without watching each, and only its result
    says which wait the flag is about, so the state cannot be taken during the run without making
    every run watch every round."""
    from cgbench.engine.long_wait import run_dp_to_long_wait, run_to_long_wait

    flag = gating_flag(doc["warnings"])
    if flag is None or cfg.backend.name != "sim" or cfg.engine.ep_size > 1:
        return None
    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    engine = build_engine(oracle)
    limit = explain_wait_limit(doc["metrics"], cfg, flag)
    if isinstance(engine, DPEngine) and cfg.engine.ep_size == 1:  # a rank's round (its description says which)
        state = run_dp_to_long_wait(engine, oracle, limit)
    else:
        assert isinstance(engine, Engine)  # ep_size 1, dp_size 1: one engine core
        state = run_to_long_wait(engine, oracle, limit)
    if state is not None:
        link_state_file(flag, state_path)
    return state


def _request_doc(r, backend: StepBackend) -> dict[str, Any]:
    rec = request_record(r)
    tokens = backend.token_ids(r)
    if tokens:
        rec["token_ids"] = tokens
    return rec
