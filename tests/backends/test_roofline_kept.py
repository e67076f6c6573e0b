"""``make_roofline`` keeps the last few roofline models by their records' content and shares them, price
caches included: a kept model prices every step as a fresh one does, whatever it priced before and in
whatever order, and a run's metrics do not depend on the runs before it in the process."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.backends.sim import factory
from cgbench.config.schema import BenchConfig, EngineConfig
from cgbench.engine.contract import StepWork
from cgbench.grids.build import build_grid
from cgbench.pipeline import run_point


def _work(cfg: BenchConfig, prefill_tokens: int, prefills: int, decodes: int, graphed: bool) -> StepWork:
    """A step of ``decodes`` decode rows and ``prefills`` chunks of ``prefill_tokens`` in all, replaying
    the smallest graph that covers it when ``graphed`` (eager when none does)."""
    prefill_tokens = max(prefill_tokens, prefills) if prefills else 0
    tokens = prefill_tokens + decodes
    graph = None
    if graphed:
        shapes = [tuple(g) for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs]
        covering = [g for g in shapes if g[0] >= tokens and g[1] >= prefills and g[2] >= decodes]
        graph = min(covering) if covering else None
    return StepWork(tokens, prefills, decodes, tokens + 64 * decodes, graph, None, None if graph else "no_graph")


def test_equal_records_share_one_model_and_other_records_do_not():
    factory._ROOFLINES.clear()
    cfg = BenchConfig()
    first = factory.make_roofline(cfg.model, cfg.hardware, cfg.engine)
    again = factory.make_roofline(dataclasses.replace(cfg.model), dataclasses.replace(cfg.hardware),
                                  dataclasses.replace(cfg.engine))
    assert again is first
    other_tp = factory.make_roofline(cfg.model, cfg.hardware, EngineConfig(tp_size=2))
    other_hw = factory.make_roofline(cfg.model, dataclasses.replace(cfg.hardware, hbm_bandwidth=1e12), cfg.engine)
    assert other_tp is not first and other_hw is not first and other_tp is not other_hw


shapes = st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 8), st.integers(1, 64), st.booleans()),
                  min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_a_kept_model_prices_as_a_fresh_one_in_any_order(steps):
    cfg = BenchConfig()
    kept = factory.make_roofline(cfg.model, cfg.hardware, cfg.engine)  # warm from earlier examples and tests
    works = [_work(cfg, t, p, d, g) for t, p, d, g in steps]
    warm = [kept.step_time(w) for w in works]
    fresh = factory._build_roofline(cfg.model, cfg.hardware, cfg.engine)
    cold = [fresh.step_time(w) for w in reversed(works)][::-1]
    assert warm == cold


def test_a_run_does_not_depend_on_the_runs_before_it():
    overrides = ["workload=small", "workload.num_requests=16"]
    cfg = BenchConfig()
    cfg.workload.num_requests = 16
    other = dataclasses.replace(cfg, seed=cfg.seed + 1)
    factory._ROOFLINES.clear()
    alone = run_point(cfg, overrides)["metrics"]
    run_point(other, overrides)  # shares the model and fills its caches with other shapes
    after = run_point(cfg, overrides)["metrics"]
    assert after == alone
