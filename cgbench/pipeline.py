"""Config -> engine + backend -> one result document (the JSON of DESIGN.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from cgbench.config.labels import run_labels
from cgbench.config.schema import BenchConfig
from cgbench.engine.core import Engine, RunState, StepBackend
from cgbench.engine.fast import FastEngine
from cgbench.engine.policies import make_policy
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.results.document import environment, provenance
from cgbench.results.health import health_warnings
from cgbench.results.metrics import compute_metrics, graph_usage_records, request_record
from cgbench.workload.stream import ArrivalStream, make_stream


def make_backend(cfg: BenchConfig) -> tuple[StepBackend, str, str | None]:
    """(backend, device description, torch version or None)."""
    if cfg.backend.name == "torch":
        from cgbench.backends.torch.backend import TorchBackend  # imports torch: only on request

        backend = TorchBackend(cfg)
        return backend, backend.device_name, backend.torch_version
    from cgbench.backends.sim.backend import SimBackend
    from cgbench.backends.sim.factory import make_cost_model

    cost = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    return SimBackend(cost), SimBackend.device, None


def build_engine(cfg: BenchConfig, *, trace: bool = False, backend: StepBackend | None = None,
                 grid: Grid | None = None, stream: ArrivalStream | None = None) -> Engine:
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    if backend is None:
        backend, _, _ = make_backend(cfg)
    if stream is None:
        stream = make_stream(cfg.workload, cfg.seed)
    engine_cls = Engine if cfg.engine.oracle or cfg.backend.name != "sim" else FastEngine
    return engine_cls(cfg, grid, make_policy(cfg.policy), backend, stream, trace=trace)


def metrics_of(engine: Engine, state: RunState) -> dict[str, Any]:
    sched = engine.scheduler.counters
    counters = {"deferral_events": sched.deferral_events, "snap_splits": sched.snap_splits,
                "starvation_warnings": sched.starvation_warnings, "eager_admissions": sched.eager_admissions}
    m = compute_metrics(state.stats, state.requests, makespan_s=state.now_s, has_clock=engine.backend.has_clock,
                        slo=engine.cfg.slo, outcome=state.outcome, diagnosis=state.diagnosis, counters=counters)
    m["gating_active"] = engine.scheduler.gating_active
    m["num_graphs"] = len(engine.grid.graphs)
    return m


def run_point(cfg: BenchConfig, overrides: list[str] | None = None, *, trace: bool = False,
              requests: bool = False) -> dict[str, Any]:
    """Run one benchmark point and return its result document."""
    backend, device, torch_version = make_backend(cfg)
    engine = build_engine(cfg, trace=trace, backend=backend)
    state = engine.run()
    doc: dict[str, Any] = provenance()
    doc["overrides"] = list(overrides or [])
    doc["labels"] = run_labels(cfg, doc["overrides"])
    doc["config"] = asdict(cfg)
    doc["environment"] = environment(cfg.backend.name, device, torch_version)
    doc["metrics"] = metrics_of(engine, state)
    doc["warnings"] = health_warnings(doc["metrics"], cfg)
    doc["graph_usage"] = graph_usage_records(state.stats, [tuple(g) for g in engine.grid.graphs])
    extra = getattr(backend, "report", None)
    if callable(extra):
        doc["backend_report"] = extra()
    if trace:
        doc["steps"] = [s.to_json() for s in state.trace]
    if requests:
        doc["requests"] = [request_record(r) for r in state.requests]
    return doc
