"""Megatron main's hybrid SSM state handoff pinning (engine.handoff_pinning; #6584 ``731b7914``):
``check_availability`` in ``megatron/core/inference/contexts/dynamic_context.py`` (the hunk at
L3097-3107) also needs ``mamba_state_free_slot_count > 0`` when the allocator's
``enable_handoff_pinning`` is set for a hybrid model, and a handoff keeps its live slot until
``release_handoff_blocks`` (``disaggregation/inference_state_handoff.py``). Worked case: the commit's
``test_hybrid_admission_resumes_after_handoff_releases_live_slot``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.config.schema import CGConfig, ConfigError, validate
from cgbench.engine.context import Context
from cgbench.engine.handoff import HandoffPins
from cgbench.engine.request import make_request
from tests.helpers import make_cfg, run_engine, specs

NO_GATING = replace(CGConfig(), all_prefills=False)


def _cfg(**engine):
    base = dict(max_requests=2, max_tokens=64, max_sequence_length=64, block_size=16, megatron_rules="main",
                handoff_pinning=True, handoff_release_steps=3)
    base.update(engine)
    return make_cfg(kind="hybrid", policy="megatron", cg=NO_GATING, **base)


def test_admission_resumes_after_the_handoff_releases_its_live_slot():
    """max_requests 1; the only slot is detached for a handoff: the next request is not available
    until the handoff is released."""
    ctx = Context(max_requests=1, max_tokens=64, max_sequence_length=64, block_size=16, num_speculative_tokens=0,
                  active_blocks=8, paused_block_budget=0, free_blocks=8, handoff=HandoffPins(2))
    ctx.handoff.pin(finish_step=4)  # pinned for the rounds of steps 5 and 6
    req = make_request(1, 16, 4, 64)
    req.start_prefill(16)
    for step, available in ((5, False), (6, False), (7, True)):
        ctx.begin_round(0, 0)
        ctx.pinned_slots = ctx.handoff.pinned_at(step)
        assert ctx.check_availability(req)[0] is available, step
    assert ctx.handoff.next_release_after(4) is None  # released


@pytest.mark.parametrize("oracle", [True, False])
def test_a_pinned_slot_holds_the_next_request_back_while_decodes_run(oracle):
    """Two slots: request 0 (one token) finishes in step 0 and pins its slot for 3 rounds; request 1
    decodes meanwhile, so request 2 waits for the release (round 4) instead of joining at round 1."""
    reqs = specs((4, 1), (4, 20), (4, 2))
    _, state = run_engine(_cfg(oracle=oracle), reqs)
    assert state.outcome == "completed"
    assert [r.first_admit_step for r in state.requests] == [0, 0, 4]
    _, state = run_engine(_cfg(oracle=oracle, handoff_pinning=False), reqs)
    assert [r.first_admit_step for r in state.requests] == [0, 0, 1]


@pytest.mark.parametrize("oracle", [True, False])
def test_an_idle_engine_waits_for_the_pulls(oracle):
    """Every slot pinned and nothing running: the engine does not step, so it waits for the pulls (all
    pinned slots are released) rather than stalling."""
    _, state = run_engine(_cfg(oracle=oracle, handoff_release_steps=50), specs((4, 1), (4, 1), (4, 1)))
    assert state.outcome == "completed"
    assert [r.first_admit_step for r in state.requests] == [0, 0, 1]


@pytest.mark.parametrize("ranks", [dict(ep_size=2), dict(dp_size=2), dict(dp_size=2, ep_size=2)],
                         ids=["ep2", "dp2", "dp2xep2"])
def test_idle_parallel_ranks_wait_for_the_pulls_too(ranks):
    """Under expert or data parallelism every idle rank with its slots pinned waits for the pulls as one
    engine does, rather than stalling (found by the invariant property: max_requests 2, ep_size 2,
    1-token requests). Each rank admits two requests a round, so the eight requests on two ranks are
    admitted in two rounds."""
    eng, state = run_engine(_cfg(handoff_release_steps=50, **ranks), specs(*[(1, 1)] * 8))
    assert state.outcome == "completed", state.diagnosis
    assert [r.first_admit_step for r in state.requests] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_pinning_is_main_and_hybrid_only():
    with pytest.raises(ConfigError, match="engine.megatron_rules=main"):
        validate(_cfg(megatron_rules="0.19.2"))
    with pytest.raises(ConfigError, match="hybrid"):
        validate(make_cfg(kind="transformer", megatron_rules="main", handoff_pinning=True))
    validate(_cfg())
