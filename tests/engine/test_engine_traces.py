"""The reference traces (semantics ref. section 11) and Megatron's engine scenarios (section 9.2)."""

from __future__ import annotations

from collections import deque

from cgbench.config.schema import CGConfig
from cgbench.engine.request import Outcome, Request
from tests.helpers import make_cfg, round_scheduler, run_engine, specs


def shapes(state):
    return [(s.real, s.graph) for s in state.trace]


# -- 11.1: chunked prefill, transformer, list (B), gating on vs off -----------------------------------

def test_trace_11_1_gating_on():
    cfg = make_cfg(kind="transformer", policy="megatron", chunked=True)
    _, st = run_engine(cfg, specs((100, 4), (100, 4), (100, 4)))
    assert shapes(st) == [
        ((64, 1, 0), (64, 1, 63)),
        ((128, 2, 0), (128, 2, 126)),
        ((64, 2, 1), (64, 2, 62)),
        ((47, 1, 2), (64, 1, 63)),
        ((3, 0, 3), (4, 0, 4)),
        ((2, 0, 2), (2, 0, 2)),
        ((1, 0, 1), (1, 0, 1)),
    ]
    assert [s.admitted for s in st.trace[:4]] == [
        [(0, 64, False)], [(0, 36, True), (1, 92, False)], [(1, 8, True), (2, 55, False)], [(2, 45, True)]]
    assert all(r.generated == 4 and r.outcome == Outcome.COMPLETED for r in st.requests)


def test_trace_11_1_gating_off():
    cfg = make_cfg(kind="transformer", policy="budget", chunked=True)
    _, st = run_engine(cfg, specs((100, 4), (100, 4), (100, 4)))
    assert shapes(st) == [((300, 3, 0), (512, 4, 252))] + [((3, 0, 3), (4, 0, 4))] * 3


def test_trace_11_1_gating_costs_three_steps_but_no_eager():
    on = run_engine(make_cfg(policy="megatron", chunked=True), specs((100, 4), (100, 4), (100, 4)))[1]
    off = run_engine(make_cfg(policy="budget", chunked=True), specs((100, 4), (100, 4), (100, 4)))[1]
    assert on.stats.steps - off.stats.steps == 3
    assert on.stats.eager_steps == off.stats.eager_steps == 0


# -- 11.2 / 11.3: non-chunked, hybrid (strict) at the scheduler level -----------------------------------

def _round(kind: str, policy: str, decodes: int, prompts: list[int], chunked: bool = False):
    cfg = make_cfg(kind=kind, policy=policy, chunked=chunked)
    sched = round_scheduler(cfg)
    ctx, grid = sched.ctx, sched.grid
    queue = deque()
    for i, p in enumerate(prompts, start=1):
        r = Request(id=i, prompt_len=p, output_len=8)
        r.start_prefill(p)
        queue.append(r)
    ctx.begin_round(decodes, 0)
    res = sched.schedule(queue)
    return ctx, queue, res, grid, sched


def test_trace_11_2_strict_defers_third_request():
    ctx, queue, res, grid, _ = _round("hybrid", "megatron", 253, [500, 500, 500])
    assert [(a.request.id, a.chunk) for a in ctx.admitted] == [(1, 500), (2, 500)]
    assert [r.id for r in queue] == [3] and queue[0].cg_wait_iters == 1 and res.deferred is queue[0]
    assert tuple(grid.lookup(ctx.active_tokens, ctx.prefill_count, ctx.decode_count)[0]) == (2048, 2, 254)
    # next round: the two admitted requests are decoding too (255 decodes): r3 fits (1024, 1, 255)
    r3 = queue[0]
    ctx.begin_round(255, 0)
    sched_res = _round_again(ctx, queue, grid)
    assert sched_res == [(3, 500)] and r3.cg_wait_iters == 0
    assert tuple(grid.lookup(ctx.active_tokens, ctx.prefill_count, ctx.decode_count)[0]) == (1024, 1, 255)


def _round_again(ctx, queue, grid):
    round_scheduler(make_cfg(kind="hybrid", policy="megatron"), ctx=ctx, grid=grid).schedule(queue)
    return [(a.request.id, a.chunk) for a in ctx.admitted]


def test_trace_11_2_non_strict_admits_all_three():
    ctx, queue, _, grid, _ = _round("transformer", "megatron", 253, [500, 500, 500])
    assert len(ctx.admitted) == 3 and not queue
    assert tuple(grid.lookup(1753, 3, 253)[0]) == (2048, 4, 252)


def test_trace_11_2_budget_admits_and_runs_eager():
    ctx, queue, _, grid, _ = _round("hybrid", "budget", 253, [500, 500, 500])
    assert len(ctx.admitted) == 3 and not queue
    assert grid.lookup(1753, 3, 253) == (None, "shape")


def test_trace_11_3_msl_validity_starvation():
    ctx, queue, res, _, _ = _round("hybrid", "megatron", 255, [2000])
    assert not ctx.admitted and queue[0].cg_wait_iters == 1
    ctx, queue, _, grid, _ = _round("hybrid", "megatron", 254, [2000])
    assert [(a.request.id, a.chunk) for a in ctx.admitted] == [(1, 2000)]
    assert tuple(grid.lookup(2254, 1, 254)[0]) == (4096, 2, 254)
    ctx, queue, _, grid, _ = _round("hybrid", "megatron", 255, [1500])
    assert tuple(grid.lookup(1755, 1, 255)[0]) == (2048, 1, 255) and len(ctx.admitted) == 1


# -- 11.4: flash-attn guard with snapping --------------------------------------------------------------

def test_trace_11_4_guard_after_snapping():
    _, st = run_engine(make_cfg(policy="megatron", chunked=True), specs((65, 2)))
    assert st.trace[0].real == (63, 1, 0) and st.trace[0].graph == (64, 1, 63)
    assert st.trace[0].admitted == [(0, 63, False)]
    assert st.trace[1].admitted == [(0, 2, True)]


# -- 9.2: Megatron's own engine scenarios ------------------------------------------------------------------

def test_chunked_prefill_skips_request_when_token_budget_exhausted():
    cfg = make_cfg(policy="megatron", chunked=True, max_tokens=16, max_requests=2, block_size=256,
                   max_sequence_length=128, cg=CGConfig(non_decode=False))
    sched = round_scheduler(cfg)
    ctx = sched.ctx
    assert not sched.gating_active
    a, b = Request(1, 16, 4), Request(2, 8, 4)
    a.start_prefill(16)
    b.start_prefill(8)
    queue = deque([a, b])
    ctx.begin_round(0, 0)
    sched.schedule(queue)
    assert ctx.active_tokens == 16 and ctx.total_request_count == 1 and ctx.prefill_count == 1
    assert ctx.chunked_request_id == -1 and b.finished_chunk == 0 and list(queue) == [b]


def test_chunked_prefill_avoid_single_token_chunk():
    # Megatron's fixture does not turn on cuda_graph_all_prefills: no gating
    cfg = make_cfg(policy="megatron", chunked=True, max_tokens=256, max_requests=1, max_sequence_length=1024,
                   cg=CGConfig(all_prefills=False))
    eng, st = run_engine(cfg, specs((513, 1)))
    assert [s.admitted for s in st.trace] == [[(0, 256, False)], [(0, 255, False)], [(0, 2, True)]]
    assert st.requests[0].outcome == Outcome.COMPLETED and st.requests[0].generated == 1


def test_chunked_prefill_delay_scheduling_for_unavoidable_single_token_chunk():
    cfg = make_cfg(policy="megatron", chunked=True, max_tokens=256, max_requests=2, max_sequence_length=1024,
                   cg=CGConfig(all_prefills=False))
    _, st = run_engine(cfg, specs((255, 1), (2, 1)))
    assert st.trace[0].admitted == [(0, 255, True)]
    assert st.trace[1].admitted == [(1, 2, True)]
    assert all(r.outcome == Outcome.COMPLETED for r in st.requests)


def test_token_overflow_transient():
    cfg = make_cfg(policy="budget", max_tokens=900, max_requests=8)
    _, st = run_engine(cfg, specs((512, 2), (512, 2)))
    assert st.trace[0].admitted == [(0, 512, True)] and st.trace[0].queue_len == 1
    assert all(r.outcome == Outcome.COMPLETED for r in st.requests)


def test_max_sequence_length_clamps_output():
    cfg = make_cfg(policy="budget", max_sequence_length=300)
    _, st = run_engine(cfg, specs((200, 500)))
    assert st.requests[0].output_len == 100 and st.requests[0].generated == 100


def test_request_failures_are_recorded_and_the_run_goes_on():
    cfg = make_cfg(policy="budget", max_sequence_length=300, kv_blocks=1, block_size=256)
    _, st = run_engine(cfg, specs((400, 10), (200, 100), (100, 10)))
    by_id = {r.id: r for r in st.requests}
    assert by_id[0].fail_reason == "prompt_exceeds_max_sequence_length"
    assert by_id[1].fail_reason == "kv_block_overflow"  # 200 + 100 tokens need 2 blocks of 256
    assert by_id[2].outcome == Outcome.COMPLETED


def test_a_round_that_admits_nothing_counts_no_snap_split():
    """Regression: snapping a 2-token prompt down to 1 token, which the flash-attn guard then refuses,
    creates no chunk, so it is no snap split (and the next identical round must not count one either)."""
    cfg = make_cfg(kind="transformer", policy="megatron", chunked=True)
    sched = round_scheduler(cfg)
    ctx, grid = sched.ctx, sched.grid
    assert sched.gating_active
    r = Request(1, 2, 4)
    r.start_prefill(2)
    queue = deque([r])
    for _ in range(3):
        ctx.begin_round(3, 0)  # A = 3: the first graph within budget is (4, 1, 3) -> a 1-token chunk
        res = sched.schedule(queue)
        assert res.stop_reason == "single_token_guard" and not ctx.admitted
    assert grid.find_chunk_size(3, 0, 3, 2) == 1
    assert sched.counters.snap_splits == 0 and sched.counters.eager_admissions == 0
