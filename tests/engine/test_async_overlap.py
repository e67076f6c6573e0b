"""Async overlap (``engine.async_overlap``, Megatron 0.19.2's async scheduling): a step that overlaps
scheduling with the previous forward records no gating wait (engine ~1695), so ``cg_wait_iters``
grows only on steps without overlap. Worked cases and the fast engine's equality with the oracle."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from cgbench.config.schema import CGConfig
from cgbench.workload.arrivals import RequestSpec
from tests.engine.test_fast_engine import _everything, _run
from tests.helpers import examples, make_cfg, run_engine, scenarios

EXAMPLES = examples(200)
# decode graphs and one prefill-only graph: a prompt that arrives while another request decodes misses
# (its candidate (T, 1, 1) has no graph) and is deferred until the decode finishes
GRAPHS = [[d, 0, d] for d in (1, 2, 4, 8)] + [[128, 1, 0]]


def _cfg(policy: str, overlap: bool, oracle: bool = False, chunked: bool = False):
    cfg = make_cfg(kind="transformer", policy=policy, chunked=chunked, cg=CGConfig(kind="explicit", graphs=GRAPHS),
                   max_requests=8, max_tokens=512, max_sequence_length=512, block_size=16,
                   async_overlap=overlap, oracle=oracle)
    return replace(cfg, policy=replace(cfg.policy, wait_timeout=replace(cfg.policy.wait_timeout, iters=3)))


REQS = [RequestSpec(0, 0.0, 10, 30), RequestSpec(1, 0.0001, 100, 5)]


@pytest.mark.parametrize("oracle", [False, True])
def test_waits_count_only_on_steps_without_overlap(oracle):
    """Request 0 prefills at step 0 and decodes until step 29; request 1 misses from step 1 on. The
    round after the prefill step has no overlap (its pending prefill output must be resolved): one
    wait. Every later round follows a decode-only step with nothing paused: overlap, no wait."""
    eng, st = run_engine(_cfg("megatron", False, oracle), REQS)
    late = {r.id: r for r in st.requests}[1]
    assert (eng.counters.deferral_events, late.max_cg_wait, late.first_admit_step) == (29, 29, 30)
    eng, st = run_engine(_cfg("megatron", True, oracle), REQS)
    late = {r.id: r for r in st.requests}[1]
    assert (eng.counters.deferral_events, late.max_cg_wait, late.first_admit_step) == (1, 1, 30)


@pytest.mark.parametrize("oracle", [False, True])
def test_a_wait_timeout_never_fires_while_the_engine_overlaps(oracle):
    # wait_timeout (iters=3) lets request 1 through eager after 3 waits; under overlap its counter
    # stays at 1, so it waits for the decode to finish, as Megatron's async engine would
    eng, st = run_engine(_cfg("wait_timeout", False, oracle), REQS)
    assert {r.id: r for r in st.requests}[1].first_admit_step == 4 and eng.counters.eager_admissions == 1
    eng, st = run_engine(_cfg("wait_timeout", True, oracle), REQS)
    assert {r.id: r for r in st.requests}[1].first_admit_step == 30 and eng.counters.eager_admissions == 0


def test_chunked_prefill_is_unaffected():
    # the chunked probe checks budgets only: a head the gate defers passed it, so the step has no overlap
    off = _everything(*run_engine(_cfg("megatron", False, chunked=True), REQS))
    on = _everything(*run_engine(_cfg("megatron", True, chunked=True), REQS))
    assert off == on


@pytest.mark.slow  # an oracle comparison over random configs
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_engine_equals_oracle_under_async_overlap(scenario):
    cfg, reqs = scenario
    cfg = replace(cfg, engine=replace(cfg.engine, async_overlap=True))
    fast = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=False)), reqs))
    slow = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs))
    assert fast == slow


def test_a_saved_round_replays_with_its_overlap():
    """A state saved from an async-overlap run carries ``batch.previous_prefill``: every round replays
    to the engine's own decision, waits included."""
    from cgbench.engine.replay import replay_round
    from cgbench.results.state_file import parse_state
    from tests.engine.test_schedule_cmd import run_and_snapshot

    for policy in ("megatron", "wait_timeout"):
        cfg = _cfg(policy, True, oracle=True)
        rounds = run_and_snapshot(cfg, REQS)
        assert any("previous_prefill" in snap["batch"] for snap, _, _ in rounds)
        for snap, want, _ in rounds:
            got = replay_round(parse_state(snap, "engine"), policy).to_json()
            assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("mode,value", [("async", "true"), ("legacy", "false")])
def test_megatrons_async_sched_mode_flag_translates(mode, value):
    from cgbench.config.megatron_args import translate

    t = translate(f"--inference-dynamic-batching-async-sched-mode {mode}")
    t.check()
    assert f"engine.async_overlap={value}" in t.overrides
