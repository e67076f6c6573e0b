"""KV pressure as Megatron 0.19.2 handles it, row by row: each of the six rules (docs/design.md §5),
the smallest case step by step, the two corners where Megatron stops, and properties over tight pools."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from cgbench.config.schema import CGConfig
from cgbench.engine.core import Engine
from cgbench.engine.fast import FastEngine
from cgbench.engine.request import Outcome, make_request
from cgbench.engine.rows import compact_finished, evict_count, pause_swap, rotate_into_evicted
from tests.helpers import core_of_class, examples, make_cfg, needs_python_engine, run_engine, specs, tight_pools

NO_ALL_PREFILLS = replace(CGConfig(), all_prefills=False)


def _tiny(**engine):
    base = dict(max_requests=4, max_tokens=64, max_sequence_length=64, block_size=4)
    base.update(engine)
    return make_cfg(kind="transformer", policy="megatron", chunked=False, cg=NO_ALL_PREFILLS, **base)


# -- the smallest case: three requests, a six-block pool --------------------------------------------

@pytest.mark.parametrize("oracle", [True, False])
def test_smallest_case_step_by_step(oracle):
    """Prompts 3, 4, 2, ten tokens each, 4-token blocks, 6 blocks: request 1 (the middle row) is the
    one evicted after step 4, re-prefilled with its 5 tokens appended at step 10; finish steps 9/14/9."""
    eng, state = run_engine(_tiny(kv_blocks=6, oracle=oracle), specs((3, 10), (4, 10), (2, 10)))
    assert isinstance(eng, Engine if oracle else FastEngine)
    assert state.outcome == "completed"
    assert [t.real for t in state.trace] == (
        [(9, 3, 0)] + [(3, 0, 3)] * 4 + [(2, 0, 2)] * 5 + [(9, 1, 0)] + [(1, 0, 1)] * 4)
    assert state.trace[0].admitted == [(0, 3, True), (1, 4, True), (2, 2, True)]
    assert state.trace[10].admitted == [(1, 9, True)]  # prompt 4 + 5 generated tokens
    assert [r.finish_step for r in state.requests] == [9, 14, 9]
    assert [r.evictions for r in state.requests] == [0, 1, 0]
    assert state.stats.evicted_events == 1


# -- rule 1: the eviction count -------------------------------------------------------------------

def test_rule1_evicts_the_fewest_rows_covering_the_overflow_left_paused():
    # budget 0: every paused row overflows (3 rows); the right-most row alone frees 1 block < 2 rows
    # left paused; the right-most two free 2 >= 1 row left paused: two go, not three
    assert evict_count([2, 1, 1], 0) == 2
    # one big right-most row covers the other two overflow rows
    assert evict_count([1, 1, 3], 0) == 1
    # within the budget nothing goes; a budget covering a left run leaves only the rest to overflow
    assert evict_count([2, 2], 4) == 0
    assert evict_count([2, 2, 1, 1], 4) == 1  # overflow 2; right-most frees 1 >= 1 left paused
    assert evict_count([2], 1) == 1  # a lone overflow row always goes (there is no "one may overflow")


# -- rule 2: re-queue order ---------------------------------------------------------------------

def _engine(**engine):
    from cgbench.pipeline import build_engine
    from cgbench.workload.arrivals import ArrivalStream

    return build_engine(_tiny(**engine), stream=ArrivalStream([]))


def test_rule2_evicted_rows_go_to_the_front_in_reverse_row_order_behind_a_chunked_head():
    eng = _engine(kv_blocks=16)
    a, b, c, w = (make_request(i, 4, 8, 64) for i in range(4))
    for r in (a, b):
        r.generated = 3
    eng.queue.append(w)
    eng._requeue([a, b])  # a left of b in the paused region
    assert [r.id for r in eng.queue] == [1, 0, 3]
    assert (a.remaining_prompt, b.remaining_prompt) == (7, 7)  # prompt + generated
    eng.queue.clear()
    eng.chunked = c
    eng.queue.extend([c, w])
    eng._requeue([a, b])
    assert [r.id for r in eng.queue] == [2, 1, 0, 3]


# -- rule 3: row order ----------------------------------------------------------------------------

def test_rule3_finished_slots_are_filled_by_the_survivors_right_of_the_boundary():
    rows = list("abcdef")
    holes = compact_finished(rows, {1, 3})  # b and d finish: k = 4; e, f fill b's and d's slots
    assert rows == list("aecf") and holes == [1, 3]
    rows = list("abcdef")
    compact_finished(rows, {4})  # e finishes: k = 5, f (right of it) moves into e's slot
    assert rows == list("abcdf")
    rows = list("abcdef")
    compact_finished(rows, {5})  # the last row finishes: nobody moves
    assert rows == list("abcde")


def test_rule3_pausing_rows_swap_pairwise_with_staying_rows():
    # c and e pause (m = 2): a and b (left of the boundary, staying) swap in order with c and e
    paused, active = pause_swap(list("abcde"), {2, 4})
    assert paused == ["c", "e"] and active == ["a", "d", "b"]
    # a pausing row already left of the boundary keeps its place
    paused, active = pause_swap(list("abcd"), {0, 3})
    assert paused == ["a", "d"] and active == ["c", "b"]


def test_rule3_eviction_moves_the_right_most_active_rows_to_the_left():
    assert rotate_into_evicted(list("abcd"), 1) == list("dabc")
    assert rotate_into_evicted(list("abcd"), 2) == list("cdab")
    assert rotate_into_evicted(list("ab"), 3) == list("ab")


def test_rule3_resumed_rows_join_the_active_region_on_its_left():
    eng = _engine(kv_blocks=16)
    reqs = [make_request(i, 3, 8, 64) for i in range(3)]
    for r in reqs:  # three rows holding 4 tokens in one block each: each needs a block to go on
        r.start_prefill(3)
        eng.ctx.add_request(r, 3)
        r.kv_tokens = 4
    eng.ctx.admitted = []
    eng.rows.add([reqs[2]], 1, 0.0)
    eng.order = [reqs[2]]
    eng.paused = [reqs[0], reqs[1]]
    eng._resume(None)
    assert [r.id for r in eng.order] == [0, 1, 2]  # the resumed run, in its order, then the active row
    assert eng.paused == [] and all(r.blocks == 2 for r in reqs[:2])


# -- rule 4: an evicted prompt longer than max_tokens (non-chunked) ---------------------------------

RULE4 = dict(max_tokens=8, kv_blocks=6)
RULE4_REQS = specs((1, 10), (4, 14))


def test_rule4_megatron_requeues_a_prompt_it_can_never_admit_and_stalls():
    _, state = run_engine(_tiny(**RULE4), RULE4_REQS)
    assert state.outcome == "stalled"
    assert "evicted and re-queued" in state.diagnosis and "max_tokens 8" in state.diagnosis
    stuck = state.requests[1]
    assert stuck.evictions == 1 and stuck.outcome == Outcome.WAITING and stuck.remaining_prompt > 8


def test_rule4_safe_fails_it_with_a_reason_and_completes():
    _, state = run_engine(_tiny(kv_corners="safe", **RULE4), RULE4_REQS)
    assert state.outcome == "completed"
    assert state.requests[0].outcome == Outcome.COMPLETED
    assert state.requests[1].fail_reason == "evicted_prompt_exceeds_max_tokens"


# -- rule 5: the arrival limit counts the paused budget --------------------------------------------

def test_rule5_arrival_limit_is_the_whole_pool_including_the_paused_budget():
    # prompt 7 + 8 tokens = 15 tokens = 4 blocks of 4: more than the 3 active blocks
    _, state = run_engine(_tiny(kv_blocks=3, paused_blocks=1, kv_corners="safe"), specs((7, 8)))
    assert state.requests[0].fail_reason != "kv_block_overflow"
    _, state = run_engine(_tiny(kv_blocks=3, paused_blocks=0), specs((7, 8)))
    assert state.requests[0].fail_reason == "kv_block_overflow"


# -- rule 6: resume room with a hidden chunked request; the crash ------------------------------------

def test_rule6_a_hidden_chunked_request_that_did_not_run_leaves_its_blocks_to_resume():
    eng = _engine(kv_blocks=4)
    hidden, paused = make_request(0, 40, 8, 64), make_request(1, 3, 8, 64)
    hidden.start_prefill(40)
    paused.start_prefill(3)
    eng.ctx.add_request(hidden, 8)  # two blocks of a chunked prompt
    eng.ctx.add_request(paused, 3)
    paused.kv_tokens = 4  # its one block is full: resuming needs 1 + 1 blocks
    eng.ctx.admitted = []
    eng.chunked = hidden
    eng.paused = [paused]
    eng._resume(ran_chunk=hidden)  # it ran: an active row holding 2 of 4 blocks, 2 left -> fits
    assert eng.paused == [] and eng.order == [paused]
    # the same with one block less in the active pool: counted, it blocks the resume; hidden, it does not
    eng = _engine(kv_blocks=3, paused_blocks=1)
    hidden, paused = make_request(0, 40, 8, 64), make_request(1, 3, 8, 64)
    hidden.start_prefill(40)
    paused.start_prefill(3)
    eng.ctx.add_request(hidden, 8)
    eng.ctx.add_request(paused, 3)
    paused.kv_tokens = 4
    eng.ctx.admitted = []
    eng.chunked, eng.paused = hidden, [paused]
    eng._resume(ran_chunk=hidden)
    assert eng.paused == [paused]  # 2 held + 2 needed > 3
    eng._resume(ran_chunk=None)
    assert eng.paused == [] and paused.blocks == 2


ASSERTS = dict(max_tokens=16, kv_blocks=3, paused_blocks=2)


@pytest.mark.parametrize("oracle", [True, False])
def test_rule6_no_active_row_left_is_megatrons_assertion(oracle):
    # 15 tokens need 4 blocks: admitted (pool 5), but after its third block it can never resume in a
    # 3-block active pool; over the paused budget it is evicted, and nothing is left running
    _, state = run_engine(_tiny(oracle=oracle, **ASSERTS), specs((7, 8)))
    assert state.outcome == "engine_assertion"
    assert "asserts" in state.diagnosis and "evicted request(s) [0]" in state.diagnosis


def test_rule6_safe_re_prefills_instead_and_completes():
    _, state = run_engine(_tiny(kv_corners="safe", **ASSERTS), specs((7, 8)))
    assert state.outcome == "completed"
    r = state.requests[0]
    assert r.outcome == Outcome.COMPLETED and r.generated == 8 and r.evictions >= 1


# -- properties over tight pools ------------------------------------------------------------------

def _recorder_class() -> type:
    """The oracle, recording every KV-pressure pass: the rows before and after, the queue after."""

    class Recorder(Engine):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.passes = []

        def _kv_pressure(self, needing, ran_chunk):
            before = dict(paused=list(self.paused), order=list(self.order), needing=list(needing),
                          blocks={r.id: r.blocks for r in self.paused + self.order},
                          queue_ids=[r.id for r in self.queue])
            super()._kv_pressure(needing, ran_chunk)
            self.passes.append((before, dict(paused=list(self.paused), order=list(self.order),
                                             queue=list(self.queue), chunked=self.chunked)))

    return Recorder


@pytest.mark.slow  # 150 random engine runs, every round recorded
@needs_python_engine
@settings(max_examples=examples(150, stretch=False), suppress_health_check=[HealthCheck.too_slow])
@given(tight_pools())
def test_tight_pools_conserve_and_follow_the_order_rules(scenario):
    cfg, reqs = scenario
    eng = core_of_class(_recorder_class(), cfg, reqs)
    state = eng.run()  # check_invariants: KV blocks conserved and budgets kept every step
    assert state.outcome in ("completed", "stalled", "engine_assertion"), state.diagnosis
    if state.outcome == "engine_assertion":
        assert cfg.engine.kv_corners == "megatron"
    # every request is in exactly one place
    places = [r.id for r in eng.order] + [r.id for r in eng.paused] + [r.id for r in eng.queue]
    places += [r.id for r in state.requests if r.outcome in (Outcome.COMPLETED, Outcome.FAILED)]
    if eng.chunked is not None and eng.chunked not in eng.queue:
        places.append(eng.chunked.id)
    assert sorted(places) == [r.id for r in state.requests]
    for before, after in eng.passes:
        rows_before = before["paused"] + before["order"]
        # resume and eviction take paused rows from the right only: the rows left paused are a left
        # run of the old paused rows followed by the newly paused ones
        kept = after["paused"]
        old = [r for r in kept if r in before["paused"]]
        assert old == before["paused"][:len(old)]
        # nobody disappears: a row before is a row, a paused row, or back in the queue after
        for r in rows_before:
            assert r in after["order"] or r in kept or r in after["queue"] or r.outcome == Outcome.FAILED
        # evicted rows sit at the queue's front in reverse row order (behind a chunked head)
        evicted = [r for r in after["queue"] if r.id not in before["queue_ids"]]
        if evicted:
            front = after["queue"][1:] if after["chunked"] is not None and after["queue"][0] is after["chunked"] \
                else after["queue"]
            assert front[:len(evicted)] == evicted
            # they were a right run of the paused rows (old paused, then the newly paused in swap order)
            pos = {r.id: i for i, r in enumerate(before["order"])}
            newly, _ = pause_swap(before["order"], {pos[r.id] for r in before["needing"]})
            seq = [r.id for r in before["paused"] + newly]
            back = [r.id for r in reversed(evicted)]
            assert any(seq[i:i + len(back)] == back for i in range(len(seq))), (seq, back)
    # while a request is paused nothing new is admitted, only a continuing chunk (the chunked request
    # stays the chunked request until its final chunk, also across steps that admit nothing)
    chunked_id = None
    for t in state.trace:
        if t.paused > 0:
            assert all(rid == chunked_id for rid, _, _ in t.admitted), t
        for rid, _, final in t.admitted:
            if not final:
                chunked_id = rid
            elif rid == chunked_id:
                chunked_id = None
    s = state.stats
    assert s.evicted_events <= s.paused_events
    assert s.steps == len(state.trace)
