"""The one event loop (``cgbench.engine.drive``): its one-unit path is the general loop, faster; the
watchdog's stretch limit is the first step at which it fires; the loop's stop and stall rules."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.config.schema import CGConfig, SloConfig
from cgbench.engine.drive import Drive, Watchdog
from cgbench.pipeline import build_engine, metrics_of
from cgbench.results.metrics import graph_usage_records, request_record
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import examples, make_cfg, scenarios, specs


def _everything(eng, state):
    return (metrics_of(eng, state, SloConfig()), graph_usage_records(state.stats, eng.grid.graphs),
            [t.to_json() for t in state.trace], [request_record(r) for r in state.requests])


def _driven(cfg, reqs, how: str, concurrency: int = 0):
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs, concurrency=concurrency))
    drive = Drive(eng)
    state = drive.run_one() if how == "one" else drive.run_many()
    return _everything(eng, state)


@pytest.mark.slow  # two runs of random configs
@settings(max_examples=examples(100), suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([0, 0, 3]))
def test_the_one_unit_path_is_the_general_loop(scenario, concurrency):
    """One engine (fast or step by step) or one EP group: the specialised loop and the general one run
    the same steps, so every metric, the trace and every request agree."""
    cfg, reqs = scenario
    assert _driven(cfg, reqs, "one", concurrency) == _driven(cfg, reqs, "many", concurrency)


@given(st.integers(0, 50), st.integers(0, 300), st.integers(0, 300))
def test_the_first_firing_step_is_where_the_watchdog_first_fires(stall_steps, last_progress, bound):
    dog = Watchdog(stall_steps)
    first = dog.first_firing(last_progress, bound)
    assert dog.fires(first, last_progress, bound)
    assert not any(dog.fires(s, last_progress, bound) for s in range(first))


def test_the_step_bound_is_four_steps_a_token_and_a_thousand():
    eng = build_engine(make_cfg(policy="budget"), stream=ArrivalStream(specs((10, 5), (7, 3))))
    for spec in specs((10, 5), (7, 3)):
        eng.arrive(spec)
    assert eng.step_bound == Watchdog.bound(25) == 4 * 25 + 1000


def test_an_idle_engine_with_work_left_stalls_with_its_last_rounds_diagnosis():
    """Gating defers the only request forever (no prefill graph, non-chunked): nothing runs and
    nothing more arrives, so the loop ends the run stalled, with the head's diagnosis."""
    cfg = make_cfg(kind="hybrid", policy="megatron", cg=CGConfig(kind="explicit", graphs=[[4, 0, 4]]),
                   stall_steps=50)
    eng = build_engine(cfg, stream=ArrivalStream([RequestSpec(0, 0.0, 100, 4)]))
    state = eng.run()
    assert state.outcome == "stalled" and state.stats.steps == 0
    assert state.diagnosis.startswith("head request 0 ") and "50 idle rounds" in state.diagnosis
