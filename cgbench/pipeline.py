"""The composition root: config -> grid, policy, workload stream, backend, engine -> one result document.

Each part is built once, here, and handed only the settings it reads.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from cgbench.backends.sim.capture import grid_capture_estimate
from cgbench.config.labels import run_labels
from cgbench.config.schema import BenchConfig, SloConfig
from cgbench.engine.contract import StepBackend
from cgbench.engine.core import Engine, RunState
from cgbench.engine.ep import EPEngine
from cgbench.engine.fast import FastEngine
from cgbench.engine.policies import make_policy
from cgbench.engine.scheduler import gating_active, gating_without_prefill_graphs
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.results.document import environment, provenance
from cgbench.results.health import health_warnings
from cgbench.results.metrics import compute_metrics, graph_usage_records, request_record
from cgbench.workload.stream import RequestStream, make_stream


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
                 grid: Grid | None = None, stream: RequestStream | None = None) -> Engine | EPEngine:
    """The engine for ``cfg``; ``backend``, ``grid`` and ``stream`` when the caller built them already.
    The event-proportional engine runs whenever the backend prices its steps (``backend.pricer``),
    unless ``engine.oracle`` asks for the step-by-step one."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    if backend is None:
        backend, _, _ = make_backend(cfg, grid)
    if stream is None:
        stream = make_stream(cfg.workload, cfg.seed)
    policy = make_policy(cfg.policy)
    if cfg.engine.ep_size > 1:  # lockstep ranks: oracle cores (see cgbench.engine.ep for why)
        return EPEngine(cfg, grid, policy, backend, stream, trace=trace)
    gating = gating_active(policy, cfg.cg, grid)
    if cfg.engine.oracle or backend.pricer is None:
        return Engine(cfg.engine, grid, policy, backend, stream, gating=gating, trace=trace)
    return FastEngine(cfg.engine, grid, policy, backend, stream, gating=gating, trace=trace,
                      pricer=backend.pricer)


def preflight_warnings(cfg: BenchConfig, grid: Grid | None = None) -> list[dict[str, str]]:
    """Warnings about a config, known before it runs (``{code, message}``, one line each): for
    ``cgbench run``, ``grid`` and ``schedule`` to print on stderr first."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    msg = gating_without_prefill_graphs(make_policy(cfg.policy), cfg.cg, grid,
                                        chunked_prefill=cfg.engine.chunked_prefill)
    return [{"code": "gating_without_prefill_graphs", "message": msg}] if msg else []


def metrics_of(engine: Engine | EPEngine, state: RunState, slo: SloConfig) -> dict[str, Any]:
    sched = engine.scheduler.counters
    counters = {"deferral_events": sched.deferral_events, "snap_splits": sched.snap_splits,
                "starvation_warnings": sched.starvation_warnings, "eager_admissions": sched.eager_admissions}
    m = compute_metrics(state.stats, state.requests, makespan_s=state.now_s, slo=slo, outcome=state.outcome,
                        diagnosis=state.diagnosis, counters=counters)
    m["gating_active"] = engine.scheduler.gating_active
    m["num_graphs"] = len(engine.grid.graphs)
    if isinstance(engine, EPEngine):
        m["ep"] = engine.ep_metrics()
    return m


def run_point(cfg: BenchConfig, overrides: list[str] | None = None, *, trace: bool = False,
              requests: bool = False) -> dict[str, Any]:
    """Run one benchmark point and return its result document."""
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    backend, device, torch_version = make_backend(cfg, grid)
    engine = build_engine(cfg, trace=trace, backend=backend, grid=grid)
    state = engine.run()
    doc: dict[str, Any] = provenance()
    doc["overrides"] = list(overrides or [])
    doc["labels"] = run_labels(cfg, doc["overrides"], device=run_device(cfg))
    doc["config"] = asdict(cfg)
    doc["environment"] = environment(cfg.backend.name, device, torch_version)
    doc["metrics"] = metrics_of(engine, state, cfg.slo)
    doc["warnings"] = preflight_warnings(cfg, grid) + health_warnings(doc["metrics"], cfg)
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


def _request_doc(r, backend: StepBackend) -> dict[str, Any]:
    rec = request_record(r)
    tokens = backend.token_ids(r)
    if tokens:
        rec["token_ids"] = tokens
    return rec
