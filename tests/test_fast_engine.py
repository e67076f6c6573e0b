"""The event-proportional engine equals the step-by-step oracle: every metric, the trace, every request."""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings

from cgbench.arrivals import ArrivalStream
from cgbench.engine import Engine
from cgbench.fast_engine import FastEngine
from cgbench.metrics import graph_usage_records, request_record
from cgbench.runner import build_engine, metrics_of
from tests.test_engine_properties import scenarios

EXAMPLES = int(os.environ.get("CGBENCH_EXAMPLES", "300"))  # raise locally for a deeper check


def _run(cfg, reqs, concurrency=0, trace=True):
    eng = build_engine(cfg, trace=trace, stream=ArrivalStream(reqs, concurrency=concurrency))
    state = eng.run()
    return eng, state


def _everything(eng, state):
    return (metrics_of(eng, state), graph_usage_records(state.stats, eng.grid.graphs),
            [t.to_json() for t in state.trace], [request_record(r) for r in state.requests])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_engine_equals_oracle(scenario):
    cfg, reqs = scenario
    fast_cfg = replace(cfg, engine=replace(cfg.engine, oracle=False))
    slow_cfg = replace(cfg, engine=replace(cfg.engine, oracle=True))
    fast, fs = _run(fast_cfg, reqs)
    slow, ss = _run(slow_cfg, reqs)
    assert isinstance(fast, FastEngine) and type(slow) is Engine
    f, s = _everything(fast, fs), _everything(slow, ss)
    assert f[0] == s[0]
    assert f[1] == s[1]
    assert f[2] == s[2]
    assert f[3] == s[3]
    # without --trace the fast engine evaluates stretches a chunk at a time (numpy): same results
    FastEngine.vector_min_steps = 1  # every stretch through the numpy path
    try:
        quick = _everything(*_run(fast_cfg, reqs, trace=False))
    finally:
        FastEngine.vector_min_steps = 64
    assert quick[0] == s[0] and quick[1] == s[1] and quick[3] == s[3]
