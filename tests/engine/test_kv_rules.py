"""The KV rule sets (``engine.megatron_rules``): each rule Megatron-LM main changed, a worked case read
from its commit, beside what megatron-core 0.19.2 does with the same state.

Commits (``git show COMMIT -- PATH`` in the Megatron-LM snapshot):

* #5950 ``1a8e3f8b`` ``megatron/core/inference/engines/dynamic_engine.py`` ``_add_request`` (the hunk
  at L1138-1155) and its test ``test_generation_within_tight_kv_pool``.
* #5995 ``d0151a92`` ``megatron/core/inference/contexts/dynamic_context.py``
  ``resume_paused_requests`` (hunk at L3384-3516), ``evict_overflow_paused_requests`` (L3539-3600),
  the ``update_requests`` assertion (L4159-4168), ``dynamic_engine.py`` ``_add_request`` (usable blocks
  = ``pool_size - 1``), and the tests ``test_resume_uses_entire_shared_block_pool``,
  ``test_eviction_balances_released_blocks_with_resume_allocations`` and
  ``test_update_requests_allows_every_request_to_be_evicted`` in
  ``tests/unit_tests/inference/contexts/test_dynamic_context.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.config.schema import MEGATRON_RULES, CGConfig, ConfigError, validate
from cgbench.engine.context import Context
from cgbench.engine.kv_rules import MEGATRON_RULES as RULE_SETS
from cgbench.engine.kv_rules import kv_rules
from cgbench.engine.request import Outcome, make_request
from tests.helpers import make_cfg, run_engine, specs

NO_ALL_PREFILLS = replace(CGConfig(), all_prefills=False)


def _tiny(rules, **engine):
    base = dict(max_requests=4, max_tokens=64, max_sequence_length=64, block_size=4)
    base.update(engine)
    return make_cfg(kind="transformer", policy="megatron", chunked=False, cg=NO_ALL_PREFILLS,
                    megatron_rules=rules, **base)


def _ctx(rules: str, *, active: int, budget: int, free: int, block: int = 16) -> Context:
    return Context(max_requests=8, max_tokens=64, max_sequence_length=128, block_size=block,
                   num_speculative_tokens=0, active_blocks=active, paused_block_budget=budget,
                   free_blocks=free, rules=kv_rules(rules))


def _row(i: int, blocks: int, kv: int):
    r = make_request(i, kv, 64, 128)
    r.blocks, r.kv_tokens = blocks, kv
    return r


def test_the_config_names_every_rule_set_and_refuses_others():
    assert tuple(RULE_SETS) == MEGATRON_RULES == ("0.19.2", "main")
    assert make_cfg().engine.megatron_rules == "0.19.2"
    with pytest.raises(ConfigError, match="engine.megatron_rules"):
        validate(make_cfg(megatron_rules="0.20"))


# -- #5950: the arrival check counts the tokens a request stores -------------------------------------

@pytest.mark.parametrize("spec,exact", [(0, 249), (2, 247)])
def test_5950_arrival_counts_prompt_plus_generated_minus_one_plus_drafts(spec, exact):
    """Megatron's own case (test_generation_within_tight_kv_pool): 256-token blocks, an 8-token prompt;
    8 + (G - 1) + spec = 256 fits one block exactly, one more token does not."""
    main, old = kv_rules("main").arrival_blocks, kv_rules("0.19.2").arrival_blocks
    assert main(8, exact, spec, 256) == 1
    assert main(8, exact + 1, spec, 256) == 2
    # 0.19.2 counts prompt + G, drafts never: 257 tokens (2 blocks) without drafts, 255 and 256 with 2,
    # so it admits the request main refuses (its last step's drafts need a second block)
    assert old(8, exact, spec, 256) == (2 if spec == 0 else 1)
    assert old(8, exact + 1, spec, 256) == 2 - (spec > 0)
    assert main(8, 1, 3, 256) == 1 and main(300, 1, 0, 256) == 2  # G = 1: the prompt alone, no drafts


@pytest.mark.parametrize("oracle", [True, False])
def test_5950_an_exact_fit_request_runs_under_main_and_fails_at_arrival_under_0192(oracle):
    cfg = dict(max_requests=4, max_tokens=512, max_sequence_length=512, block_size=256, kv_blocks=1,
               oracle=oracle)
    _, state = run_engine(_tiny("main", **cfg), specs((8, 249)))
    assert state.outcome == "completed" and state.requests[0].generated == 249
    _, state = run_engine(_tiny("0.19.2", **cfg), specs((8, 249)))
    assert state.requests[0].fail_reason == "kv_block_overflow"
    _, state = run_engine(_tiny("main", **cfg), specs((8, 250)))  # one stored token too many
    assert state.requests[0].fail_reason == "kv_block_overflow"


# -- #5995: one shared pool; resume counts only new blocks ------------------------------------------

def test_5995_resume_uses_the_whole_shared_pool():
    """test_resume_uses_entire_shared_block_pool: pool_size 5 (4 usable blocks), paused_limit 3, so
    0.19.2's active partition would be 1 block. An active row holds 2 blocks; the paused row holds 1,
    full, and needs 1 new block; 1 block is free. Main resumes it; 0.19.2 (1 active block - 2 held
    < 1 + 1) does not."""
    paused = [_row(0, 1, 16)]  # last block full (offset 15 = block_size - 1)
    assert kv_rules("main").resumable(_ctx("main", active=1, budget=3, free=1), paused, 2, 7) == 1
    assert kv_rules("0.19.2").resumable(_ctx("0.19.2", active=1, budget=3, free=1), paused, 2, 7) == 0


def test_5995_resume_needs_no_block_for_a_row_whose_last_block_has_room():
    """Only rows with a full last block count (``needs_new_block``): with no free block at all, the
    right-most rows with room resume until the first that needs one."""
    paused = [_row(0, 1, 16), _row(1, 2, 20), _row(2, 1, 5)]
    ctx = _ctx("main", active=8, budget=0, free=0)
    assert kv_rules("main").resumable(ctx, paused, 0, 7) == 2
    assert kv_rules("main").resumable(ctx, paused, 0, 1) == 1  # capped by the free row slots first


# -- #5995: eviction keeps the budgeted prefix, evicts the smallest funding suffix --------------------

def test_5995_eviction_balances_released_blocks_with_resume_allocations():
    """test_eviction_balances_released_blocks_with_resume_allocations: 8 usable blocks, paused_limit 2,
    four paused rows of 2 full blocks each, nothing free, no active row. The budget keeps row 10;
    evicting the right-most row (13) frees 2 blocks, enough for rows 11 and 12 to resume."""
    paused = [_row(10 + i, 2, 32) for i in range(4)]
    ctx = _ctx("main", active=6, budget=2, free=0)
    assert kv_rules("main").evict_count(ctx, paused, 8) == 1
    ctx.free_blocks += paused[-1].blocks  # row 13 released; then resume, from the right
    assert kv_rules("main").resumable(ctx, paused[:3], 0, 8) == 2


def test_5995_eviction_differs_from_0192_when_the_overflow_rows_need_no_block():
    """Same rows with room left in their last blocks: main evicts nothing (they resume with no new
    block); 0.19.2 evicts the fewest right-most rows whose blocks cover the overflow rows left paused."""
    paused = [_row(10 + i, 2, 20) for i in range(4)]
    assert kv_rules("main").evict_count(_ctx("main", active=6, budget=2, free=0), paused, 8) == 0
    assert kv_rules("0.19.2").evict_count(_ctx("0.19.2", active=6, budget=2, free=0), paused, 8) == 1


def test_5995_eviction_of_every_row_and_the_row_slot_cap():
    """test_update_requests_allows_every_request_to_be_evicted: one usable block, paused_limit 0, the
    sole row full and needing another: it is evicted. And survivors never exceed the free row slots."""
    assert kv_rules("main").evict_count(_ctx("main", active=1, budget=0, free=0), [_row(10, 1, 16)], 8) == 1
    rows = [_row(i, 1, 5) for i in range(3)]  # need no block, but only one row slot is free
    assert kv_rules("main").evict_count(_ctx("main", active=8, budget=0, free=5), rows, 1) == 2


def test_5995_update_requests_allows_every_request_to_be_evicted():
    """The engine side of the same case: the update leaves no row at all. 0.19.2 asserts (its
    ``active_request_count > 0 or chunked`` check); main accepts an empty context and re-queues the
    evicted request."""
    from cgbench.pipeline import build_engine
    from cgbench.workload.arrivals import ArrivalStream

    outcomes = {}
    for rules in MEGATRON_RULES:
        eng = build_engine(_tiny(rules, block_size=16, kv_blocks=1), stream=ArrivalStream([]))
        r = make_request(10, 16, 8, 64)
        r.start_prefill(16)
        eng.ctx.add_request(r, 16)
        eng.ctx.admitted = []
        r.kv_tokens, r.generated = 16, 1
        eng.rows.add([r], 1, 0.0)
        eng.order = [r]
        eng._kv_pressure([r], None)
        outcomes[rules] = (eng.state.outcome, [q.id for q in eng.queue], eng.ctx.free_blocks)
    assert outcomes["0.19.2"][0] == "engine_assertion"
    assert outcomes["main"] == ("completed", [10], 1)
    assert eng.queue[0].remaining_prompt == 17  # re-prefilled with its generated token


@pytest.mark.parametrize("oracle", [True, False])
def test_5995_a_paused_budget_no_longer_starves_the_running_rows(oracle):
    """Megatron 0.19.2's assertion corner (test_kv_pressure's rule 6 case: a 3-block active pool,
    a 2-block paused budget, a 15-token sequence needing 4 blocks): under main the budget blocks are
    part of the running pool, so the request simply runs to its end."""
    cfg = dict(max_tokens=16, kv_blocks=3, paused_blocks=2, oracle=oracle)
    _, state = run_engine(_tiny("0.19.2", **cfg), specs((7, 8)))
    assert state.outcome == "engine_assertion"
    _, state = run_engine(_tiny("main", **cfg), specs((7, 8)))
    assert state.outcome == "completed"
    assert state.requests[0].outcome == Outcome.COMPLETED and state.stats.evicted_events == 0


@pytest.mark.parametrize("oracle", [True, False])
def test_5995_one_active_block_and_a_one_block_budget(oracle):
    """The smallest case found by a random search: 4-token blocks, kv_blocks 1 + paused_blocks 1, one
    request (1, 5). Its fifth token needs a second block: 0.19.2 cannot grant it from a 1-block active
    pool and the budget keeps the row paused, so nothing is active and Megatron asserts; main grants
    the free budget block."""
    cfg = dict(kv_blocks=1, paused_blocks=1, oracle=oracle)
    _, state = run_engine(_tiny("0.19.2", **cfg), specs((1, 5)))
    assert state.outcome == "engine_assertion" and "cannot resume" in state.diagnosis
    _, state = run_engine(_tiny("main", **cfg), specs((1, 5)))
    assert state.outcome == "completed" and state.requests[0].generated == 5


def test_a_state_file_records_the_rule_set_and_replays_with_it():
    """``cgbench schedule`` state files carry every engine key: the rule set (and batch-invariant mode)
    round-trips, and the replayed round's context and scheduler run under it."""
    import json

    from cgbench.engine.replay import replay_round, state_from_engine
    from cgbench.pipeline import build_engine
    from cgbench.results.state_file import parse_state

    cfg = make_cfg(kind="hybrid", chunked=True, cg=NO_ALL_PREFILLS, max_requests=8, max_tokens=256,
                   max_sequence_length=1024, block_size=64, megatron_rules="main", batch_invariant=True)
    eng = build_engine(cfg)
    eng.ctx.begin_round(0, 0)
    r = make_request(0, 257, 4, 1024)
    r.start_prefill(257)
    eng.queue.append(r)
    doc = json.loads(json.dumps(state_from_engine(eng, cfg)))
    assert doc["engine"]["megatron_rules"] == "main" and doc["engine"]["batch_invariant"] is True
    state = parse_state(doc)
    assert state.context().rules is kv_rules("main")
    assert replay_round(state, "megatron").to_json()["admitted"] == [[0, 128, False]]  # the SSM floor
    doc["engine"]["megatron_rules"] = "0.19.2"
    with pytest.raises(ConfigError, match="engine.batch_invariant"):
        parse_state(doc)
