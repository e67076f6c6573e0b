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
from cgbench.config.labels import run_labels
from cgbench.config.schema import REQUIRED_PERCENTILES, BenchConfig, EngineConfig, PolicyConfig, SloConfig
from cgbench.engine.contract import StepBackend
from cgbench.engine.core import Engine, RunState
from cgbench.engine.dp import DPEngine
from cgbench.engine.ep import EPEngine
from cgbench.engine.fast import FastEngine
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.scheduler import gating_active, gating_without_prefill_graphs
from cgbench.engine.selection import runs_step_by_step
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
from cgbench.results.metrics import compute_metrics, graph_usage_records, request_record
from cgbench.results.peer_metrics import peer_metrics
from cgbench.results.percentiles import percentiles_in_effect
from cgbench.results.prefix_metrics import prefix_metrics
from cgbench.results.spec_metrics import spec_metrics
from cgbench.workload.prefix_model import prefix_source_tokens
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
    """The engine for ``cfg``; ``backend``, ``grid`` and ``stream`` when the caller built them already.
    The event-proportional engine runs whenever the backend prices its steps (``backend.pricer``),
    unless ``engine.oracle`` asks for the step-by-step one (or a plug-in's own policy object, or a
    stochastic ``engine.spec_acceptance``, needs it)."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    if backend is None:
        backend, _, _ = make_backend(cfg, grid)
    if stream is None:
        stream = make_stream(cfg.workload, cfg.seed)
    policy = make_policy(cfg.policy)
    if cfg.engine.dp_size > 1:  # data-parallel ranks behind the coordinator (cgbench.engine.dp)
        return DPEngine(cfg, grid, policy, backend, stream, trace=trace)
    if cfg.engine.ep_size > 1:  # lockstep ranks: oracle cores (see cgbench.engine.ep for why)
        return EPEngine(cfg, grid, policy, backend, stream, trace=trace)
    gating = gating_active(policy, cfg.cg, grid)
    prefix = build_prefix_cache(cfg)
    if runs_step_by_step(cfg.engine, backend, policy):
        return Engine(cfg.engine, grid, policy, backend, stream, gating=gating, trace=trace, prefix=prefix,
                      seed=cfg.seed)
    return FastEngine(cfg.engine, grid, policy, backend, stream, gating=gating, trace=trace,
                      pricer=backend.pricer, prefix=prefix)


def build_prefix_cache(cfg: BenchConfig) -> PrefixCache | None:
    """The KV pool's prefix cache when ``engine.prefix_caching`` is on: the engine's block size, the
    size of the workload's source blocks, and on a hybrid model its Mamba-state slots."""
    e = cfg.engine
    if not e.prefix_caching:
        return None
    return PrefixCache(e.block_size, prefix_source_tokens(cfg.workload) or e.block_size,
                       hybrid=cfg.model.kind == "hybrid", mamba_slots=e.prefix_caching_mamba_slots)


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


def metrics_of(engine: Engine | EPEngine | DPEngine, state: RunState, slo: SloConfig,
               engine_cfg: EngineConfig | None = None,
               percentiles: Sequence[int] = REQUIRED_PERCENTILES) -> dict[str, Any]:
    """The run's metrics, its summaries reporting ``percentiles`` (``metrics.percentiles``);
    ``engine_cfg`` adds the ``spec`` block when it speculates."""
    sched = engine.counters
    counters = {"deferral_events": sched.deferral_events, "snap_splits": sched.snap_splits,
                "starvation_warnings": sched.starvation_warnings, "eager_admissions": sched.eager_admissions}
    with percentiles_in_effect(percentiles):
        m = compute_metrics(state.stats, state.requests, makespan_s=state.now_s, slo=slo, outcome=state.outcome,
                            diagnosis=state.diagnosis, counters=counters)
        m.update(peer_metrics(state.stats, state.requests, makespan_s=state.now_s))
    m["gating_active"] = engine.gating_active
    m["num_graphs"] = len(engine.grid.graphs)
    if isinstance(engine, EPEngine):
        m["ep"] = engine.ep_metrics()
    if isinstance(engine, DPEngine):
        m["dp"] = engine.dp_metrics()
        if engine.ep_size > 1:
            m["ep"] = engine.ep_metrics()
    elif not isinstance(engine, EPEngine) and engine.ctx.prefix is not None:
        m["prefix_cache"] = prefix_metrics(engine.ctx.prefix.counters, sched.prefix_full_size_deferrals)
    if engine_cfg is not None and engine_cfg.num_speculative_tokens > 0:
        m["spec"] = _spec_block(engine, state, engine_cfg, m["output_tokens"])
    return m


def _spec_block(engine: Engine | EPEngine | DPEngine, state: RunState, e: EngineConfig,
                output_tokens: int) -> dict[str, Any]:
    ranks = engine.ranks if isinstance(engine, (EPEngine, DPEngine)) else [engine]
    models = [rank.ctx.acceptance for rank in ranks]
    groups = [engine] if isinstance(engine, EPEngine) else engine.ep_groups if isinstance(engine, DPEngine) else []
    dummies = sum(s.dummy_steps for g in groups for s in g.rank_stats)
    kind = "event_proportional" if all(isinstance(r, FastEngine) for r in ranks) else "step_by_step"
    return spec_metrics(e, state.stats, output_tokens, models, dummies, kind)


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
    doc["config"] = asdict(cfg)
    doc["environment"] = environment(cfg.backend.name, device, torch_version)
    doc["metrics"] = metrics_of(engine, state, cfg.slo, cfg.engine, cfg.metrics.percentiles)
    if trace_summary is not None:
        doc["trace"] = trace_summary.to_json()
    doc["warnings"] = point_warnings(cfg, grid, doc["metrics"], trace_summary)
    doc["graph_usage"] = graph_usage_records(state.stats, [tuple(g) for g in grid.graphs])
    doc["capture"] = grid_capture_estimate(grid, cfg.model, cfg.hardware, cfg.engine)
    doc["deferrals"] = deferral_record(state.requests)  # what ``cgbench explain`` reads
    extra = backend.report()
    if extra is not None:
        doc["backend_report"] = extra
    if trace:
        doc["steps"] = [s.to_json() for s in state.trace]
    if requests:
        doc["requests"] = [_request_doc(r, backend) for r in state.requests]
    return doc


def point_warnings(cfg: BenchConfig, grid: Grid, metrics: dict[str, Any],
                   trace: TraceSummary | None = None) -> list[dict[str, Any]]:
    """Every warning a result carries: the config's (known before it ran), the run's health flags
    and, for a gating flag on the simulator, the throughput and p99 TTFT comparisons with the no-gating
    ``budget`` policy (``throughput_collapse``, ``ttft_collapse``: one more simulation, of that policy)."""
    flags = preflight_warnings(cfg, grid) + health_warnings(metrics, cfg, trace)
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
    return metrics_of(engine, engine.run(), cfg.slo, cfg.engine, cfg.metrics.percentiles)


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
    if flag is None or cfg.backend.name != "sim":
        return None
    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    engine = build_engine(oracle)
    limit = explain_wait_limit(doc["metrics"], cfg)
    if isinstance(engine, DPEngine) and cfg.engine.ep_size == 1:  # a rank's round (its description says which)
        state = run_dp_to_long_wait(engine, oracle, limit)
    elif not isinstance(engine, Engine):
        return None
    else:
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
