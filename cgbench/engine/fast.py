"""The event-proportional engine: the same steps, metrics and trace as ``Engine``, at O(1) per step.

Running decodes are not touched every step. Each carries an *anchor* ``(step, generated, kv)`` from
which its state at any later step follows (it advances ``q`` tokens per step), and one entry in an
event heap for the step at which something happens to it: it finishes, or its next token crosses
a KV block boundary. A step costs O(1) plus the events it contains; counters (tokens emitted, KV
tokens read, inter-token gaps) are advanced in aggregate. ``Engine`` (step by step, every request
every step) is the oracle this must equal, metric for metric (tests/test_fast_engine.py).
"""

from __future__ import annotations

import heapq

from cgbench.engine.context import ceil_div
from cgbench.engine.contract import StepWork
from cgbench.engine.core import Engine, InvariantError, RunState, StepRecord
from cgbench.engine.request import Request
from cgbench.engine.scheduler import RoundResult


class FastEngine(Engine):
    # numpy pays off only on long stretches; short ones run one by one (the results are identical)
    vector_min_steps = 64

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rows: dict[int, Request] = {}  # running decodes; insertion order == Megatron's row order
        self.sum_kv = 0  # sum of kv_tokens over rows, current at the step boundary
        self.held_active = 0  # KV blocks held by rows
        self.events: list[tuple[int, int, int, Request]] = []  # (step, row position, epoch, request)
        self.irregular: dict[int, Request] = {}  # rows whose next token does not follow the last step
        self.next_pos = 0

    # -- row bookkeeping -----------------------------------------------------------------------------

    def _add_row(self, r: Request, first_step: int) -> None:
        """``r`` (materialized) decodes from ``first_step`` on."""
        r.anchor_step = first_step
        r.anchor_gen = r.generated
        r.anchor_kv = r.kv_tokens
        r.pos = self.next_pos
        self.next_pos += 1
        r.epoch += 1
        self.rows[r.id] = r
        self.sum_kv += r.kv_tokens
        self.held_active += r.blocks
        q = self.q
        finish = first_step + ceil_div(r.output_len - r.generated, q) - 1
        room = r.blocks * self.ctx.block_size - r.kv_tokens
        boundary = first_step + room // q - 1
        heapq.heappush(self.events, (min(finish, boundary), r.pos, r.epoch, r))

    def _materialize(self, r: Request, through_step: int) -> None:
        """Bring ``r``'s counters up to the end of step ``through_step`` (anchor untouched)."""
        n = (through_step - r.anchor_step + 1) * self.q
        r.generated = min(r.output_len, r.anchor_gen + n)
        r.kv_tokens = r.anchor_kv + n

    def _remove_row(self, r: Request) -> None:
        del self.rows[r.id]
        r.epoch += 1
        self.sum_kv -= r.kv_tokens
        self.held_active -= r.blocks
        self.irregular.pop(r.id, None)

    # -- Engine hooks --------------------------------------------------------------------------------

    def _decode_count(self) -> int:
        return len(self.rows)

    def _decode_context_tokens(self) -> int:
        return self.sum_kv + len(self.rows) * self.q

    def _decode_rows(self) -> list[Request]:
        return []

    def run(self) -> RunState:
        state = super().run()
        last = self.step - 1
        for r in self.rows.values():
            self._materialize(r, last)
        return state

    def _update(self) -> bool:
        q, s = self.q, self.step
        now = self.state.now_s
        start = self._step_start_s
        stats = self.state.stats
        finished_any = False
        d = len(self.rows)
        irregular, self.irregular = self.irregular, {}
        special = dict(irregular)
        events = self.events
        while events and events[0][0] <= s:
            _, _, epoch, r = heapq.heappop(events)
            if epoch == r.epoch and r.id in self.rows:
                special[r.id] = r
        regular = d - len(special)
        if regular:
            stats.itl[now - start] = stats.itl.get(now - start, 0) + regular * q
        self.sum_kv += d * q
        needing: list[Request] = []
        for r in sorted(special.values(), key=_row_position) if special else ():
            n = min(q, r.output_len - (r.anchor_gen + (s - r.anchor_step) * q))
            gap = now - (r.last_token_s if r.id in irregular else start)
            stats.itl[gap] = stats.itl.get(gap, 0) + n
            self._materialize(r, s)
            r.last_token_s = now
            if r.generated >= r.output_len:
                self._remove_row(r)
                self._finish(r)
                finished_any = True
            elif self._blocks_needed(r) > 0:
                needing.append(r)
            elif r.id not in irregular:  # cannot happen: an event is a finish or a block boundary
                raise InvariantError(f"step {s}: request {r.id} had an event with nothing to do")
        done, decoding = self._process_admissions()
        finished_any |= done
        for r in decoding:
            self._add_row(r, s + 1)
            if self._blocks_needed(r) > 0:
                needing.append(r)
        self._pause_resume_evict_rows(needing)
        if self.check:
            self._check_blocks()
        return finished_any

    def _decode_stretch(self, result: RoundResult) -> bool:
        """This round admitted nothing: run its decode-only step and the ones after it in one move, up
        to the next event that can change a scheduling decision (an arrival, a gating timeout, the
        watchdog, or any event while requests wait). Until then nothing changes but counters, so
        every round is this round again (the same head deferred again) and every step has this
        shape and graph, with a cost that grows with the context. With an empty queue, finishes and
        KV block boundaries are handled in passing by the ordinary update."""
        if not self._can_stretch():
            return False
        head = result.deferred
        first = self.step
        while True:
            stop = self.events[0][0] if self.events else self.step_bound + 1
            stop = min(stop, self.last_progress + self.stall_steps + 1, self.step_bound + 1)
            if head is not None and self.policy.timeout_iters >= 0:
                stop = min(stop, first + 1 + self.policy.timeout_iters - head.cg_wait_iters)
            self._quiet_steps(stop, result, head, first)
            # an event at this step; handle it here only if no round could admit anything after it
            if (self.step >= self.last_progress + self.stall_steps + 1 or self.step > self.step_bound
                    or self.queue or not self.events or self.events[0][0] != self.step):
                break
            nxt = self.stream.next_arrival_s()
            if nxt is not None and self.state.now_s >= nxt:
                break
            self.ctx.begin_round(len(self.rows), 0)
            self._run_step(None)
            if self._update():
                self.last_progress = self.step
            self.step += 1
            # an eviction puts requests back in the queue: the next round may admit them
            if self.queue or not self._can_stretch() or self._out_of_bounds():
                break
        return self.step > first

    def _can_stretch(self) -> bool:
        return bool(self.rows) and not self.paused and not self.irregular and len(self.rows) <= self.resume_limit

    def _quiet_steps(self, stop: int, result: RoundResult, head: Request | None, first: int) -> None:
        """Steps ``self.step .. stop-1`` with no event: the float clock step by step, counters in bulk."""
        q, st, stats = self.q, self.state, self.state.stats
        if self.step >= stop:
            return
        d = len(self.rows)
        T = d * q
        if len(self.queue) > stats.max_queue_len:
            stats.max_queue_len = len(self.queue)
        nxt = self.stream.next_arrival_s()
        graph, reason = self.grid.lookup(T, 0, d)
        key = tuple(graph) if graph is not None else None
        cost = self.backend.cost_model
        series = getattr(cost, "decode_stretch_times", None)
        pairs_const = d * q * (q + 1) // 2
        begin = self.step
        if series is not None and not self.keep_trace and self._long_stretch(stop, d, T, key, nxt, pairs_const):
            now, busy = self._quiet_steps_vectorized(series, stop, first, d, T, key, nxt, head, result)
        else:
            now, busy = self._quiet_steps_one_by_one(cost, stop, first, d, T, key, reason, nxt, head, result,
                                                     pairs_const)
        # integer counters in one move (the float ones were advanced step by step above, in order)
        k = self.step - begin
        st.now_s = now
        stats.steps += k
        stats.tokens += k * T
        stats.decode_only_steps += k
        if key is not None:
            stats.graphed_time_s = busy
            stats.graphed_steps += k
            stats.graphed_tokens += k * T
            stats.padded_tokens += k * (key[0] - T)
            usage = stats.graph_usage.setdefault(key, [0, 0, 0])
            usage[0] += k
            usage[1] += k * T
            usage[2] += k * (key[0] - T)
        else:
            stats.eager_time_s = busy
            stats.eager_steps += k
            stats.eager_tokens += k * T
            stats.eager_reasons[reason] += k

    def _long_stretch(self, stop: int, d: int, T: int, key, nxt: float | None, pairs_const: int) -> bool:
        if stop - self.step < self.vector_min_steps:
            return False
        if nxt is None:
            return True
        dt = self.backend.cost_model.step_time(StepWork(T, 0, d, self.sum_kv + T, key, self.q * self.sum_kv
                                                        + pairs_const))
        return (nxt - self.state.now_s) >= self.vector_min_steps * dt

    def _quiet_steps_one_by_one(self, cost, stop, first, d, T, key, reason, nxt, head, result, pairs_const):
        st, stats, q = self.state, self.state.stats, self.q
        make_stepper = getattr(cost, "stepper", None)
        if make_stepper is not None:
            step_cost = make_stepper(StepWork(T, 0, d, self.sum_kv + T, key, q * self.sum_kv + pairs_const))
        else:
            def step_cost(ctx: int, pairs: int) -> float:
                return cost.step_time(StepWork(T, 0, d, ctx, key, pairs))
        itl = stats.itl
        itl_get = itl.get
        trace = st.trace if self.keep_trace else None
        queue_len, head_id = len(self.queue), head.id if head is not None else None
        now, busy = st.now_s, stats.graphed_time_s if key is not None else stats.eager_time_s
        while self.step < stop and (self.step == first or nxt is None or now < nxt):
            if head is not None and self.step > first:  # this round's deferral is already counted
                self.scheduler._register_wait(head, result)
            dt = step_cost(self.sum_kv + T, q * self.sum_kv + pairs_const)
            if trace is not None:
                trace.append(StepRecord(self.step, now, dt, (T, 0, d), key, reason, [], head_id, queue_len, 0))
            start, now = now, now + dt
            busy += dt
            gap = now - start
            itl[gap] = itl_get(gap, 0) + T
            self.sum_kv += T
            self.step += 1
        return now, busy

    def _quiet_steps_vectorized(self, series, stop, first, d, T, key, nxt, head, result):
        """The same steps with the cost model evaluated a chunk at a time (numpy); the clock and the
        busy time are still running sums in step order (``add.accumulate`` is sequential), so every
        float equals the one-by-one loop's."""
        import numpy as np

        st, stats, q = self.state, self.state.stats, self.q
        itl = stats.itl
        itl_get = itl.get
        now, busy = st.now_s, stats.graphed_time_s if key is not None else stats.eager_time_s
        pairs_const = d * q * (q + 1) // 2
        chunk = 32
        while self.step < stop:
            n = min(chunk, stop - self.step)
            dts = series(StepWork(T, 0, d, self.sum_kv + T, key, q * self.sum_kv + pairs_const), n, T, q * T)
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
            if head is not None and waits > 0:
                self.scheduler.register_waits(head, waits, result)
            for gap in (clock[1:n + 1] - clock[:n]).tolist():
                itl[gap] = itl_get(gap, 0) + T
            acc = np.empty(n + 1)
            acc[0] = busy
            acc[1:] = dts[:n]
            busy = float(np.add.accumulate(acc)[-1])
            now = float(clock[n])
            self.sum_kv += n * T
            self.step += n
            if n < len(dts):
                break
            chunk = min(chunk * 4, 4096)
        return now, busy

    def _pause_resume_evict_rows(self, needing: list[Request]) -> None:
        if not needing and not self.paused and len(self.rows) <= self.resume_limit:
            return
        for r in needing:
            self._remove_row(r)
            r.pauses += 1
        self.paused.extend(needing)
        if len(self.rows) > self.resume_limit and self.chunked is None:
            excess = list(self.rows.values())[self.resume_limit:]
            for r in excess:
                self._materialize(r, self.step)  # a no-op for rows that start next step
                r.last_token_s = self.state.now_s
                self._remove_row(r)
            self.paused.extend(excess)
            needing = needing + excess
        self._settle_paused(needing)

    def _held_active_blocks(self) -> int:
        return self.held_active

    def _reactivate(self, resumed: list[Request]) -> None:
        now = self.state.now_s
        for r in resumed:
            self._add_row(r, self.step + 1)
            if r.last_token_s != now:  # it missed steps while paused: its next gap is not one step
                self.irregular[r.id] = r

    def _check_blocks(self) -> None:
        held = self.held_active + sum(r.blocks for r in self.paused)
        if self.chunked is not None:
            held += self.chunked.blocks
        if held + self.ctx.free_blocks != self.ctx.pool_blocks:
            raise InvariantError(f"step {self.step}: KV blocks not conserved: held {held} + free "
                                 f"{self.ctx.free_blocks} != pool {self.ctx.pool_blocks}")
        if self.held_active != sum(r.blocks for r in self.rows.values()):
            raise InvariantError(f"step {self.step}: held-block counter drifted")


def _row_position(r: Request) -> int:
    return r.pos
