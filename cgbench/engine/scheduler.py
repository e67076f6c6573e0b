"""One scheduling round: strict FIFO admission from the waiting queue.

Both paths look only at the head and stop at the first request they cannot admit (head-of-line
blocking). Gating (PR #4870) is active only when ``gating_active`` says so. ``GraphChoice`` is the
one place a step's shape becomes a graph (or eager, and why); the engine, the event-proportional
engine and the ``schedule`` command's replay all use these two.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, fields

from cgbench.config.schema import CGConfig
from cgbench.engine.batch_invariant import aligned_chunk
from cgbench.engine.context import Context
from cgbench.engine.gating import gating_status
from cgbench.engine.policies import DEFER, Policy
from cgbench.engine.request import Request
from cgbench.grids.lookup import Grid

_CACHE_LIMIT = 1 << 18
# The eager reason of a step whose grid graph the backend holds no capture of: every step of
# backend=torch on a CPU (no CUDA graphs), a graph past the capture budget on a GPU.
NOT_CAPTURED = "not_captured"


def gating_active(policy: Policy, cg: CGConfig, grid: Grid) -> bool:
    """Whether admission is gated on the grid: ``gating.gating_status`` (the one condition, with its
    reason).

    The policies that reproduce Megatron's code (``megatron``, ``megatron_6675``:
    ``Policy.megatron_conditions``) gate on Megatron's three conditions only: ``cg.all_prefills``,
    ``cg.non_decode`` and a non-empty graph list. They do not check that the list holds a prefill or
    mixed graph, so with a decode-only list every prefill candidate misses and non-chunked prefill
    defers forever (the run ends ``stalled``; ``gating_without_prefill_graphs`` says so before
    running). The cgbench-only gating policies (``defer``, ``wait_timeout``, ``cover``) add a fourth
    condition, a prefill/mixed graph in the list, so that such a list admits on budgets and runs
    prefills eager instead."""
    return gating_status(policy, cg, grid).active


def gating_without_prefill_graphs(policy: Policy, cg: CGConfig, grid: Grid, *, chunked_prefill: bool) -> str | None:
    """A one-line warning for a gated run whose graph list has no prefill or mixed graph (None otherwise)."""
    if not gating_active(policy, cg, grid) or grid.non_decode:
        return None
    if not chunked_prefill:
        what = "every prefill is deferred forever and the run will stall without a step, as in Megatron"
    elif policy.gates_chunks:
        what = "every chunk misses and waits while other work runs, then runs eager on an idle engine (PR #6675)"
    else:
        what = "every chunk misses and runs eager (Megatron's unsnapped-chunk fallback)"
    return (f"policy={policy.name} gates admission but the captured graph list has no prefill or mixed graph: "
            f"{what}")


class GraphChoice:
    """The graph a step of real shape ``(T, P, D)`` replays: the grid's match, unless the policy's
    forward guard refuses it or the backend captured no graph of that shape (``captured``: the grid
    shapes it can replay; ``None``: all of them, as the simulator prices them); ``(None, reason)``
    when the step runs eager. Memoized per shape."""

    __slots__ = ("grid", "policy", "captured", "_cache")

    def __init__(self, grid: Grid, policy: Policy,
                 captured: frozenset[tuple[int, int, int]] | None = None) -> None:
        self.grid = grid
        self.policy = policy
        self.captured = captured
        self._cache: dict[tuple[int, int, int], tuple[tuple[int, int, int] | None, str | None]] = {}

    def resolve(self, T: int, P: int, D: int) -> tuple[tuple[int, int, int] | None, str | None]:
        key = (T, P, D)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        graph, reason = self.grid.lookup(T, P, D)
        choice: tuple[tuple[int, int, int] | None, str | None]
        if graph is not None and self.policy.forward_guard(T, P, graph.token_count):
            choice = (None, "pad_guard")
        elif graph is not None:
            shape = (graph.token_count, graph.prefill_req_count, graph.decode_req_count)
            choice = (shape, reason) if self.captured is None or shape in self.captured else (None, NOT_CAPTURED)
        else:
            choice = (None, reason)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = choice
        return choice


@dataclass(slots=True)
class GatingCounters:
    deferral_events: int = 0
    starvation_warnings: int = 0
    snap_splits: int = 0
    eager_admissions: int = 0  # admissions a gating policy let through knowing the step misses
    # prefix caching, non-chunked: deferrals of a candidate sized with the full remaining prompt
    # whose computed tokens alone would have found a graph (the cost of Megatron's conservative gate)
    prefix_full_size_deferrals: int = 0


def summed_counters(parts: Iterable[GatingCounters]) -> GatingCounters:
    """Several schedulers' gating counters (an EP group's or a DP system's ranks), summed field by field."""
    total = GatingCounters()
    names = [f.name for f in fields(GatingCounters)]
    for c in parts:
        for name in names:
            setattr(total, name, getattr(total, name) + getattr(c, name))
    return total


# a written __init__ (it holds the defaults): a dataclass-made one stays slow when compiled
@dataclass(slots=True, init=False)
class RoundResult:
    deferred: Request | None  # the head held back by gating this round, if any
    stop_reason: str  # why the round ended with a non-empty queue ("" if it emptied)
    # prefix caching: the deferral is one the full-size non-chunked candidate caused (its computed
    # tokens would have hit a graph); every repeat of the round counts it again
    full_size_deferral: bool
    # the gate let the head through (its wait counter reset) and a later check of the same round
    # stopped it (a guard, an alignment, a prefix span's budget): the next round gates it afresh,
    # so this round is not one the engine may repeat unchanged (engine/fast.py's stretches)
    head_stopped_after_gate: bool

    def __init__(self, deferred: Request | None = None, stop_reason: str = "") -> None:
        self.deferred = deferred
        self.stop_reason = stop_reason
        self.full_size_deferral = False
        self.head_stopped_after_gate = False


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """How a run's scheduler admits, decided once per run (``cgbench.engine.build.scheduler_options``
    derives it from the config, the grid and the policy; the replay of a saved round too)."""

    chunked_prefill: bool
    gating: bool  # ``gating_active(policy, cg, grid)``
    flash_attn_guard: bool = True
    ssm_alignment: int = 0  # batch-invariant SSM chunking (``batch_invariant.ssm_alignment``; 0 = off)
    # engine.prefix_gate=computed (cgbench-only): the non-chunked candidate holds only the tokens the
    # request computes, not its whole prompt (Megatron 0.19.2's full-size candidate)
    gate_on_computed: bool = False
    # Megatron 0.19.2's async scheduling (engine ~1695), where it applies: never under chunked
    # prefill (a chunked head's probe checks budgets only, so only the non-chunked gate is affected)
    async_overlap: bool = False


class Scheduler:
    def __init__(self, ctx: Context, grid: Grid, policy: Policy, options: SchedulerOptions) -> None:
        self.ctx = ctx
        self.grid = grid
        self.policy = policy
        self.options = options
        # the options the rounds read, as attributes (one load each in the admission loop)
        self.chunked_prefill = options.chunked_prefill
        self.gating_active = options.gating
        self.flash_attn_guard = options.flash_attn_guard
        self.ssm_alignment = options.ssm_alignment
        self.gate_on_computed = options.gate_on_computed
        self.warn_after = max(100, ctx.max_sequence_length)
        self.counters = GatingCounters()
        self._held: list[Request] = []  # prefix caching: the pass's coordination waits
        self._pending: set[int] = set()  # prefix caching: hashes the pass's admissions register
        # Async scheduling: a step overlaps scheduling with the forward when the running batch is
        # decode-only with nothing paused and the queue head cannot be admitted (a probe that records
        # no wait). The engine sets ``previous_prefill`` (the last step's P) each round;
        # ``ctx.paused_count`` says whether anything is paused.
        self.async_overlap = options.async_overlap
        self.previous_prefill = -1  # -1: no step before this round to overlap with

    def schedule(self, queue: deque[Request]) -> RoundResult:
        if self.ctx.prefix is not None:
            return self._schedule_with_prefix(queue)
        if self.chunked_prefill:
            return self._schedule_chunked(queue)
        return self._schedule_non_chunked(queue)

    def _schedule_with_prefix(self, queue: deque[Request]) -> RoundResult:
        """A pass under prefix caching (Megatron's pending-hash coordination): a request sharing a
        block hash that an admission of this pass registers is taken off the queue for the pass (a
        coordination wait); without chunked prefill the pass goes on behind it, with chunked prefill
        the wait ends the pass (``schedule_chunked_prefill``'s loop runs while a request was
        scheduled). The held requests go back to the queue's front in their order at the end, behind
        a chunked request left at its head."""
        self._held = []
        self._pending = set()
        result = (self._schedule_chunked(queue) if self.chunked_prefill
                  else self._schedule_non_chunked(queue))
        held = self._held
        if held:
            head = queue.popleft() if self.ctx.chunked_request_id >= 0 and queue else None
            queue.extendleft(reversed(held))
            if head is not None:
                queue.appendleft(head)
            if not result.stop_reason:
                result.stop_reason = "prefix_conflict"
        return result

    def _conflicts(self, req: Request, queue: deque[Request]) -> bool:
        """``req`` shares a block hash with an admission of this pass: hold it (counted)."""
        pc = self.ctx.prefix
        assert pc is not None
        if self._pending and pc.conflicts(req.id, self._pending):
            self._held.append(queue.popleft())
            return True
        return False

    def _mark_pending(self, req: Request) -> None:
        pc = self.ctx.prefix
        assert pc is not None
        self._pending.update(pc.pending(req.id))

    # -- gating helpers (Megatron's _register_cg_wait / _cg_admission_check) --------------------

    def register_waits(self, req: Request, n: int, result: RoundResult) -> None:
        """``n`` consecutive rounds that hold ``req`` back (Megatron's _register_cg_wait, n times): the
        warning fires at every multiple of ``max(100, max_sequence_length)``."""
        result.deferred = req
        if self.overlapping and not self.ctx.admitted:  # the head itself: an overlap step, no wait recorded
            return
        w = req.cg_wait_iters
        req.cg_wait_iters = w + n
        req.deferrals += n
        req.max_cg_wait = max(req.max_cg_wait, w + n)
        self.counters.deferral_events += n
        if result.full_size_deferral:
            self.counters.prefix_full_size_deferrals += n
        result.deferred = req
        self.counters.starvation_warnings += (w + n) // self.warn_after - w // self.warn_after

    @property
    def overlapping(self) -> bool:
        """This round is an async overlap step if the gate defers its head: the step before it was
        decode-only and nothing is paused."""
        return self.async_overlap and self.previous_prefill == 0 and self.ctx.paused_count == 0

    def candidate_hits(self, tokens: int) -> bool:
        ctx = self.ctx
        graph, _ = self.grid.lookup(ctx.active_tokens + tokens, ctx.prefill_count + 1, ctx.decode_count)
        return graph is not None

    # -- non-chunked --------------------------------------------------------------------------------

    def _schedule_non_chunked(self, queue: deque[Request]) -> RoundResult:
        ctx, result = self.ctx, RoundResult()
        prefix = ctx.prefix is not None
        while queue:
            req = queue[0]
            if prefix and self._conflicts(req, queue):
                continue
            request_ok, tokens_ok, kv_ok = ctx.check_availability(req)
            if not (request_ok and tokens_ok and kv_ok):
                result.stop_reason = _budget_reason(request_ok, tokens_ok, kv_ok, ctx)
                return result
            if self.gating_active:
                # the candidate holds the whole remaining prompt, also the tokens a prefix hit skips
                # (Megatron 0.19.2's non-chunked gate: conservative under prefix caching)
                if self.candidate_hits(ctx.head_computed if prefix and self.gate_on_computed
                                       else req.remaining_prompt):
                    req.cg_wait_iters = 0
                elif self.policy.on_non_chunked_miss(req.cg_wait_iters) == DEFER:
                    result.full_size_deferral = (prefix and ctx.head_computed < req.remaining_prompt
                                                 and self.candidate_hits(ctx.head_computed))
                    self.register_waits(req, 1, result)
                    result.stop_reason = "deferred"
                    return result
                else:
                    req.cg_wait_iters = 0
                    self.counters.eager_admissions += 1
            if prefix:
                self._mark_pending(req)
            ctx.add_request(req, req.remaining_prompt)
            queue.popleft()
        return result

    # -- chunked ------------------------------------------------------------------------------------

    def _schedule_chunked(self, queue: deque[Request]) -> RoundResult:
        ctx, result = self.ctx, RoundResult()
        pc = ctx.prefix
        while queue:
            req = queue[0]
            continuing = ctx.chunked_request_id >= 0
            if pc is not None and not continuing and self._conflicts(req, queue):
                result.stop_reason = "prefix_conflict"
                return result
            rem = req.remaining_prompt
            request_ok, _, kv_ok = ctx.check_availability(req)
            request_ok = request_ok or continuing
            if not (request_ok and kv_ok and ctx.active_tokens < ctx.max_tokens):
                result.stop_reason = _budget_reason(request_ok, ctx.active_tokens < ctx.max_tokens, kv_ok, ctx)
                return result
            # prefix caching: a first chunk's skipped tokens cost no budget; it spans them and up to
            # the budget of computed tokens, and snapping sizes the computed tokens only
            skip = 0
            if pc is not None and not continuing:
                skip = min(rem - ctx.head_computed, rem - 1)
            max_chunk = min(rem - skip, ctx.max_tokens - ctx.active_tokens)
            chunk = max_chunk
            split_by_snap = eager_on_purpose = False
            # A continuing chunk is never gated in Megatron 0.19.2 ("would deadlock"); #6675 snaps it
            # like a new one (snaps_continuing); cgbench's policies that guard it snap it only when
            # the unsnapped chunk would miss, so it is not split needlessly.
            policy = self.policy
            if self.gating_active and (not continuing or (policy.gates_chunks and (
                    policy.snaps_continuing or not self.candidate_hits(max_chunk)))):
                snapped = self.grid.find_chunk_size(ctx.active_tokens, ctx.prefill_count,
                                                    ctx.decode_count, max_chunk)
                if snapped is not None:
                    chunk = snapped
                    req.cg_wait_iters = 0
                    split_by_snap = max_chunk >= rem - skip > snapped
                elif policy.admits_covered and self.candidate_hits(max_chunk):
                    req.cg_wait_iters = 0  # no boundary fits, but a larger graph covers the step (padded)
                else:
                    idle = ctx.prefill_count == 0 and ctx.decode_count == 0
                    if policy.on_chunk_miss(req.cg_wait_iters, idle) == DEFER:
                        self.register_waits(req, 1, result)
                        result.stop_reason = "deferred"
                        return result
                    req.cg_wait_iters = 0
                    eager_on_purpose = policy.gates_chunks and not idle
            computed = chunk
            if pc is not None:
                chunk = pc.span(req.finished_chunk, skip, chunk, rem)
            if self.ssm_alignment:  # batch-invariant hybrid: SSM-aligned chunks, no flash-attn guard
                chunk = aligned_chunk(rem, chunk, self.ssm_alignment)  # (never with prefix caching: refused)
                if chunk == 0:
                    result.stop_reason = "ssm_chunk_alignment"
                    result.head_stopped_after_gate = True
                    return result
            elif self.flash_attn_guard and rem - chunk == 1:
                if computed > 1:
                    chunk -= 1
                else:
                    result.stop_reason = "single_token_guard"
                    result.head_stopped_after_gate = True
                    return result
            if pc is not None:
                # add_request re-derives the skip for this exact span; where it computes fewer than two
                # tokens its clamp may grow the computed count past the budget: wait for a later step
                if skip > 0 and chunk - skip < 2 and (ctx.active_tokens + pc.match(req.id, req.finished_chunk, chunk)
                                                      .computed > ctx.max_tokens):
                    result.stop_reason = "max_tokens"
                    result.head_stopped_after_gate = True
                    return result
                self._mark_pending(req)
            # counted only for chunks that are admitted: a round that admits nothing changes nothing
            self.counters.snap_splits += split_by_snap
            self.counters.eager_admissions += eager_on_purpose
            adm = ctx.add_request(req, chunk)
            if not adm.final:
                result.stop_reason = "partial_chunk"
                return result
            queue.popleft()
        return result


def _budget_reason(request_ok: bool, tokens_ok: bool, kv_ok: bool, ctx: Context) -> str:
    if not request_ok:
        return "paused_requests" if ctx.paused_count > 0 else "max_requests"
    if not tokens_ok:
        return "max_tokens"
    return "kv_blocks"
