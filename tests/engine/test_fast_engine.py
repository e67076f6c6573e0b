"""The event-proportional engine equals the step-by-step oracle: every metric, the trace, every request."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from cgbench.config.schema import SloConfig
from cgbench.engine.core import Engine
from cgbench.engine.ep import EPEngine
from cgbench.engine.fast import FastEngine
from cgbench.pipeline import build_engine, metrics_of
from cgbench.results.metrics import graph_usage_records, request_record
from cgbench.workload.arrivals import ArrivalStream
from tests.helpers import examples, scenarios, tight_pools

EXAMPLES = examples(300)  # the deep profile raises it


def _run(cfg, reqs, concurrency=0, trace=True):
    eng = build_engine(cfg, trace=trace, stream=ArrivalStream(reqs, concurrency=concurrency))
    state = eng.run()
    return eng, state


def _everything(eng, state):
    return (metrics_of(eng, state, SloConfig()), graph_usage_records(state.stats, eng.grid.graphs),
            [t.to_json() for t in state.trace], [request_record(r) for r in state.requests])


@pytest.mark.slow  # an oracle comparison over random configs
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_engine_equals_oracle(scenario):
    cfg, reqs = scenario
    fast_cfg = replace(cfg, engine=replace(cfg.engine, oracle=False))
    slow_cfg = replace(cfg, engine=replace(cfg.engine, oracle=True))
    fast, fs = _run(fast_cfg, reqs)
    slow, ss = _run(slow_cfg, reqs)
    if cfg.engine.ep_size > 1:  # lockstep ranks are oracle cores whatever engine.oracle says (engine/ep.py)
        assert isinstance(fast, EPEngine) and isinstance(slow, EPEngine)
        assert all(type(rank) is Engine for rank in fast.ranks)
    else:
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


def test_eviction_inside_a_stretch_hands_back_to_the_scheduler():
    """Regression (found by the equality test at 4,000 examples): a block boundary inside a decode
    stretch evicted requests back to the queue, and the stretch went on without a round."""
    from cgbench.config.schema import CGConfig
    from cgbench.workload.arrivals import RequestSpec
    from tests.helpers import make_cfg

    cfg = make_cfg(kind="transformer", policy="budget", cg=CGConfig(num_cuda_graphs=None, all_prefills=False),
                   max_requests=8, max_tokens=64, max_sequence_length=64, block_size=16, kv_blocks=8,
                   num_speculative_tokens=1)
    reqs = [RequestSpec(i, 0.0, 1, o) for i, o in enumerate([18, 1, 1, 16, 16, 16, 18, 18, 1, 1])]
    fast = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=False)), reqs))
    slow = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs))
    assert fast == slow
    assert fast[0]["requests"]["evicted_events"] == 2  # the fewest right-most rows (design §5)


@pytest.mark.slow  # an oracle comparison over random configs
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(tight_pools())
def test_fast_engine_equals_oracle_on_tight_pools(scenario):
    """Tight KV pools with paused budgets > 0: pauses, resumes, multi-row evictions, re-queues behind a
    chunked head, both KV-corner settings."""
    cfg, reqs = scenario
    fast = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=False)), reqs))
    slow = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs))
    assert fast == slow


class _StepOnly:
    """A pricer that prices single steps only (as the calibrated cost model does)."""

    def __init__(self, pricer) -> None:
        self.name = pricer.name
        self.step_time = pricer.step_time


def test_a_pricer_without_stretch_methods_runs_the_same_steps():
    """The sim backend hands the fast engine a ``StretchPricer`` for any pricer: one without stretch
    methods is priced step by step (``PerStepPricing``), on the one-by-one and the numpy path alike."""
    from cgbench.backends.sim.backend import PerStepPricing, SimBackend
    from cgbench.backends.sim.factory import make_cost_model
    from cgbench.workload.arrivals import RequestSpec
    from tests.helpers import make_cfg

    cfg = make_cfg(kind="hybrid", policy="megatron", chunked=True)
    reqs = [RequestSpec(i, 0.003 * i, 40 + 7 * i, 150 + 13 * i) for i in range(12)]
    roofline = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    assert isinstance(SimBackend(_StepOnly(roofline)).pricer, PerStepPricing)
    assert SimBackend(roofline).pricer is roofline
    fast_cfg = replace(cfg, engine=replace(cfg.engine, oracle=False))
    oracle = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs, trace=False))
    assert oracle[0]["steps"] > 100
    for vector_min_steps in (64, 1):
        FastEngine.vector_min_steps = vector_min_steps
        try:
            for pricer in (roofline, _StepOnly(roofline)):
                eng = build_engine(fast_cfg, backend=SimBackend(pricer), stream=ArrivalStream(reqs))
                assert isinstance(eng, FastEngine)
                assert _everything(eng, eng.run()) == oracle
        finally:
            FastEngine.vector_min_steps = 64


def test_guard_after_a_gating_timeout_ends_the_stretch():
    """Regression (found by the equality test at 800 examples): a head let through on a wait_timeout
    and then stopped by the single-token guard admits nothing and has its wait counter reset, so the
    next round defers it again. The stretch took that round for a fixed point and skipped the
    deferrals of the rounds after it (4 deferral events instead of the oracle's 5)."""
    from cgbench.config.schema import CGConfig
    from cgbench.workload.arrivals import RequestSpec
    from tests.helpers import make_cfg

    cg = CGConfig(num_cuda_graphs=1, all_prefills=True, cuda_graph_max_tokens=16, non_decode=True,
                  distribution="linear", sizes_per_octave=1)
    cfg = make_cfg(kind="hybrid", policy="wait_timeout", chunked=True, cg=cg, max_requests=2, max_tokens=2,
                   max_sequence_length=64, block_size=16)
    cfg = replace(cfg, policy=replace(cfg.policy, wait_timeout=replace(cfg.policy.wait_timeout, iters=3)))
    reqs = [RequestSpec(0, 0.0, 1, 7), RequestSpec(1, 0.0, 2, 1)]
    fast = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=False)), reqs))
    slow = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs))
    assert fast == slow
    # three deferrals, the timeout round (let through, then held by the guard), two more deferrals
    assert [t["deferred"] for t in slow[2]][1:7] == [1, 1, 1, None, 1, 1]
    assert slow[0]["deferral_events"] == 5


def test_a_raise_before_the_rows_emit_counts_no_token_of_that_step():
    """Megatron's Mamba slot allocator raises at step 1's update before any decode row emits (six new
    states, one free slot): the fast engine's lazily counted rows must not count step 1's token
    (found by the property above; the oracle emits 1 token, the fast engine counted 2)."""
    from array import array

    from cgbench.config.schema import BenchConfig
    from cgbench.workload.arrivals import RequestSpec

    base = BenchConfig()
    cfg = replace(base, model=replace(base.model, layer_pattern="M-M*-"),
                  cg=replace(base.cg, num_cuda_graphs=None, all_prefills=False, cuda_graph_max_tokens=16),
                  policy=replace(base.policy, name="budget"),
                  engine=replace(base.engine, max_requests=16, max_tokens=512, max_sequence_length=300,
                                 block_size=16, ssm_chunk_alignment=16, check_invariants=True,
                                 prefix_caching=True, prefix_caching_mamba_slots=2))
    reqs = [RequestSpec(0, 0.0, 186, 6, array("q", range(100, 112))),
            RequestSpec(1, 0.001, 67, 6, array("q", range(200, 205))),
            RequestSpec(2, 0.001, 48, 3, array("q", range(300, 303)))]
    results = []
    for oracle in (False, True):
        eng, state = _run(replace(cfg, engine=replace(cfg.engine, oracle=oracle)), reqs)
        results.append(_everything(eng, state))
    (fast, slow) = results
    assert slow[0]["outcome"] == "engine_assertion" and "No evictable Mamba" in slow[0]["diagnosis"]
    assert slow[0]["output_tokens"] == 1  # request 0's first token, at step 0
    assert fast == slow


def test_a_head_stopped_by_a_prefix_span_after_its_gating_timeout_is_gated_afresh():
    """wait_timeout lets request 2 through after 3 deferrals (its counter reset), then the prefix span's
    budget check stops it (a 16-token prefix hit leaves one computed token, the 2-token budget holds a
    decode): the next round defers it again, so the fast engine may not repeat that round over a
    stretch (found by the property above: 23 deferrals against the oracle's 24)."""
    from array import array

    from cgbench.config.schema import BenchConfig
    from cgbench.workload.arrivals import RequestSpec

    base = BenchConfig()
    cfg = replace(base, model=replace(base.model, name="transformer", kind="transformer", layer_pattern="*-"),
                  cg=replace(base.cg, num_cuda_graphs=1, cuda_graph_max_tokens=16),
                  policy=replace(base.policy, name="wait_timeout",
                                 wait_timeout=replace(base.policy.wait_timeout, iters=3)),
                  engine=replace(base.engine, max_requests=2, max_tokens=2, max_sequence_length=64,
                                 block_size=16, megatron_rules="main", batch_invariant=True,
                                 ssm_chunk_alignment=16, chunked_prefill=True, check_invariants=True,
                                 prefix_caching=True))
    reqs = [RequestSpec(0, 0.0, 16, 1, array("q", [11])), RequestSpec(1, 0.0, 1, 6, array("q", [22])),
            RequestSpec(2, 0.0, 19, 1, array("q", [11, 33]))]
    (fast, slow) = (_everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=oracle)), reqs))
                    for oracle in (False, True))
    assert slow[0]["deferral_events"] > 3 and slow[0]["eager_steps"] == 0
    assert fast == slow
