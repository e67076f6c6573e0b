"""The event-proportional engine: the same steps, metrics and trace as ``Engine``, at O(1) per step.

Two things differ from the oracle, and only these live here:

* **Anchored rows** (``AnchoredRows``). A running decode is not touched every step: its side record
  holds an *anchor* ``(step, generated, kv)`` from which its state at any later step follows (it
  advances ``q`` tokens per step), and one entry in an event heap for the step at which something
  happens to it: it finishes, or its next token crosses a KV block boundary. A step hands the
  engine only the rows with an event (or whose last gap was irregular); tokens emitted, KV tokens
  read and inter-token gaps of the others are advanced in aggregate.
* **Decode stretches** (``FastEngine``). When a round admits nothing, the decode-only steps up to the
  next event that could change a scheduling decision run in one move, priced by the injected
  ``StretchPricer``.

``Engine`` (step by step, every request every step) is the oracle this must equal, metric for metric
(tests/engine/test_fast_engine.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import ClassVar, NamedTuple

from cgbench.engine.context import Context
from cgbench.engine.contract import StepBackend, StepRecord, StepWork, StretchPricer, decode_growth
from cgbench.engine.core import CoreOptions, Engine
from cgbench.engine.invariants import InvariantError
from cgbench.engine.request import Request
from cgbench.engine.rows import move_pausing_left
from cgbench.engine.scheduler import RoundResult, Scheduler
from cgbench.engine.stats import StepStats, add_emitted, add_in_order, record_step_totals
from cgbench.native import loaded_from_extension
from cgbench.workload.stream import RequestStream


class _Row:
    """A running decode's anchor: its state at the start of step ``step`` (the fast engine's own)."""

    __slots__ = ("req", "step", "gen", "kv", "pos")

    def __init__(self, req: Request, step: int, pos: int) -> None:
        self.req = req
        self.step = step
        self.gen = req.generated
        self.kv = req.kv_tokens
        self.pos = pos  # row position (Megatron's active-row order)

    def materialize(self, through_step: int, q: int) -> None:
        """Bring the request's counters up to the end of step ``through_step`` (anchor untouched)."""
        r = self.req
        n = (through_step - self.step + 1) * q
        gen = self.gen + n
        r.generated = gen if gen < r.output_len else r.output_len  # comparisons, not builtin calls: hot
        r.kv_tokens = self.kv + n


def _row_position(row: _Row) -> int:
    return row.pos


class _DecodeStep(NamedTuple):
    """A decode-only step of ``decodes`` rows (worked out once per row count): its ``tokens``, its
    graph (or eager, and why), its ``cost`` in seconds of (context tokens, attention pairs), and what
    one such step adds to the next one's context tokens and attention pairs. (A named tuple: the
    quiet-step loop unpacks it in one move.)"""

    tokens: int
    decodes: int
    graph: tuple[int, int, int] | None
    eager_reason: str | None
    cost: Callable[[int, int], float]
    context_growth: int
    pairs_growth: int


class _Stretch:
    """One decode stretch's bounds: it began at step ``first`` (its round's step) and its quiet steps
    run up to ``stop`` (excluded), none starting at or after the next arrival (``next_arrival_s``)
    but the first. Every round of it repeats ``result``'s, deferring ``head`` (if any) once more."""

    __slots__ = ("first", "stop", "next_arrival_s", "head", "result")

    def __init__(self, first: int, result: RoundResult) -> None:
        self.first = self.stop = first
        self.next_arrival_s: float | None = None
        self.head = result.deferred
        self.result = result


class AnchoredRows:
    """The running decodes, advanced in aggregate between their events (see the module docstring)."""

    def __init__(self, ctx: Context, stats: StepStats) -> None:
        self.ctx = ctx
        self.q = ctx.decode_tokens
        self.itl = stats.itl
        self.stats = stats
        self.rows: dict[int, _Row] = {}  # insertion order == Megatron's row order
        self.stored_kv = 0  # Σ kv_tokens over the rows, current at the step boundary
        self.held_blocks = 0  # KV blocks held by the rows
        # (step, row position, row); stale once the row's position changed (dropped: -1, re-anchored)
        self.events: list[tuple[int, int, _Row]] = []
        self.irregular: dict[int, _Row] = {}  # rows whose next gap is not one step (resumed)
        self.running: Sequence[Request] = ()  # never materialized: runs only with a pricer backend
        self._fired: dict[int, _Row] = {}
        self._next_pos = 0

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, reqs: Sequence[Request], first_step: int, now_s: float) -> None:
        for r in reqs:
            row = _Row(r, first_step, self._next_pos)
            self._next_pos += 1
            self.rows[r.id] = row
            self.stored_kv += r.kv_tokens
            self.held_blocks += r.blocks
            self._schedule(row)
            if r.last_token_s != now_s:  # it missed steps while paused: its next gap is not one step
                self.irregular[r.id] = row

    def reanchor(self, reqs: Sequence[Request], first_step: int, now_s: float, granted: int) -> None:
        """``reqs``, in this order, were granted ``granted`` blocks in all and go on decoding from
        ``first_step``: the same as ``drop`` then ``add``, without a new row. Each takes a new position
        (after every existing row, as ``add`` gives it) and a new event; its old event goes stale."""
        self.held_blocks += granted
        for r in reqs:
            row = self.rows[r.id]
            row.step, row.gen, row.kv = first_step, r.generated, r.kv_tokens
            row.pos = self._next_pos
            self._next_pos += 1
            self._schedule(row)
            self._fired.pop(r.id, None)
            if r.last_token_s != now_s:
                self.irregular[r.id] = row
            else:
                self.irregular.pop(r.id, None)

    def _schedule(self, row: _Row) -> None:
        """Push the row's next event: it finishes, or its next step needs a KV block it does not hold."""
        r, q, first_step = row.req, self.q, row.step
        finish = first_step - (-(r.output_len - r.generated) // q) - 1  # + ceil((output - generated) / q)
        boundary = first_step + (r.blocks * self.ctx.block_size - r.kv_tokens) // q - 1
        heapq.heappush(self.events, (finish if finish < boundary else boundary, row.pos, row))

    def stepped(self, step: int, start_s: float, now_s: float) -> Sequence[Request]:
        """Advance every row through ``step``: the rows without an event in aggregate; the others are
        returned, in row order, brought up to the start of ``step`` for the engine to step."""
        rows, q = self.rows, self.q
        d = len(rows)
        irregular = self.irregular
        if irregular:
            self.irregular = {}
            special = dict(irregular)
        else:
            special = {}
        events = self.events
        while events and events[0][0] <= step:
            _, pos, row = heapq.heappop(events)
            if pos == row.pos:  # not stale: the row neither left nor was re-anchored since
                special[row.req.id] = row
        regular = d - len(special)
        if regular:
            gap = now_s - start_s
            self.itl.add(gap, regular * q)
            add_emitted(self.stats, now_s, regular * q)
        self.stored_kv += d * q
        self._fired = special
        if not special:
            return ()
        out = []
        for row in sorted(special.values(), key=_row_position) if len(special) > 1 else special.values():
            row.materialize(step - 1, q)
            if row.req.id not in irregular:
                row.req.last_token_s = start_s  # a regular row's last token came at the previous step's end
            out.append(row.req)
        for rid in irregular:
            self._fired.pop(rid, None)  # an irregular row may step and stay
        return out

    def drop(self, reqs: Sequence[Request]) -> None:
        for r in reqs:
            self.rows.pop(r.id).pos = -1  # its pending event goes stale
            self.stored_kv -= r.kv_tokens
            self.held_blocks -= r.blocks
            self.irregular.pop(r.id, None)
            self._fired.pop(r.id, None)

    def settle(self, last_step: int) -> None:
        for row in self.rows.values():
            row.materialize(last_step, self.q)

    def check(self, step: int) -> None:
        if self._fired:  # an event is a finish or a block boundary: the row must have left
            raise InvariantError(f"step {step}: request {next(iter(self._fired))} had an event with nothing to do")
        if self.held_blocks != sum(row.req.blocks for row in self.rows.values()):
            raise InvariantError(f"step {step}: held-block counter drifted")


class FastEngine(Engine):
    rows_class: ClassVar[type] = AnchoredRows
    event_proportional: ClassVar[bool] = True
    # numpy pays off only on long stretches; short ones run one by one (the results are identical)
    vector_min_steps: ClassVar[int] = 64

    def __init__(self, options: CoreOptions, scheduler: Scheduler, backend: StepBackend,
                 stream: RequestStream, *, pricer: StretchPricer) -> None:
        """``pricer``: the backend's ``StretchPricer`` (``StepBackend.pricer``), which prices stretches."""
        super().__init__(options, scheduler, backend, stream)
        if self.ctx.acceptance is not None:  # build.runs_step_by_step picks Engine (acceptance.needs_step_engine)
            raise ValueError("FastEngine: a stochastic engine.spec_acceptance needs the step-by-step Engine")
        self.pricer = pricer
        # Compiled (make native), the one-by-one loop is as fast as numpy's, which would cost its import
        # (~80 ms): the long-stretch path is for plain Python only (both give the same floats).
        # (1 << 60 rather than sys.maxsize: compiled, a comparison with it stays a machine-integer one)
        self._vector_min = 1 << 60 if loaded_from_extension(__name__) else FastEngine.vector_min_steps
        self._decode_steps: dict[int, _DecodeStep] = {}  # per decode count

    def _kv_pressure(self, needing: list[Request], ran_chunk: Request | None) -> None:
        # under prefix caching block ids and shared blocks matter: the full pass, always
        if self.paused or not needing or self.ctx.prefix is not None or not self._pause_and_resume_at_once(
                needing, ran_chunk):
            Engine._kv_pressure(self, needing, ran_chunk)

    def _pause_and_resume_at_once(self, needing: list[Request], ran_chunk: Request | None) -> bool:
        """The common KV block boundary, in one move: nothing was paused, and every row that needs a
        block would resume right after pausing (the active pool, the free-block count and the row
        slots have room for all of them), so nothing is evicted and none misses a step. Applies the
        pass's net effect: the pause swaps (the pausing rows move to the left end, where resuming puts
        them back in the same order), the block grants, the pause counts, the rows re-anchored in
        place. False, with nothing changed, when the full pass must run."""
        ctx, order = self.ctx, self.order
        m = len(needing)
        granted = 0
        for r in needing:
            granted += ctx.decode_blocks_needed(r)
        # the rule set's resume over the m newly paused rows, with the active rows' blocks
        held = self.rows.held_blocks + granted + (ran_chunk.blocks if ran_chunk is not None else 0)
        if not ctx.rules.resumes_at_once(ctx, held, granted, m, len(order)):
            return False
        move_pausing_left(order, {order.index(r) for r in needing})
        resumed = order[:m]
        ctx.grant_decode_blocks(resumed)
        for r in resumed:
            r.pauses += 1  # Megatron counts the pause; ``paused_events`` does not (no step missed)
        self.rows.reanchor(resumed, self.step + 1, self.state.now_s, granted)
        return True

    def run_step(self) -> None:
        result = self._result
        assert result is not None
        if self.ctx.admitted or not self._decode_stretch(result):
            Engine.run_step(self)

    def _can_stretch(self) -> bool:
        return bool(self.rows) and not self.paused and not self.rows.irregular

    def _decode_stretch(self, result: RoundResult) -> bool:
        """This round admitted nothing: run its decode-only step and the ones after it in one move, up
        to the next event that can change a scheduling decision (an arrival, a gating timeout, the
        watchdog, or any event while requests wait). Until then nothing changes but counters, so
        every round is this round again (the same head deferred again) and every step has this
        shape and graph, with a cost that grows with the context. With an empty queue, finishes and
        KV block boundaries are handled in passing: the event's step is priced and recorded with the
        quiet steps before it, then the ordinary update runs. True if it ran any step."""
        if not self._can_stretch():
            return False
        stretch = _Stretch(self.step, result)
        first, head = stretch.first, stretch.head
        rows = self.rows
        events = rows.events
        # A head let through on a gating timeout and then stopped by a later check of the round (the
        # single-token guard, SSM alignment, a prefix span's budget) had its wait counter reset: the
        # next round defers it again, so this round is not a fixed point.
        once = head is None and self.queue and self.policy.timeout_iters >= 0 and result.head_stopped_after_gate
        watchdog = self.watchdog
        while True:
            limit = watchdog.first_firing(self.last_progress, self.step_bound)
            stop = events[0][0] if events and events[0][0] < limit else limit
            if once and first + 1 < stop:
                stop = first + 1
            handoff = self.ctx.handoff
            if handoff is not None and self.queue:  # a released handoff slot may admit the head
                release = handoff.next_release_after(first)
                if release is not None and release < stop:
                    stop = release
            if head is not None and self.policy.timeout_iters >= 0:
                timeout = first + 1 + self.policy.timeout_iters - head.cg_wait_iters
                # under async overlap the later rounds record no wait: the head's counter stands still,
                # so it is let through at the next round or not within the stretch
                if timeout < stop and (timeout <= first + 1 or not self.scheduler.async_overlap):
                    stop = timeout
            # the event at ``stop`` runs here too if no round could admit anything after it
            event = not self.queue and bool(events) and events[0][0] == stop < limit
            stretch.stop = stop
            if not self._quiet_steps(stretch, event):
                break
            self.ctx.begin_round(len(rows), 0)
            if self._update():
                self.last_progress = self.step
            self.step += 1
            # an eviction puts requests back in the queue: the next round may admit them
            if self.queue or not self._can_stretch() or watchdog.fires(self.step, self.last_progress,
                                                                        self.step_bound):
                break
        return self.step > first

    def _quiet_steps(self, stretch: _Stretch, event: bool) -> bool:
        """Steps ``self.step .. stretch.stop-1`` with no event: the float clock step by step, counters
        in bulk. With ``event``, also step ``stop`` (an event's step, same shape) if it comes before the
        next arrival: priced and recorded here, its update left to the caller. True if it ran."""
        stop = stretch.stop
        if self.step >= stop and not event:
            return False
        st, rows, q = self.state, self.rows, self.q
        d = len(rows)
        shape = self._decode_step(d)
        T, graph, reason = shape.tokens, shape.graph, shape.eager_reason
        stored = rows.stored_kv
        context = stored + T
        pairs = q * stored + T * (q + 1) // 2  # attention_pairs of this decode-only step
        nxt = stretch.next_arrival_s = self.stream.next_arrival_s()
        begin = self.step
        stats = st.stats
        # the steps' durations go into the graphed (or eager) busy time one by one, in step order
        busy = stats.graphed_time_s if graph is not None else stats.eager_time_s
        if not self.keep_trace and stop - begin >= self._vector_min:
            work = StepWork(T, 0, d, context, graph, pairs, reason)
            if self._long_stretch(stretch, work):
                busy = add_in_order(busy, self._quiet_steps_vectorized(work, stretch))
            else:
                busy = self._quiet_steps_one_by_one(shape, stretch, context, pairs, busy)
        else:
            busy = self._quiet_steps_one_by_one(shape, stretch, context, pairs, busy)
        k = self.step - begin
        rows.stored_kv += k * T
        ran = event and self.step == stop and (nxt is None or st.now_s < nxt)
        if ran:
            if self.check:
                self._check_budgets(T, 0, d)
            stored = rows.stored_kv
            dt = shape.cost(stored + T, q * stored + T * (q + 1) // 2)
            self._step_start_s = now = st.now_s
            if self.keep_trace:
                st.trace.append(StepRecord(self.step, now, dt, (T, 0, d), graph, reason, [], None,
                                           len(self.queue), len(self.paused)))
            st.now_s = now + dt
            busy += dt
            k += 1
        record_step_totals(stats, T, 0, d, graph, reason, k, busy, len(self.queue))
        return ran

    def _decode_step(self, d: int) -> _DecodeStep:
        """The decode-only step of ``d`` rows, worked out once per ``d``."""
        shape = self._decode_steps.get(d)
        if shape is None:
            T = d * self.q
            graph, reason = self.graphs.resolve(T, 0, d)
            probe = StepWork(T, 0, d, T, graph, None, reason)
            shape = self._decode_steps[d] = _DecodeStep(T, d, graph, reason, self.pricer.stepper(probe),
                                                        *decode_growth(probe))
        return shape

    def _long_stretch(self, stretch: _Stretch, work: StepWork) -> bool:
        if stretch.stop - self.step < self._vector_min:
            return False
        nxt = stretch.next_arrival_s
        if nxt is None:
            return True
        return (nxt - self.state.now_s) >= self._vector_min * self.pricer.step_time(work)

    def _quiet_steps_one_by_one(self, shape: _DecodeStep, stretch: _Stretch, context: int, pairs: int,
                                busy: float) -> float:
        """The quiet steps one at a time, from ``context`` tokens and ``pairs`` attention pairs; returns
        ``busy`` with their durations added in step order."""
        st = self.state
        T, d, graph, reason, step_cost, context_step, pairs_step = shape
        stop, first, nxt = stretch.stop, stretch.first, stretch.next_arrival_s
        head = stretch.head
        itl = st.stats.itl
        emitted = st.stats.emitted_by_second
        trace = st.trace if self.keep_trace else None
        real, queue_len, head_id = (T, 0, d), len(self.queue), head.id if head is not None else None
        now, step = st.now_s, self.step
        begin = step
        # Consecutive steps mostly have the same gap (~3 in 4 on the chat preset): the histogram gets
        # each run of equal gaps in one update (integer counts: the same histogram).
        run_gap, run_tokens = 0.0, 0
        # the tokens of the steps ending in one whole second of the clock, added once per second
        second, second_end, second_tokens = -1, 0.0, 0
        while step < stop and (step == first or nxt is None or now < nxt):
            dt = step_cost(context, pairs)
            if trace is not None:
                trace.append(StepRecord(step, now, dt, real, graph, reason, [], head_id, queue_len, 0))
            start, now = now, now + dt
            busy += dt
            if now < second_end:
                second_tokens += T
            else:
                if second_tokens:
                    emitted[second] = emitted.get(second, 0) + second_tokens
                second = int(now)
                second_end, second_tokens = second + 1.0, T
            gap = now - start
            if gap == run_gap and run_tokens:
                run_tokens += T
            else:
                if run_tokens:
                    itl.add(run_gap, run_tokens)
                run_gap, run_tokens = gap, T
            context += context_step
            pairs += pairs_step
            step += 1
        if run_tokens:
            itl.add(run_gap, run_tokens)
        if second_tokens:
            emitted[second] = emitted.get(second, 0) + second_tokens
        waits = step - begin - (1 if begin == first and step > begin else 0)
        if self.scheduler.async_overlap:  # every later round is an overlap step (decode-only, none paused)
            waits = 0
        if head is not None and waits > 0:  # this round's deferral is already counted
            self.scheduler.register_waits(head, waits, stretch.result)
        self.step = step
        st.now_s = now
        return busy

    def _quiet_steps_vectorized(self, work: StepWork, stretch: _Stretch) -> list[float]:
        """The same steps with the pricer evaluated a chunk at a time (numpy); the clock is still a
        running sum in step order (``add.accumulate`` is sequential), so every float equals the
        one-by-one loop's."""
        import numpy as np

        st = self.state
        stop, first, nxt = stretch.stop, stretch.first, stretch.next_arrival_s
        head = stretch.head
        itl = st.stats.itl
        emitted = st.stats.emitted_by_second
        context_step, pairs_step = decode_growth(work)
        context, T = work.context_tokens, work.tokens
        pairs = work.attention_pairs
        assert pairs is not None
        series = self.pricer.decode_stretch_times
        durations: list[float] = []
        now = st.now_s
        chunk = 32
        while self.step < stop:
            n = min(chunk, stop - self.step)
            dts = series(StepWork(T, 0, work.decodes, context, work.graph, pairs, work.eager_reason), n,
                         context_step, pairs_step)
            clock = np.empty(n + 1)
            clock[0] = now
            clock[1:] = dts
            np.add.accumulate(clock, out=clock)  # clock[j] = start of the j-th step, clock[n] = end of the last
            if nxt is not None:
                late = clock[:n] >= nxt  # a step starting at or after the next arrival belongs to a new round
                if self.step == first:
                    late[0] = False
                if late.any():
                    n = int(np.argmax(late))
            if n == 0:
                break
            waits = n - (1 if self.step == first else 0)
            if head is not None and waits > 0 and not self.scheduler.async_overlap:
                self.scheduler.register_waits(head, waits, stretch.result)
            itl.add_each((clock[1:n + 1] - clock[:n]).tolist(), T)
            seconds, steps = np.unique(np.floor(clock[1:n + 1]).astype(np.int64), return_counts=True)
            for second, count in zip(seconds.tolist(), steps.tolist(), strict=True):
                emitted[second] = emitted.get(second, 0) + count * T
            durations.extend(dts[:n].tolist())
            now = float(clock[n])
            context += n * context_step
            pairs += n * pairs_step
            self.step += n
            if n < len(dts):
                break
            chunk = min(chunk * 4, 4096)
        st.now_s = now
        return durations
