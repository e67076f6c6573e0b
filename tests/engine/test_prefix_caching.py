"""Prefix caching (engine.prefix_caching): worked cases from megatron-core 0.19.2's code, one per
admission interaction, and the cache's own rules (sharing, LRU leaf-peel eviction, Mamba limits)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.config.compose import load_config
from cgbench.config.schema import CGConfig
from cgbench.engine.context import Context
from cgbench.engine.invariants import MegatronAssertion
from cgbench.engine.kv_rules import kv_rules
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.request import Request
from cgbench.engine.rows import evict_count as evict_count_rows
from cgbench.pipeline import simulate
from cgbench.workload.arrivals import RequestSpec
from cgbench.workload.prefix_hashes import engine_block_hashes
from tests.helpers import make_cfg, prefix_ids, run_engine

BS = 16  # engine block size of these cases (a source block of the generated ids is 16 tokens too)


def _cache(pool: int = 32, **kw) -> PrefixCache:
    return PrefixCache(BS, 16, pool, **kw)


def _admit_whole(pc: PrefixCache, rid: int, prompt: int) -> None:
    """``rid`` prefills its whole prompt in one chunk (what Context.add_request does with the cache)."""
    pc.admit(rid, 0, prompt, prompt, pc.match(rid, 0, prompt))


def _req(rid: int, prompt: int) -> Request:
    r = Request(rid, prompt, 4)
    r.start_prefill(prompt)
    return r


def _ctx(pc: PrefixCache, *, active: int, paused: int = 0, **kw) -> Context:
    return Context(max_requests=8, max_tokens=256, max_sequence_length=256, block_size=BS,
                   num_speculative_tokens=0, active_blocks=active, paused_block_budget=paused,
                   free_blocks=active + paused, prefix=pc, **kw)


# -- the skip and its clamp (_compute_prefix_match) -------------------------------------------------

def test_a_fully_cached_prompt_still_computes_two_tokens_rounded_to_a_block():
    pc = _cache()
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    pc.release(0, "finish")
    pc.arrive(1, prefix_ids(0, 1000, 64), 64)  # the same 64 tokens: 4 blocks, all cached
    m = pc.match(1, 0, 64)
    assert len(m.blocks) == 4 and m.from_pool == 0 and m.cached_matched == 4
    # min(4 * 16, 64 - 1) = 63 leaves one token; the clamp keeps two: (64 - 2) // 16 * 16 = 48
    assert (m.skip, m.computed) == (48, 16)


def test_a_hit_short_of_the_prompt_skips_whole_blocks_and_computes_the_rest():
    pc = _cache()
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    pc.arrive(1, prefix_ids(0, 4, 70), 70)  # the same first 4 source blocks (64 tokens), then its own
    m = pc.match(1, 0, 70)
    assert len(m.blocks) == 4 and m.from_pool == 1  # the partial fifth block is its own
    assert (m.skip, m.computed) == (64, 6)  # min(64, 69) = 64; 6 >= 2 computed: no clamp
    assert pc.match(1, 0, 1).skip == 0  # one token: min(.., 1 - 1) = 0
    assert pc.match(1, 8, 40).skip == 0  # a chunk starting inside a block never skips


def test_a_mooncake_block_maps_onto_two_engine_blocks():
    ids = [7, 8, 9]  # three 512-token source blocks, the last one partial (prompt 1300 tokens)
    h256 = engine_block_hashes(ids, 1300, 512, 256)
    assert len(h256) == 1300 // 256  # 5 complete 256-token blocks, all described
    other = engine_block_hashes([7, 8, 5], 1300, 512, 256)
    assert other[:4] == h256[:4] and other[4] != h256[4]  # blocks 0-3 lie in source blocks 7 and 8
    assert engine_block_hashes(ids, 1300, 512, 1024)[0] == engine_block_hashes([7, 8], 1024, 512, 1024)[0]


# -- the conservative non-chunked gate (engine ~1669) ---------------------------------------------

def _gated(policy: str, **engine):
    cg = CGConfig(kind="explicit", graphs=[[64, 1, 0], [80, 1, 1], [4, 0, 4]])
    return make_cfg(policy=policy, cg=cg, block_size=BS, max_requests=4, max_tokens=256,
                    max_sequence_length=256, prefix_caching=True, **engine)


def _shared_pair():
    # request 1 (112 tokens) starts with request 0's 48 tokens; both arrive at once, so request 1
    # first waits for request 0's pass (a coordination wait), then finds its 3 blocks cached
    first = RequestSpec(0, 0.0, 48, 20, prefix_ids(0, 1000, 48))
    second = RequestSpec(1, 0.0, 112, 2, prefix_ids(0, 3, 112))
    return [first, second]


def test_the_non_chunked_gate_sizes_the_candidate_with_the_full_prompt():
    eng, state = run_engine(_gated("megatron"), _shared_pair())
    # next to request 0's decode row request 1 computes only 112 - 48 = 64 tokens, and (65, 1, 1)
    # fits the (80, 1, 1) graph, but the candidate is (112, 1, 1): it misses, and megatron defers it
    # while request 0 decodes, then for ever on the idle engine
    assert state.outcome == "stalled"
    c = eng.scheduler.counters
    assert c.deferral_events >= 19 and c.prefix_full_size_deferrals == c.deferral_events
    assert eng.ctx.prefix.counters.coordination_waits == 1


def test_the_cgbench_only_computed_gate_admits_what_the_full_size_gate_defers():
    eng, state = run_engine(_gated("megatron", prefix_gate="computed"), _shared_pair())
    assert state.outcome == "completed"
    assert eng.scheduler.counters.deferral_events == 0
    admit = next(t for t in state.trace if t.admitted and t.admitted[0][0] == 1)
    assert admit.real == (65, 1, 1) and admit.graph == (80, 1, 1)


def test_once_admitted_the_step_holds_only_the_computed_tokens():
    cfg = _gated("wait_timeout")
    cfg = replace(cfg, policy=replace(cfg.policy, wait_timeout=replace(cfg.policy.wait_timeout, iters=2)))
    eng, state = run_engine(cfg, _shared_pair())
    assert state.outcome == "completed"
    admit = next(t for t in state.trace if t.admitted and t.admitted[0][0] == 1)
    assert admit.admitted == [(1, 112, True)]  # the whole prompt gains KV...
    assert admit.real == (65, 1, 1) and admit.graph == (80, 1, 1)  # ...but the step computes 64 of it
    assert eng.ctx.prefix.counters.prefill_skipped_tokens == 48
    c = eng.scheduler.counters
    assert c.deferral_events == c.prefix_full_size_deferrals == 2  # the rounds before the timeout


# -- hash conflicts inside one pass (_prefix_coordination_waits) ----------------------------------

def test_a_request_sharing_a_hash_another_admission_registers_waits_and_the_pass_goes_on():
    cfg = make_cfg(policy="budget", block_size=BS, max_requests=4, max_tokens=256, max_sequence_length=256,
                   prefix_caching=True)
    reqs = [RequestSpec(0, 0.0, 64, 3, prefix_ids(0, 1000, 64)),
            RequestSpec(1, 0.0, 64, 3, prefix_ids(0, 1000, 64)),  # request 0's prompt
            RequestSpec(2, 0.0, 64, 3, prefix_ids(1, 1000, 64))]
    eng, state = run_engine(cfg, reqs)
    assert state.trace[0].admitted == [(0, 64, True), (2, 64, True)]  # 1 held, 2 admitted behind it
    assert state.trace[1].admitted == [(1, 64, True)]
    assert state.trace[1].real == (16 + 2, 1, 2)  # 48 cached tokens skipped, two decode rows
    pc = eng.ctx.prefix
    assert pc.counters.coordination_waits == 1 and pc.counters.hits == 1 and pc.counters.blocks_matched == 4


# -- a paused request blocks admission (ctx ~2964) ---------------------------------------------------

def test_a_paused_request_blocks_admission_even_of_a_fully_cached_prompt():
    ctx = _ctx(_cache(), active=32)
    pc = ctx.prefix
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    ctx.add_request(_req(0, 64), 64)
    pc.arrive(1, prefix_ids(0, 1000, 64), 64)
    ctx.begin_round(decodes=0, paused=1)
    assert ctx.check_availability(_req(1, 64)) == (False, True, True)
    ctx.begin_round(decodes=0, paused=0)
    assert ctx.check_availability(_req(1, 64)) == (True, True, True)
    assert ctx.head_computed == 16



# -- the pool: block ids, shared blocks, cached blocks, eviction (KVBlockAllocator) -----------------

def test_shared_blocks_count_once_and_released_ones_stay_cached_until_evicted():
    ctx = _ctx(_cache(pool=10), active=10)
    pc = ctx.prefix
    a, b = _req(0, 64), _req(1, 64)
    for r in (a, b):
        pc.arrive(r.id, prefix_ids(0, 1000, 64), 64)
    ctx.add_request(a, 64)  # the top 4 of the block bag [0 .. 9]
    ctx.begin_round(0, 0)
    ctx.add_request(b, 64)  # shares a's 4 blocks
    assert pc.tables == {0: [6, 7, 8, 9], 1: [6, 7, 8, 9]}
    assert (a.blocks, b.blocks, ctx.free_blocks) == (4, 4, 6)
    assert ctx.unique_held(a.blocks + b.blocks) == 4 == ctx.held_blocks([a, b])
    ctx.release(a)
    ctx.release(b)
    assert (ctx.free_blocks, ctx.cached_blocks()) == (6, 4)  # the four blocks stay cached
    c = _req(2, 160)  # 10 blocks of its own: the 6 free ones, then the 4 cached ones, evicted
    pc.arrive(2, prefix_ids(5, 1000, 160), 160)
    ctx.begin_round(0, 0)
    assert ctx.check_availability(c)[2]
    ctx.add_request(c, 160)
    # the leaf peel evicts a's chain from its end (9, 8, 7, 6); they go on top of the free blocks
    assert pc.tables[2] == [0, 1, 2, 3, 4, 5, 9, 8, 7, 6]
    assert (ctx.free_blocks, ctx.cached_blocks(), pc.counters.evicted_blocks) == (0, 0, 4)
    assert pc.check({2: 10}) is None


def _two_chains(same_round: bool) -> PrefixCache:
    """Request 0's 3 blocks [2, 3, 4] and request 1's 2 blocks [0, 1] in a pool of 5, both released."""
    pc = _cache(pool=5)
    pc.arrive(0, prefix_ids(0, 1000, 48), 48)
    pc.arrive(1, prefix_ids(1, 1000, 32), 32)
    pc.begin_round()
    _admit_whole(pc, 0, 48)
    if not same_round:
        pc.begin_round()
    _admit_whole(pc, 1, 32)
    assert pc.tables == {0: [2, 3, 4], 1: [0, 1]}
    pc.release(0, "finish")
    pc.release(1, "finish")
    return pc


def _evicted_by_one_block_requests(pc: PrefixCache, n: int) -> list[int]:
    """``n`` one-block requests of their own prompt, each evicting one cached block: the blocks they got."""
    out = []
    for rid in range(10, 10 + n):
        pc.arrive(rid, prefix_ids(rid, 1000, 16), 16)
        _admit_whole(pc, rid, 16)
        out.append(pc.tables[rid][0])
    return out


def test_eviction_peels_leaves_oldest_first_and_equal_stamps_by_lower_block_id():
    # different rounds: request 0's leaf 4 is older than request 1's leaf 1; then its parent 3 (older
    # too) becomes a leaf and goes before 1, and so on up its chain
    assert _evicted_by_one_block_requests(_two_chains(same_round=False), 5) == [4, 3, 2, 1, 0]
    # one round: every stamp is equal and the lower id goes first, a parent only after its children
    assert _evicted_by_one_block_requests(_two_chains(same_round=True), 5) == [1, 0, 4, 3, 2]


def test_ref_zero_frees_a_block_when_its_last_holder_releases_it():
    pc = _cache(pool=8, eviction="ref_zero")
    for rid in (0, 1):
        pc.arrive(rid, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    _admit_whole(pc, 1, 64)  # shared while both hold it
    pc.release(0, "finish")
    assert (pc.free_count, pc.cached) == (4, 0) and len(pc.block_of) == 4
    pc.release(1, "finish")
    pc.flush()
    assert (pc.free_count, pc.cached, pc.block_of) == (8, 0, {})  # deregistered: nothing cached
    pc.arrive(2, prefix_ids(0, 1000, 64), 64)
    assert pc.match(2, 0, 64).blocks == [] and not pc.is_memory_available(9, 0)


def test_a_release_call_returns_its_free_blocks_in_ascending_id_order():
    pc = _cache(pool=6)
    for rid, prompt in ((0, 20), (1, 20)):  # own prompts: 1 registered block + 1 partial each
        pc.arrive(rid, prefix_ids(rid, 1000, prompt), prompt)
        _admit_whole(pc, rid, prompt)
    assert pc.tables == {0: [4, 5], 1: [2, 3]}
    pc.release(1, "finish")
    pc.release(0, "finish")  # the same call: the partial blocks 3 and 5 go back sorted
    pc.flush()
    assert pc.free == [0, 1, 3, 5] and pc.cached == 2


# -- the four rules of 0.19.2 that decide the KV budgets -----------------------------------------------

def test_a_coordination_wait_ends_a_chunked_prefill_pass():
    """schedule_chunked_prefill's loop runs while the last request was scheduled: the request held
    back for request 0's hashes ends the pass, and request 2 behind it waits for the next round.
    Without chunked prefill the pass goes on (the test above)."""
    cfg = make_cfg(policy="budget", chunked=True, block_size=BS, max_requests=4, max_tokens=256,
                   max_sequence_length=256, prefix_caching=True)
    reqs = [RequestSpec(0, 0.0, 64, 3, prefix_ids(0, 1000, 64)),
            RequestSpec(1, 0.0, 64, 3, prefix_ids(0, 1000, 64)),  # request 0's prompt
            RequestSpec(2, 0.0, 64, 3, prefix_ids(1, 1000, 64))]
    eng, state = run_engine(cfg, reqs)
    assert state.trace[0].admitted == [(0, 64, True)]
    assert state.trace[1].admitted == [(1, 64, True), (2, 64, True)]
    assert eng.ctx.prefix.counters.coordination_waits == 1


def _sharing_rows(ctx: Context) -> tuple[Request, Request]:
    """Two requests of 70 tokens sharing their first 64 (4 blocks), each with a 5th block of its own."""
    pc = ctx.prefix
    a, b = _req(0, 70), _req(1, 70)
    for r in (a, b):
        pc.arrive(r.id, prefix_ids(0, 4, 70), 70)
    ctx.add_request(a, 70)
    ctx.begin_round(0, 0)
    ctx.add_request(b, 70)
    return a, b


def _paused_row(ctx: Context, rid: int, tokens: int = 16) -> Request:
    """A request holding ``tokens // 16`` full blocks: its next step needs a new one."""
    r = _req(rid, tokens)
    ctx.prefix.arrive(rid, prefix_ids(rid + 5, 1000, tokens), tokens)
    ctx.add_request(r, tokens)
    r.kv_tokens = tokens
    return r


def test_resume_counts_the_active_rows_blocks_once_each():
    """resume_paused_requests: active avail = active_count - get_active_used(), which counts the
    active rows' blocks by unique id. a and b hold 10 blocks between them but 6 distinct: the paused
    row (2 blocks + the 1 it needs) fits the 12 - 6 = 6 left, not 12 - 10 = 2."""
    ctx = _ctx(_cache(pool=12), active=12)
    a, b = _sharing_rows(ctx)
    c = _paused_row(ctx, 2, tokens=32)
    assert (a.blocks + b.blocks, ctx.held_blocks([a, b])) == (10, 6)
    assert ctx.rules.resumable(ctx, [c], ctx.held_blocks([a, b]), 5) == 1
    assert ctx.rules.resumable(ctx, [c], a.blocks + b.blocks, 5) == 0  # (the sum would say no)


def test_evict_counts_the_paused_rows_blocks_once_each():
    """evict_overflow_paused_requests: nothing goes while get_paused_used() (unique ids) fits the
    paused budget: a and b hold 6 distinct blocks within a budget of 6 (their sum, 10, would evict b)."""
    ctx = _ctx(_cache(pool=16), active=10, paused=6)
    a, b = _sharing_rows(ctx)
    assert ctx.rules.evict_count(ctx, [a, b], 8) == 0
    assert evict_count_rows([a.blocks, b.blocks], 6) == 1


def test_resume_is_capped_by_the_free_pool_not_the_cached_blocks():
    """0.19.2 caps resumes by total_avail, the free pool: 4 cached blocks an allocation could evict
    do not let the paused row resume (main counts them, get_allocatable_count, when the pool is short)."""
    for rules, resumed in (("0.19.2", 0), ("main", 1)):
        ctx = _ctx(_cache(pool=7), active=7, rules=kv_rules(rules))
        pc = ctx.prefix
        pc.arrive(0, prefix_ids(0, 1000, 64), 64)
        gone = _req(0, 64)
        ctx.add_request(gone, 64)
        ctx.release(gone)  # 4 blocks cached, 3 free
        ctx.begin_round(0, 0)
        b = _req(1, 32)
        pc.arrive(1, prefix_ids(1, 1000, 32), 32)
        ctx.add_request(b, 32)
        c = _paused_row(ctx, 2)
        assert (ctx.free_blocks, ctx.cached_blocks()) == (0, 4)
        assert ctx.rules.resumable(ctx, [c], ctx.held_blocks([b]), 5) == resumed, rules


def test_an_evicted_request_comes_back_without_hashes_under_0192_and_with_them_under_main():
    """DynamicInferenceRequestRecord.checkpoint: 0.19.2 rebuilds the request without its prefix-caching
    fields (it matches nothing, registers nothing); main recomputes its hashes, its generated tokens'
    blocks its own."""
    for keeps, matched in ((False, 0), (True, 4)):
        pc = _cache(pool=16)
        pc.arrive(0, prefix_ids(0, 1000, 64), 64)
        _admit_whole(pc, 0, 64)
        pc.arrive(1, prefix_ids(0, 1000, 64), 64)
        _admit_whole(pc, 1, 64)
        pc.release(1, "evict")
        pc.requeued(1, 64 + 20, keeps)  # its prompt and the 20 tokens it generated
        assert len(pc.request_hashes(1)) == (5 if keeps else 0)
        assert len(pc.match(1, 0, 84).blocks) == matched


# -- Megatron's defect: a block registered twice (0.19.2) -------------------------------------------------

def _defect_run(rules: str):
    """Three requests, chunked prefill with 14-token chunks, 16-token blocks, a pool of 4 blocks:
    request 0 (32 tokens) leaves its 2 blocks cached; request 1 (the same 32 tokens) skips the first
    block and computes 14 tokens, so its first chunk ends at token 30, inside its second block, which
    it matched whole; its next chunk (2 tokens) registers that block again. Request 2 (63 tokens of
    its own) then needs both cached blocks."""
    cfg = make_cfg(policy="budget", chunked=True, block_size=BS, max_requests=4, max_tokens=14,
                   max_sequence_length=64, kv_blocks=4, prefix_caching=True, megatron_rules=rules)
    reqs = [RequestSpec(0, 0.0, 32, 1, prefix_ids(0, 1000, 32)),
            RequestSpec(1, 1.0, 32, 1, prefix_ids(0, 1000, 32)),
            RequestSpec(2, 2.0, 63, 1, prefix_ids(1, 1000, 63))]
    return run_engine(cfg, reqs)


def test_a_chunk_ending_mid_block_registers_its_matched_block_again_and_the_peel_asserts():
    """0.19.2's add_request registers block 1 of request 1 a second time (the next chunk's first
    range covers the block the previous chunk matched): its parent, block 0, counts it twice. When
    request 2 needs both cached blocks, the leaf peel evicts block 1, block 0 still counts a child,
    and evict_lru_blocks asserts (scripts/megatron_diff.py shows Megatron's own code doing this)."""
    eng, state = _defect_run("0.19.2")
    assert state.trace[3].admitted == [(1, 30, False)] and state.trace[3].real == (14, 1, 0)
    assert state.outcome == "engine_assertion"
    assert "evict_lru_blocks asserts" in state.diagnosis and "not a forest" in state.diagnosis
    assert state.diagnosis.startswith("step 8:")


def test_main_registers_a_block_once_and_the_same_run_completes():
    eng, state = _defect_run("main")
    assert state.outcome == "completed"
    assert eng.ctx.prefix.counters.evicted_blocks == 2


def test_the_double_registration_counts_the_parent_child_twice():
    for reregisters, children in ((True, 2), (False, 1)):
        pc = _cache(pool=8, reregisters_matched=reregisters)
        for rid in (0, 1):
            pc.arrive(rid, prefix_ids(0, 1000, 32), 32)
        _admit_whole(pc, 0, 32)
        m = pc.match(1, 0, 30)  # a 30-token chunk matches both blocks: the second one whole
        assert (len(m.blocks), m.skip, m.computed) == (2, 16, 14)
        pc.admit(1, 0, 30, 32, m)
        pc.admit(1, 30, 2, 32, pc.match(1, 30, 2))
        parent = pc.tables[0][0]
        assert pc.children[parent] == children


def test_a_hybrid_chunk_sized_with_the_whole_prompts_skip_overflows_max_tokens():
    """Megatron's second prefix-caching error (0.19.2 and main): schedule_chunked_prefill sizes a first
    chunk with the skip _compute_prefix_match gives the whole remaining prompt, and add_request
    recomputes it for the chunk. Request 1 (33 tokens) matches request 0's 2 blocks; only block 1's
    end has a Mamba state (request 0's end state). For 33 tokens the skip is 32, clamped to 16: the
    chunk spans 16 + 16 tokens, then 31 (the flash-attn guard). For a 31-token chunk the state at 32
    lies past its end: the skip backs off to block 0, which has none, so nothing is skipped, and
    add_request computes 31 tokens in a 16-token step (TokenOverflowError)."""
    for rules in ("0.19.2", "main"):
        cfg = make_cfg(kind="hybrid", policy="budget", chunked=True, block_size=BS, max_requests=4,
                       max_tokens=16, max_sequence_length=64, kv_blocks=8, prefix_caching=True,
                       prefix_caching_mamba_slots=4, ssm_chunk_alignment=16, megatron_rules=rules)
        reqs = [RequestSpec(0, 0.0, 32, 1, prefix_ids(0, 1000, 32)),
                RequestSpec(1, 1.0, 33, 1, prefix_ids(0, 1000, 33))]
        eng, state = run_engine(cfg, reqs)
        assert state.outcome == "engine_assertion", rules
        assert "TokenOverflowError" in state.diagnosis and "31-token chunk computes 31 tokens" in state.diagnosis


# -- hybrid models: the skip is limited to blocks with a cached Mamba state ---------------------------

def test_a_hybrid_model_without_a_mamba_cache_shares_blocks_but_skips_nothing():
    pc = _cache(hybrid=True, mamba_slots=0)
    for rid in (0, 1):
        pc.arrive(rid, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    m = pc.match(1, 0, 64)
    assert len(m.blocks) == 4 and m.from_pool == 0 and (m.skip, m.computed) == (0, 64)


def test_a_hybrid_model_skips_up_to_the_last_block_with_a_cached_mamba_state():
    pc = _cache(hybrid=True, mamba_slots=4, ssm_chunk=16)
    for rid in (0, 1):
        pc.arrive(rid, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    pc.after_step()
    # compute_and_store_offsets: of the prefill's boundaries (KV match end 0, last complete block 64,
    # the block before its last 48) only 48 lies strictly inside its 64 computed tokens; the prompt
    # ends on a block boundary, so its end state (block 3) is recorded too
    mc = pc.mamba_cache
    assert mc.slot_blocks == {pc.tables[0][2], pc.tables[0][3]} and mc.states() == 2
    # every block matched, the farthest state (block 3) covers the whole chunk: back off to block 2's
    m = pc.match(1, 0, 64)
    assert (m.skip, m.computed) == (48, 16)


def test_states_are_recorded_at_multiples_of_the_ssm_chunk_only():
    pc = _cache(hybrid=True, mamba_slots=4, ssm_chunk=32)
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    pc.after_step()
    assert pc.mamba_cache.slot_blocks == {pc.tables[0][3]}  # 48 is no multiple of 32: the end state only


def test_more_new_states_than_slots_raise_under_0192_and_are_dropped_under_main():
    for raises in (True, False):
        pc = _cache(hybrid=True, mamba_slots=1, ssm_chunk=16, mamba_overflow_raises=raises)
        pc.arrive(0, prefix_ids(0, 1000, 64), 64)
        _admit_whole(pc, 0, 64)  # two states to record, one slot, and request 0 holds every block
        if raises:
            with pytest.raises(MegatronAssertion, match="No evictable Mamba cache slots"):
                pc.after_step()
        else:
            pc.after_step()
            assert pc.mamba_cache.slot_blocks == {pc.tables[0][2]}  # the first that fits


def test_a_state_slot_is_taken_only_from_a_block_no_request_holds():
    pc = _cache(pool=16, hybrid=True, mamba_slots=2, ssm_chunk=16)
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    pc.after_step()
    first = set(pc.mamba_cache.slot_blocks)
    pc.release(0, "finish")  # its blocks stay cached, with their states; now evictable slots
    pc.begin_round()
    pc.arrive(1, prefix_ids(1, 1000, 64), 64)
    _admit_whole(pc, 1, 64)
    pc.after_step()
    assert pc.mamba_cache.slot_blocks == {pc.tables[1][2], pc.tables[1][3]} and not first & pc.mamba_cache.slot_blocks
    assert pc.mamba_cache.states() == 2  # request 0's hashes left the map with their slots


# -- off by default: the same results ---------------------------------------------------------------

def test_prefix_caching_without_prefix_ids_runs_the_same_steps():
    for overrides in (["workload=chat", "workload.num_requests=60"],
                      ["workload=chat", "workload.num_requests=60", "engine=chunked"]):
        off = simulate(load_config(overrides))
        on = simulate(load_config([*overrides, "engine.prefix_caching=true"]))
        pc = on.pop("prefix_cache")
        assert on == off
        assert pc["hits"] == 0 and pc["saved_prefill_tokens"] == 0


# -- schedule state files carry the cache -----------------------------------------------------------

def test_a_saved_round_replays_with_its_prefix_cache():
    import json

    from cgbench.engine.replay import replay_round, state_from_engine
    from cgbench.pipeline import build_engine
    from cgbench.results.state_file import parse_state
    from cgbench.workload.arrivals import ArrivalStream

    cfg = make_cfg(policy="budget", block_size=BS, max_requests=4, max_tokens=256, max_sequence_length=256,
                   prefix_caching=True, oracle=True)
    reqs = [RequestSpec(0, 0.0, 64, 3, prefix_ids(0, 1000, 64)),
            RequestSpec(1, 0.0, 64, 3, prefix_ids(0, 1000, 64)),
            RequestSpec(2, 0.0, 70, 3, prefix_ids(0, 4, 70))]
    eng = build_engine(cfg, stream=ArrivalStream(reqs))
    for spec in eng.stream.pop_due(0.0):
        eng.arrive(spec)
    eng.advance(eng.begin_round())  # admits 0; 1 and 2 wait on its hashes
    eng.ctx.begin_round(len(eng.rows), len(eng.paused))
    doc = json.loads(json.dumps(state_from_engine(eng, cfg)))
    # the top of the 64-block bag, then the block its first decode step needs (its prompt fills 4)
    assert doc["prefix_cache"]["tables"] == {"0": [60, 61, 62, 63, 59]}
    decision = replay_round(parse_state(doc), "budget")
    eng.scheduler.schedule(eng.queue)
    live = [(a.request.id, a.chunk, a.final) for a in eng.ctx.admitted]
    # both now find request 0's 4 blocks cached: 1 computes 16 tokens (the clamp), 2 its last 6
    assert list(decision.admitted) == live == [(1, 64, True), (2, 70, True)]
    assert decision.batch_after == (eng.ctx.active_tokens, 2, 1) == (16 + 6 + 1, 2, 1)
