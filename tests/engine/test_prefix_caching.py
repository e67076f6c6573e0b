"""Prefix caching (engine.prefix_caching): worked cases from megatron-core 0.19.2's code, one per
admission interaction, and the cache's own rules (sharing, LRU leaf-peel eviction, Mamba limits)."""

from __future__ import annotations

from dataclasses import replace

from cgbench.config.compose import load_config
from cgbench.config.schema import CGConfig
from cgbench.engine.context import Context
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.request import Request
from cgbench.pipeline import simulate
from cgbench.workload.arrivals import RequestSpec
from cgbench.workload.prefix_hashes import engine_block_hashes
from tests.helpers import make_cfg, prefix_ids, run_engine

BS = 16  # engine block size of these cases (a source block of the generated ids is 16 tokens too)


def _cache(**kw) -> PrefixCache:
    return PrefixCache(BS, 16, **kw)


def _admit_whole(pc: PrefixCache, rid: int, prompt: int) -> None:
    """``rid`` prefills its whole prompt in one chunk (what Context.add_request does with the cache)."""
    m = pc.match(rid, 0, prompt)
    pc.pin(m)
    pc.admit(rid, 0, prompt, m, m.from_pool)


def _req(rid: int, prompt: int) -> Request:
    r = Request(rid, prompt, 4)
    r.start_prefill(prompt)
    return r


# -- the skip and its clamp (_compute_prefix_match) -------------------------------------------------

def test_a_fully_cached_prompt_still_computes_two_tokens_rounded_to_a_block():
    pc = _cache()
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    pc.release(0)
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
    ctx = Context(max_requests=8, max_tokens=256, max_sequence_length=256, block_size=BS,
                  num_speculative_tokens=0, active_blocks=32, paused_block_budget=0, free_blocks=32,
                  prefix=_cache())
    pc = ctx.prefix
    pc.arrive(0, prefix_ids(0, 1000, 64), 64)
    ctx.add_request(_req(0, 64), 64)
    pc.arrive(1, prefix_ids(0, 1000, 64), 64)
    ctx.begin_round(decodes=0, paused=1)
    assert ctx.check_availability(_req(1, 64)) == (False, True, True)
    ctx.begin_round(decodes=0, paused=0)
    assert ctx.check_availability(_req(1, 64)) == (True, True, True)
    assert ctx.head_computed == 16


# -- the pool: shared blocks, cached blocks, eviction ------------------------------------------------

def test_shared_blocks_count_once_and_released_ones_stay_cached():
    ctx = Context(max_requests=8, max_tokens=256, max_sequence_length=256, block_size=BS,
                  num_speculative_tokens=0, active_blocks=10, paused_block_budget=0, free_blocks=10,
                  prefix=_cache())
    pc = ctx.prefix
    a, b = _req(0, 64), _req(1, 64)
    for r in (a, b):
        pc.arrive(r.id, prefix_ids(0, 1000, 64), 64)
    ctx.add_request(a, 64)
    ctx.begin_round(0, 0)
    ctx.add_request(b, 64)  # shares a's 4 blocks
    assert (a.blocks, b.blocks, ctx.free_blocks) == (4, 4, 6)
    assert ctx.unique_held(a.blocks + b.blocks) == 4
    ctx.release(a)
    ctx.release(b)
    assert (ctx.free_blocks, ctx.cached_blocks()) == (6, 4)  # the four blocks stay cached
    c = _req(2, 160)  # 10 private blocks: 6 free, 4 evicted
    pc.arrive(2, prefix_ids(5, 1000, 160), 160)
    ctx.begin_round(0, 0)
    assert ctx.check_availability(c)[2]
    ctx.add_request(c, 160)
    assert (ctx.free_blocks, ctx.cached_blocks(), pc.counters.evicted_blocks) == (0, 0, 4)
    assert pc.check() is None


def test_eviction_peels_leaves_least_recently_used_first():
    pc = _cache()
    pc.arrive(0, prefix_ids(0, 1000, 48), 48)  # blocks A0 -> A1 -> A2
    _admit_whole(pc, 0, 48)
    pc.tick()
    pc.arrive(1, prefix_ids(1, 1000, 32), 32)  # blocks B0 -> B1, newer
    _admit_whole(pc, 1, 32)
    a, b = list(pc.tables[0]), list(pc.tables[1])
    pc.release(0)
    pc.release(1)
    assert pc.evict(2) == 2
    # the oldest leaf A2 goes, which makes A1 a leaf older than B1: it goes next; A0 and B stay
    assert set(pc.refs) == {a[0], *b}
    assert pc.evict(1) == 1 and set(pc.refs) == set(b)  # A0 (older) before B1


# -- hybrid models: the skip is limited to Mamba-matched blocks ---------------------------------------

def test_a_hybrid_model_without_a_mamba_cache_shares_blocks_but_skips_nothing():
    pc = _cache(hybrid=True, mamba_slots=0)
    for rid in (0, 1):
        pc.arrive(rid, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    m = pc.match(1, 0, 64)
    assert len(m.blocks) == 4 and m.from_pool == 0 and (m.skip, m.computed) == (0, 64)


def test_a_hybrid_model_skips_up_to_the_last_block_with_a_cached_mamba_state():
    pc = _cache(hybrid=True, mamba_slots=4)
    for rid in (0, 1):
        pc.arrive(rid, prefix_ids(0, 1000, 64), 64)
    _admit_whole(pc, 0, 64)
    # the first prefill computed tokens 0..63: of its boundaries (KV match end 0, last complete
    # block 64, last block of its range 48) only 48 lies inside them; its state is cached
    assert len(pc.mamba) == 1
    m = pc.match(1, 0, 64)
    assert (m.skip, m.computed) == (48, 16)


# -- off by default: the same results; on without hashes: the same steps ----------------------------

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
    from cgbench.results.state_file import parse_state
    from cgbench.workload.arrivals import ArrivalStream

    cfg = make_cfg(policy="budget", block_size=BS, max_requests=4, max_tokens=256, max_sequence_length=256,
                   prefix_caching=True, oracle=True)
    reqs = [RequestSpec(0, 0.0, 64, 3, prefix_ids(0, 1000, 64)),
            RequestSpec(1, 0.0, 64, 3, prefix_ids(0, 1000, 64)),
            RequestSpec(2, 0.0, 70, 3, prefix_ids(0, 4, 70))]
    from cgbench.pipeline import build_engine

    eng = build_engine(cfg, stream=ArrivalStream(reqs))
    for spec in eng.stream.pop_due(0.0):
        eng.arrive(spec)
    eng.advance(eng.begin_round())  # admits 0; 1 and 2 wait on its hashes
    eng.ctx.begin_round(len(eng.rows), len(eng.paused))
    doc = json.loads(json.dumps(state_from_engine(eng, cfg)))
    assert doc["prefix_cache"]["tables"] == {"0": [0, 1, 2, 3]}
    decision = replay_round(parse_state(doc), "budget")
    eng.scheduler.schedule(eng.queue)
    live = [(a.request.id, a.chunk, a.final) for a in eng.ctx.admitted]
    # both now find request 0's 4 blocks cached: 1 computes 16 tokens (the clamp), 2 its last 6
    assert list(decision.admitted) == live == [(1, 64, True), (2, 70, True)]
    assert decision.batch_after == (eng.ctx.active_tokens, 2, 1) == (16 + 6 + 1, 2, 1)
