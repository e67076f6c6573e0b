"""The step loop: arrivals -> schedule -> real shape -> graph (or eager) -> run -> update.

Reproduces Megatron's dynamic engine step lifecycle. The scheduler
and the graph choice never know which backend runs the step; the backend only returns its duration.

One step is public moves, as in nano-vllm's ``step()`` (schedule, run, postprocess): ``arrive``
for each request due, ``begin_round`` (the scheduler's round), then ``advance`` (the step's graph,
its duration from the backend, then ``postprocess``: record, emit, finish, admit,
pause/resume/evict). An ``Engine`` is a ``cgbench.engine.drive.Unit`` (its rounds and steps, for the
one event loop of every topology) and, run alone, a system of that one unit: ``Engine.run`` is
``drive`` over it. The expert-parallel engine (``cgbench.engine.ep``) drives each rank through the
same moves, with ``step_work`` / ``price`` / ``postprocess`` in place of ``advance`` so that it
chooses the graphs across ranks and prices the step by the slowest rank.

An engine is built from records (``cgbench.engine.build`` is the one place a config becomes one):
its ``Scheduler`` (with the ``Context`` and the options it admits under) and ``CoreOptions``.

The running decodes live in a row set. ``EveryStepRows`` (this module) steps every row every step:
with it, ``Engine`` is the oracle. The event-proportional engine (``cgbench.engine.fast``) swaps in
rows that advance in aggregate and adds decode stretches; everything else (emission, finishing,
pause/resume/evict, accounting, invariants) is this module's, for both.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from cgbench.engine.context import Context, ceil_div
from cgbench.engine.contract import StepBackend, StepRecord, StepWork
from cgbench.engine.drive import RunState, Stop, Watchdog, drive
from cgbench.engine.invariants import InvariantError, MegatronAssertion
from cgbench.engine.ledger import Ledger
from cgbench.engine.policies import Policy
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.request import Outcome, Request, make_request
from cgbench.engine.rows import compact_finished, pause_swap, rotate_into_evicted
from cgbench.engine.scheduler import GatingCounters, GraphChoice, RoundResult, Scheduler
from cgbench.engine.stats import StepStats, add_emitted, record_steps
from cgbench.grids.lookup import Grid
from cgbench.workload.stream import RequestSpec, RequestStream

__all__ = ["CoreOptions", "Engine", "EveryStepRows", "RoundObserver", "RunState"]


class RoundObserver(Protocol):
    """Watches scheduling rounds (analysis tools, tests): ``before`` sees the queue a round starts
    from, ``after`` the round's result. The step-by-step engine calls it on every round; the fast
    engine only on the rounds it does not stretch."""

    def before(self, queue: deque[Request]) -> None: ...

    def after(self, result: RoundResult) -> None: ...


@dataclass(frozen=True, slots=True)
class CoreOptions:
    """How an engine core runs, decided once per run (``cgbench.engine.build.core_options``)."""

    trace: bool = False  # keep a ``StepRecord`` per step (``--trace``)
    check_invariants: bool = False  # ``engine.check_invariants``: budgets and KV conservation every step
    stall_steps: int = 1000  # the watchdog's: steps without progress before the run stalls
    kv_corners: str = "megatron"  # ``engine.kv_corners``: crash where Megatron asserts, or re-prefill


class EveryStepRows:
    """The running decodes in Megatron's active-row order, every one stepped every step (the oracle)."""

    __slots__ = ("ctx", "q", "running")

    def __init__(self, ctx: Context, stats: StepStats) -> None:
        self.ctx = ctx
        self.q = ctx.decode_tokens
        self.running: list[Request] = []  # up to date at every step boundary

    def __len__(self) -> int:
        return len(self.running)

    @property
    def stored_kv(self) -> int:
        """KV tokens the rows hold at the step boundary."""
        return sum(r.kv_tokens for r in self.running)

    @property
    def held_blocks(self) -> int:
        return sum(r.blocks for r in self.running)

    def add(self, reqs: Sequence[Request], first_step: int, now_s: float) -> None:
        """``reqs`` decode from step ``first_step`` on, after the current rows."""
        self.running.extend(reqs)

    def stepped(self, step: int, start_s: float, now_s: float) -> Sequence[Request]:
        """The rows the engine must step one by one at the end of ``step`` (here: all of them)."""
        return self.running

    def drop(self, reqs: Sequence[Request]) -> None:
        """``reqs`` stop decoding (finished, or paused for a KV block)."""
        gone = {id(r) for r in reqs}
        self.running = [r for r in self.running if id(r) not in gone]

    def settle(self, last_step: int) -> None:
        """Bring every row's counters up to the end of ``last_step`` (they always are here)."""

    def check(self, step: int) -> None:
        bs = self.ctx.block_size
        for r in self.running:
            if r.blocks < ceil_div(r.kv_tokens + self.q, bs):
                raise InvariantError(f"step {step}: running request {r.id} lacks a KV block")


class Engine:
    rows_class: ClassVar[type] = EveryStepRows
    event_proportional: ClassVar[bool] = False  # the step-by-step engine (the oracle)

    def __init__(self, options: CoreOptions, scheduler: Scheduler, backend: StepBackend,
                 stream: RequestStream) -> None:
        """``scheduler``: the run's (its ``Context``, the KV pool with its prefix cache and acceptance
        model, becomes this engine's); ``stream``: what this core sees of the workload (completions
        release a closed loop's next request; the next arrival bounds the fast engine's stretches)."""
        # 29 instance attributes at most, the fast engine's included: from 30 on, CPython 3.11 stops
        # sharing the instance dict's keys and ``self.x`` in the step loop gets slower (~2% more instructions).
        self.backend = backend
        self.stream = stream
        self.keep_trace = options.trace
        self.chunked_prefill = scheduler.chunked_prefill
        self.ctx = scheduler.ctx
        self.scheduler = scheduler
        self.graphs = GraphChoice(scheduler.grid, scheduler.policy, backend.captured)
        self.q = self.ctx.decode_tokens  # tokens per decode row
        self.check = options.check_invariants
        self.watchdog = Watchdog(options.stall_steps)
        self.state = RunState(requests=Ledger(verify=self.check))
        self.queue: deque[Request] = deque()
        self.rows = self.rows_class(self.ctx, self.state.stats)  # running decodes
        self.paused: list[Request] = []  # the paused rows in row order; resume takes from the right
        # the active rows in Megatron's row order (rows.py); a row's position is looked up when it
        # moves (list.index, identity), which is cheaper than keeping an index current on every move
        self.order: list[Request] = []
        self.kv_corners = options.kv_corners
        self.halted = False  # the engine crashed (an assertion Megatron raises)
        self._emitted_through: int | None = None  # the last step whose tokens the rows emitted, when it is not step - 1
        self.chunked: Request | None = None  # the hidden chunked-prefill request between steps
        self.step = 0
        self._step_start_s = 0.0
        self.total_work = 0  # prompt + output tokens of every request that arrived
        self.step_bound = Watchdog.bound(0)  # the most steps the workload so far can need
        self.last_progress = 0  # last step that admitted or finished a request (the stall watchdog)
        self.round_observer: RoundObserver | None = None
        self._result: RoundResult | None = None  # the last ``schedule_round``'s, for ``run_step``

    @property
    def grid(self) -> Grid:
        """The captured graphs this engine matches its steps on (its scheduler's)."""
        return self.scheduler.grid

    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    # -- arrivals ---------------------------------------------------------------------------------

    def arrive(self, spec: RequestSpec) -> None:
        """``spec`` arrives now: a new request joins the queue's tail, or fails at once when it can never
        run (a prompt past ``max_sequence_length``, or past ``max_tokens`` without chunked prefill, or
        more KV blocks than the pool). Its tokens count toward the step bound either way."""
        self.total_work += spec.prompt_tokens + spec.output_tokens
        self.step_bound = Watchdog.bound(self.total_work)  # kept current here: it is read every round
        ctx = self.ctx
        msl = ctx.max_sequence_length
        req = make_request(spec.id, spec.prompt_tokens, spec.output_tokens, msl,
                           arrival_s=spec.arrival_s, arrival_step=self.step)
        self.state.requests.arrive(req)
        reason = ""
        if spec.prompt_tokens > msl:
            reason = "prompt_exceeds_max_sequence_length"
        elif not self.chunked_prefill and spec.prompt_tokens > ctx.max_tokens:
            reason = "prompt_exceeds_max_tokens"
        elif ctx.rules.arrival_blocks(spec.prompt_tokens, req.output_len, ctx.num_speculative_tokens,
                                      ctx.block_size) > ctx.pool_blocks:
            reason = "kv_block_overflow"
        if reason:
            self._fail(req, reason)
            return
        req.start_prefill(spec.prompt_tokens)
        if ctx.prefix is not None:
            ctx.prefix.arrive(req.id, spec.prefix_blocks, spec.prompt_tokens)
        self.queue.append(req)

    def _fail(self, req: Request, reason: str) -> None:
        req.outcome = Outcome.FAILED
        req.fail_reason = reason
        req.finish_s = self.state.now_s
        req.finish_step = self.step
        if self.ctx.prefix is not None:
            self.ctx.prefix.forget(req.id)
        self.stream.on_complete(self.state.now_s)
        self.state.requests.retire(req)  # nothing changes it after this

    # -- the run: this engine alone, a system of one unit (cgbench.engine.drive) ---------------------

    def run(self) -> RunState:
        """Run to the end (``drive`` over this engine alone). The cyclic garbage collector pauses
        meanwhile: the engine makes no reference cycles, and its passes over a long run's live objects
        cost ~10% of the time."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return drive(self)
        finally:
            if collecting:
                gc.enable()

    @property
    def units(self) -> Sequence[Engine]:
        return (self,)

    def can_route(self) -> bool:
        return True

    def deliver(self, spec: RequestSpec, t_s: float, wake: Callable[[int], None] | None) -> None:
        if wake is not None:
            wake(0)
        self.arrive(spec)

    def stopped(self, unit: int, stop: Stop) -> bool:
        self.state.outcome, self.state.diagnosis = stop
        return True

    def stalled(self, unit: int) -> None:
        self.state.outcome, self.state.diagnosis = "stalled", self.idle_diagnosis()

    # -- as a unit of the event loop (cgbench.engine.drive.Unit; its rounds and steps are below) -----

    def halt(self) -> Stop | None:
        st = self.state
        return Stop(st.outcome, st.diagnosis) if self.halted else None

    def progress_diagnosis(self) -> tuple[str, str]:
        return "", self.diagnose("no progress")

    def idle_diagnosis(self) -> str:
        result = self._result
        assert result is not None
        return self.stall_diagnosis(result)

    # -- the public round: begin_round, then advance (or step_work, price, postprocess) ------------

    def begin_round(self) -> RoundResult:
        """One scheduling round, after the arrivals due by now: the context's batch counters restart
        from the running rows and the scheduler admits from the queue's head (the ``round_observer``
        watching). A round that admits a request for the first time, or takes one off the queue, is
        progress for the stall watchdog. ``idle`` then says whether it left a step to run."""
        self.schedule_round()
        result = self._result
        assert result is not None
        return result

    def schedule_round(self) -> bool:
        """``begin_round`` as a unit of the event loop runs it: the round's result is kept for
        ``run_step``; True if the round left a step to run (not ``idle``)."""
        ctx = self.ctx
        if self.scheduler.async_overlap:  # the last step's P (the context keeps it until this reset)
            self.scheduler.previous_prefill = ctx.prefill_count
        ctx.begin_round(len(self.rows), len(self.paused))
        if ctx.handoff is not None:
            ctx.pinned_slots = ctx.handoff.pinned_at(self.step)
        queued_before = len(self.queue)
        observer = self.round_observer
        if observer is not None:
            observer.before(self.queue)
        try:
            result = self.scheduler.schedule(self.queue)
        except MegatronAssertion as e:
            self._megatron_raised(e)
            result = RoundResult(stop_reason="engine_assertion")
        if observer is not None:
            observer.after(result)
        if ctx.admitted and (len(self.queue) < queued_before
                             or any(a.request.first_admit_step < 0 for a in ctx.admitted)):
            self.last_progress = self.step
        self._result = result
        return ctx.active_tokens != 0  # ``not idle``, inlined: once per round

    def await_pulls(self) -> bool:
        """The round left nothing to run: with requests queued, the engine waits for its handoff pulls
        (``handoff.py``) rather than stepping, so every pinned slot is released. True if any was (a new
        round may then admit). The event loop (``drive.Drive``) asks it of every idle unit, once, and
        an EP group asks every rank when all of them are idle."""
        handoff = self.ctx.handoff
        return handoff is not None and bool(self.queue) and handoff.release_all()

    @property
    def idle(self) -> bool:
        """The round left nothing to run: no running row and no admitted chunk."""
        return self.ctx.active_tokens == 0

    @property
    def drained(self) -> bool:
        """No request is queued, paused or half prefilled: everything that arrived has ended."""
        return not self.queue and not self.paused and self.chunked is None

    @property
    def in_flight(self) -> int:
        """Requests this engine holds: queued, running or paused."""
        return len(self.queue) + len(self.rows) + len(self.paused)

    def wait_until(self, t_s: float) -> None:
        """Nothing runs before ``t_s`` (the next arrival): the clock moves there, never back."""
        st = self.state
        st.now_s = max(st.now_s, t_s)

    def advance(self, result: RoundResult) -> None:
        """Run the step ``result``'s round scheduled: the graph its real shape replays (``graphs``), its
        duration from the backend (``price``), then ``postprocess``. (The event-proportional engine
        runs a whole decode stretch here when the round admitted nothing.)"""
        self._result = result
        self.run_step()

    def run_step(self) -> None:
        """``advance`` as a unit of the event loop runs it: the step of the last round."""
        result = self._result
        assert result is not None
        ctx = self.ctx
        graph, reason = self.graphs.resolve(ctx.active_tokens, ctx.prefill_count, ctx.decode_count)
        work = self.step_work(graph, reason)
        self.postprocess(work, self.backend.run_step(work, self.rows.running), result)  # ``price``, inlined

    def step_work(self, graph: tuple[int, int, int] | None, reason: str | None) -> StepWork:
        """The step this round scheduled, as a backend sees it: the context's real shape, the KV tokens
        it attends, the admitted chunks, replaying ``graph`` (or eager for ``reason``), as the caller
        chose. Checks the step's budgets under ``engine.check_invariants``."""
        ctx = self.ctx
        T, P, D = ctx.active_tokens, ctx.prefill_count, ctx.decode_count
        if self.check:
            self._check_budgets(T, P, D)
        admitted = ctx.admitted
        context_tokens = self.rows.stored_kv + D * self.q
        for a in admitted:
            context_tokens += a.request.finished_chunk  # already includes this chunk
        return StepWork(T, P, D, context_tokens, graph, None, reason, admitted)

    def price(self, work: StepWork) -> float:
        """``work``'s duration in seconds: the backend runs (or prices) it over this engine's rows."""
        return self.backend.run_step(work, self.rows.running)

    def postprocess(self, work: StepWork, duration_s: float, result: RoundResult) -> None:
        """The step ``work`` of ``result``'s round ran for ``duration_s`` from now: account it (and
        trace it), move the clock to its end, then Megatron's update_requests (emit tokens, finish,
        admit the chunks, pause/resume/evict); the step count moves on."""
        st = self.state
        T, P, D = work.tokens, work.prefills, work.decodes
        graph, reason = work.graph, work.eager_reason
        record_steps(st.stats, T, P, D, graph, reason, (duration_s,), len(self.queue))
        if self.keep_trace:
            deferred = result.deferred
            st.trace.append(StepRecord(self.step, st.now_s, duration_s, (T, P, D), graph, reason,
                                       [(a.request.id, a.chunk, a.final) for a in work.admitted],
                                       deferred.id if deferred is not None else None, len(self.queue),
                                       len(self.paused)))
        self._step_start_s = st.now_s
        st.now_s += duration_s
        try:
            if self._update():
                self.last_progress = self.step
        except MegatronAssertion as e:
            self._megatron_raised(e)
        self.step += 1

    def _megatron_raised(self, e: MegatronAssertion) -> None:
        """Megatron's own code raises here (an assertion or error of its allocators): the run stops,
        as Megatron's engine does, with outcome ``engine_assertion``."""
        st = self.state
        st.outcome = "engine_assertion"
        st.diagnosis = f"step {self.step}: {e}"
        self.halted = True

    def finish(self) -> RunState:
        """The run is over: every row's counters brought up to the last step, every finished request
        packed into the ledger's columns (its object let go). Returns the run's state."""
        self.rows.settle(self.step - 1 if self._emitted_through is None else self._emitted_through)
        self.state.requests.pack()
        return self.state

    @property
    def counters(self) -> GatingCounters:
        """The scheduler's gating counters: deferrals, starvation warnings, snap splits, eager admissions."""
        return self.scheduler.counters

    @property
    def gating_active(self) -> bool:
        """Whether admission is gated on the grid in this run (``scheduler.gating_active``)."""
        return self.scheduler.gating_active

    # -- what the run reports (its topology's facts: the result's metric blocks) ---------------------

    @property
    def ranks(self) -> list[Engine]:
        """The engine cores of the run: this one."""
        return [self]

    @property
    def prefix_cache(self) -> PrefixCache | None:
        """The KV pool's prefix cache (``engine.prefix_caching``), for the result's ``prefix_cache`` block."""
        return self.ctx.prefix

    @property
    def dummy_steps(self) -> int:
        """Dummy decode rank-steps (EP only): none."""
        return 0

    def metric_blocks(self) -> dict[str, Any]:
        """The metric blocks only this topology has: none (``ep`` and ``dp`` are the others')."""
        return {}

    # -- update_requests --------------------------------------------------------------------------

    def _emit(self, req: Request, n: int) -> None:
        now = self.state.now_s
        if req.first_token_step < 0:
            req.first_token_step = self.step
            req.first_token_s = now
        elif req.last_token_s >= 0:
            self.state.stats.itl.add(now - req.last_token_s, n)
        add_emitted(self.state.stats, now, n)
        req.generated += n
        req.last_token_s = now

    def _finish(self, req: Request) -> None:
        req.outcome = Outcome.COMPLETED
        req.finish_step = self.step
        req.finish_s = self.state.now_s
        self.ctx.release(req)
        if self.ctx.handoff is not None:  # its state is handed off: its Mamba slot stays pinned
            self.ctx.handoff.pin(self.step)
        if self.ctx.prefix is not None:
            self.ctx.prefix.forget(req.id)
        self.backend.release(req)
        self.stream.on_complete(self.state.now_s)
        self.state.requests.retire(req)  # nothing changes it after this

    def _update(self) -> bool:
        """Megatron's update_requests after a step. Returns True if a request finished."""
        q, ctx, rows, now = self.q, self.ctx, self.rows, self.state.now_s
        finished: list[Request] = []
        needing: list[Request] = []
        try:
            ctx.after_step()
        except MegatronAssertion:  # raised before any row emitted this step's token (a lazy row must not count it)
            self._emitted_through = self.step - 1
            raise
        if ctx.acceptance is not None:
            self._step_speculative(rows.stepped(self.step, self._step_start_s, now), finished, needing)
        else:
            for r in rows.stepped(self.step, self._step_start_s, now):
                r.kv_tokens += q
                left = r.output_len - r.generated
                self._emit(r, q if q < left else left)
                if left <= q:
                    finished.append(r)
                elif ctx.decode_blocks_needed(r) > 0:
                    needing.append(r)
        if finished:
            rows.drop(finished)
            for r in finished:
                self._finish(r)
        done = False  # nothing admitted: no admission bookkeeping to run
        decoding: Sequence[Request] = ()
        ran_chunk: Request | None = None
        if ctx.admitted:
            for a in ctx.admitted:  # every admitted chunk's request takes a row after the active rows
                self._append_row(a.request)
            done, decoding, ran_chunk = self._process_admissions()
        if finished or done:
            self._compact_rows(finished + [a.request for a in ctx.admitted
                                           if a.final and a.request.outcome == Outcome.COMPLETED])
        if decoding:
            rows.add(decoding, self.step + 1, now)
            for r in decoding:
                if ctx.decode_blocks_needed(r) > 0:
                    needing.append(r)
        if needing or self.paused:
            self._kv_pressure(needing, ran_chunk)
        if ran_chunk is not None:
            self._hide_chunked(ran_chunk)
        if ctx.prefix is not None:  # the step's last release group goes back to the pool
            ctx.prefix.flush()
        if self.check:
            self._check_blocks()
        return done or bool(finished)

    def _step_speculative(self, stepped: Sequence[Request], finished: list[Request],
                          needing: list[Request]) -> None:
        """The decode rows' update under an acceptance model: each row keeps and emits 1 + the drafts
        accepted (its emission clamped to the tokens it has left, as Megatron trims them), gives back
        a KV block its rejected drafts alone used (``Context.rewind``), then meets the pause rule."""
        ctx = self.ctx
        acceptance = ctx.acceptance
        assert acceptance is not None
        for r in stepped:
            n = 1 + acceptance.draw(r.id, r.generated)
            r.kv_tokens += n
            left = r.output_len - r.generated
            self._emit(r, n if n < left else left)
            if left <= n:
                finished.append(r)
                continue
            ctx.rewind(r)
            if ctx.decode_blocks_needed(r) > 0:
                needing.append(r)

    def _process_admissions(self) -> tuple[bool, list[Request], Request | None]:
        """The step's prefill chunks: first-admission accounting, the hidden chunked request, first
        tokens. Returns (a request finished, the requests that decode from the next step, the request
        whose non-final chunk ran)."""
        finished_any, decoding, ran_chunk = False, [], None
        for a in self.ctx.admitted:
            r = a.request
            r.kv_tokens += a.chunk
            r.chunks += 1
            r.outcome = Outcome.RUNNING  # also a re-admission after an eviction
            if r.first_admit_step < 0:
                r.first_admit_step = self.step
                r.first_admit_s = self._step_start_s
            if not a.final:
                self.chunked = ran_chunk = r
                continue
            if self.chunked is r:
                self.chunked = None
            if r.decode_remaining > 0:  # output_len 0: the prefill's sample is trimmed away
                self._emit(r, 1)
                self.state.stats.prefill_emitted += 1
            if r.decode_remaining <= 0:
                self._finish(r)
                finished_any = True
            else:
                decoding.append(r)
        return finished_any, decoding, ran_chunk

    # -- row order, pause, resume, evict ------------------------------------------------------------

    def _append_row(self, r: Request) -> None:
        self.order.append(r)

    def _compact_rows(self, gone: list[Request]) -> None:
        """Finished rows leave the active region (``rows.compact_finished``)."""
        order = self.order
        compact_finished(order, {order.index(r) for r in gone})

    def _hide_chunked(self, r: Request) -> None:
        """The request whose non-final chunk ran swaps with the last active row and is hidden."""
        order = self.order
        i = order.index(r)
        last = order.pop()
        if last is not r:
            order[i] = last

    def _kv_pressure(self, needing: list[Request], ran_chunk: Request | None) -> None:
        """Rows that need a KV block they do not hold pause; then resume (from the right), evict past
        the paused budget, resume again; evicted requests go back to the queue's front. A pause counts
        when the request missed a step: it is still paused, or was evicted."""
        newly: list[Request] = []
        if needing:
            newly, self.order = pause_swap(self.order, {self.order.index(r) for r in needing})
            self.rows.drop(newly)
            self.paused.extend(newly)
            for r in newly:
                r.pauses += 1
        if not self.paused:
            return
        self._resume(ran_chunk)
        evicted = self._evict()
        self._resume(ran_chunk)
        if not self.order and self.chunked is None and (self.paused or self.ctx.rules.asserts_when_emptied):
            if self.kv_corners == "megatron":
                self._crash(evicted)
            else:  # safe: what can neither resume nor stay paused is re-prefilled later
                evicted = self._evict_rows(len(self.paused)) + evicted  # in row order
        self._requeue(evicted)
        self.state.stats.paused_events += sum(1 for r in newly if r.outcome != Outcome.RUNNING or r in self.paused)

    def _resume(self, ran_chunk: Request | None) -> None:
        if not self.paused:
            return
        ctx, paused = self.ctx, self.paused
        # the active rows: the running decodes and the chunked request only if its chunk ran
        if ctx.prefix is not None:  # a shared block counts once (get_active_used)
            held = ctx.held_blocks(self.order)
        else:
            held = self.rows.held_blocks + (ran_chunk.blocks if ran_chunk is not None else 0)
        k = ctx.rules.resumable(ctx, paused, held, ctx.max_requests - len(self.order))
        if k == 0:
            return
        resumed = paused[len(paused) - k:]
        del paused[len(paused) - k:]
        ctx.grant_decode_blocks(resumed)
        self.rows.add(resumed, self.step + 1, self.state.now_s)
        self.order[:0] = resumed  # they join the active region on its left

    def _evict(self) -> list[Request]:
        ctx = self.ctx
        room = ctx.max_requests - len(self.order)
        return self._evict_rows(ctx.rules.evict_count(ctx, self.paused, room if room > 0 else 0))

    def _evict_rows(self, e: int) -> list[Request]:
        """The right-most ``e`` paused rows give back their KV; the right-most active rows move into
        their slots. Returns the evicted requests in row order."""
        if e == 0:
            return []
        evicted = self.paused[len(self.paused) - e:]
        del self.paused[len(self.paused) - e:]
        self.order = rotate_into_evicted(self.order, e)
        for r in evicted:
            self.ctx.release(r, "evict")
            self.backend.release(r)
            r.evictions += 1
            r.kv_tokens = 0
            r.outcome = Outcome.WAITING
            r.cg_wait_iters = 0
            self.state.stats.evicted_events += 1
        return evicted

    def _requeue(self, evicted: list[Request]) -> None:
        """Evicted requests go to the queue's front in reverse row order, behind a chunked head; each is
        re-prefilled with its generated tokens appended to its prompt."""
        at = 1 if self.chunked is not None and self.queue and self.queue[0] is self.chunked else 0
        for r in evicted:
            new_prompt = r.prompt_len + r.generated
            if (self.kv_corners == "safe" and not self.chunked_prefill and new_prompt > self.ctx.max_tokens):
                self._fail(r, "evicted_prompt_exceeds_max_tokens")
                continue
            r.start_prefill(new_prompt)
            if self.ctx.prefix is not None:
                self.ctx.prefix.requeued(r.id, new_prompt, self.ctx.rules.evicted_keeps_hashes)
            self.queue.insert(at, r)

    def _crash(self, evicted: list[Request]) -> None:
        """Megatron asserts when, after resume/evict/resume, no active row and no chunked request remain."""
        st = self.state
        st.outcome = "engine_assertion"
        what = []
        if evicted:
            what.append(f"evicted request(s) {[r.id for r in evicted]}")
        if self.paused:
            what.append(f"paused request(s) {[r.id for r in self.paused]} cannot resume")
        ctx = self.ctx
        pool = (f"active KV pool {ctx.active_blocks} blocks, paused budget {ctx.paused_block_budget}"
                if ctx.rules.asserts_when_emptied else  # main: one shared pool, the budget only retains
                f"shared KV pool {ctx.pool_blocks} blocks, paused retention budget {ctx.paused_block_budget}")
        st.diagnosis = (f"step {self.step}: Megatron's update_requests asserts: after resume, evict and "
                        f"resume no active request and no chunked request remain ({'; '.join(what)}; "
                        f"{pool}); engine.kv_corners=safe re-prefills them instead")
        self.halted = True

    # -- diagnostics and invariants -----------------------------------------------------------------

    def stall_diagnosis(self, result: RoundResult) -> str:
        """Why the run stalls after ``result``'s round left nothing to run while requests wait and
        nothing more will arrive: the head's ``diagnose``, and, when gating deferred it, Megatron's
        idle spin (whose deferrals and starvation warnings this counts, see ``_idle_spin``)."""
        why = self.diagnose(result.stop_reason)
        if result.deferred is not None:
            why += self._idle_spin(result)
        return why

    def _idle_spin(self, result: RoundResult) -> str:
        """Gating defers the head while nothing runs and nothing else will arrive: Megatron's engine
        spins here without a forward step, forever. cgbench stops after the watchdog's worth of
        rounds (``watchdog.stall_steps``), counting the deferrals and starvation warnings they log."""
        head, sched = result.deferred, self.scheduler
        assert head is not None
        sched.previous_prefill = -1  # nothing runs: no forward to overlap with
        before = sched.counters.starvation_warnings
        stall_steps = self.watchdog.stall_steps
        sched.register_waits(head, stall_steps - 1, result)
        cause = ""
        if not self.grid.non_decode:
            cause = ("gating is active but the captured graph list has no prefill or mixed graph, so every "
                     "prefill candidate misses and every prefill is deferred; ")
        return (f"; {cause}Megatron's engine spins without a step, logging the starvation warning every "
                f"{sched.warn_after} rounds ({sched.counters.starvation_warnings - before} more counted over "
                f"the {stall_steps} idle rounds of the stall watchdog)")

    def diagnose(self, stop_reason: str) -> str:
        """Why nothing more is admitted (the round stopped for ``stop_reason``): paused requests that
        cannot resume, or the head request, its candidate step and the graph it would miss."""
        if not self.queue:
            return f"{len(self.paused)} paused request(s) cannot resume: KV pool exhausted"
        head = self.queue[0]
        ctx = self.ctx
        if not self.chunked_prefill and head.evictions and head.remaining_prompt > ctx.max_tokens:
            return (f"head request {head.id} was evicted and re-queued with a {head.remaining_prompt}-token "
                    f"prompt (its prompt plus the tokens it generated) > engine.max_tokens {ctx.max_tokens}: "
                    "without chunked prefill it can never be admitted again, as in Megatron "
                    "(engine.kv_corners=safe fails it instead)")
        shape = (ctx.active_tokens + head.remaining_prompt, ctx.prefill_count + 1, ctx.decode_count)
        graph, reason = self.grid.lookup(*shape)
        return (f"head request {head.id} ({head.remaining_prompt} prompt tokens left) cannot be admitted: "
                f"{stop_reason or 'blocked'}; candidate shape {list(shape)} -> "
                f"{'graph ' + str(list(graph)) if graph is not None else 'no graph (' + str(reason) + ')'}; "
                f"free KV blocks {ctx.free_blocks}, paused {len(self.paused)}")

    def _check_budgets(self, T: int, P: int, D: int) -> None:
        ctx = self.ctx
        if T > ctx.max_tokens:
            raise InvariantError(f"step {self.step}: {T} tokens > max_tokens {ctx.max_tokens}")
        if P + D + len(self.paused) > ctx.max_requests:
            raise InvariantError(f"step {self.step}: {P + D} requests + {len(self.paused)} paused "
                                 f"> max_requests {ctx.max_requests}")
        for a in ctx.admitted:
            r = a.request
            if r.blocks < ceil_div(r.kv_tokens + a.chunk, ctx.block_size):
                raise InvariantError(f"step {self.step}: request {r.id} holds {r.blocks} blocks for "
                                     f"{r.kv_tokens + a.chunk} tokens")

    def _check_blocks(self) -> None:
        """KV conservation: every block is held by a running, paused or the chunked request, or free."""
        ctx = self.ctx
        held = self.rows.held_blocks + sum(r.blocks for r in self.paused)
        if self.chunked is not None:
            held += self.chunked.blocks
        held = ctx.unique_held(held)  # prefix caching: a shared block counts once
        cached = ctx.cached_blocks()
        if held + cached + ctx.free_blocks != ctx.pool_blocks:
            raise InvariantError(f"step {self.step}: KV blocks not conserved: held {held} + cached {cached} + "
                                 f"free {ctx.free_blocks} != pool {ctx.pool_blocks}")
        if ctx.prefix is not None:
            live = [*self.order, *self.paused]
            if self.chunked is not None and all(r is not self.chunked for r in self.order):
                live.append(self.chunked)
            why = ctx.prefix.check({r.id: r.blocks for r in live if r.blocks})
            if why is not None:
                raise InvariantError(f"step {self.step}: prefix cache: {why}")
        self.rows.check(self.step)
