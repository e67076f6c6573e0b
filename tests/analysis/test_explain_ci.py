"""``explain`` against the engine on every deferred request of the CI sweep's gating points
(conf/sweep/ci.yaml, policy megatron and defer: 32 points, 84 deferred requests, about 6 s).

The oracle here is a watcher of its own on a fresh step-by-step engine: for each request, the step
of the round that first deferred it and what that round admitted. ``explain`` must name the same
step, defer the same request there with the same admissions, and agree with the engine's round."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import pytest

from cgbench.analysis.explain_request import explain_all
from cgbench.analysis.sweep.plan import plan_sweep
from cgbench.pipeline import build_engine, run_point
from cgbench.results.deferrals import deferral_rows

pytestmark = pytest.mark.e2e  # explains every deferred request of the CI sweep


class FirstDeferrals:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.first: dict[int, tuple[int, tuple]] = {}

    def before(self, queue: deque) -> None:
        pass

    def after(self, result) -> None:
        d = result.deferred
        if d is not None and d.id not in self.first:
            admitted = tuple((a.request.id, a.chunk, a.final) for a in self.engine.ctx.admitted)
            self.first[d.id] = (self.engine.step, admitted)


def _gating_points():
    plan = plan_sweep(["sweep=ci"], out_dir=None)
    return [p for p in plan.points if p.cfg.policy.name in ("megatron", "defer")]


def test_explain_agrees_with_the_engine_on_every_deferred_request_of_the_ci_gating_points():
    points = _gating_points()
    assert len(points) == 32
    explained = 0
    for p in points:
        doc = run_point(p.cfg, list(p.overrides))
        rows = deferral_rows(doc["deferrals"])
        assert len(rows) == doc["metrics"]["deferred_requests"]
        engine = build_engine(replace(p.cfg, engine=replace(p.cfg.engine, oracle=True)))
        watch = FirstDeferrals(engine)
        engine.round_observer = watch
        engine.run()
        assert set(watch.first) == set(rows), p.overrides
        for e in explain_all(doc, "point"):
            step, admitted = watch.first[e.request]
            where = (p.overrides, e.request)
            assert e.agrees, where
            assert (e.step, e.decision.deferred, e.decision.admitted) == (step, e.request, admitted), where
            assert dict(e.decision.cg_wait_iters)[e.request] == 1, where  # a first deferral
            assert e.miss_reason is not None and e.decision.stop_reason == "deferred", where
            assert e.waits == rows[e.request], where
            explained += 1
    assert explained == _baseline_deferred_requests() == 84


def _baseline_deferred_requests() -> int:
    """The committed CI baseline's deferred requests over the same points (an independent count)."""
    import json
    from pathlib import Path

    total = 0
    for f in (Path(__file__).resolve().parents[2] / "results" / "baseline").glob("model*.json"):
        doc = json.loads(f.read_text())
        if doc["config"]["policy"]["name"] in ("megatron", "defer"):
            total += doc["metrics"]["deferred_requests"]
    return total
