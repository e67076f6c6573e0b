"""The step loop: arrivals -> schedule -> real shape -> match (or eager) -> run -> update.

Reproduces Megatron's dynamic engine step lifecycle (ref. sections 4, 5.6 and 7). The scheduler
and matcher never know which backend runs the step; the backend only returns its duration.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from cgbench.config.schema import BenchConfig
from cgbench.engine.context import Admission, Context, ceil_div
from cgbench.engine.contract import StepWork
from cgbench.engine.policies import Policy
from cgbench.engine.request import Outcome, Request
from cgbench.engine.scheduler import RoundResult, Scheduler
from cgbench.grids.lookup import Grid
from cgbench.results.metrics import StepStats
from cgbench.workload.stream import ArrivalStream, RequestSpec


class StepBackend(Protocol):
    has_clock: bool

    def run_step(self, work: StepWork, admitted: list[Admission], decodes: list[Request]) -> float:
        """Run (or cost) one step; return its duration in seconds."""
        ...

    def release(self, req: Request) -> None: ...


class InvariantError(AssertionError):
    """An internal engine invariant broke; the message names the step and request."""


@dataclass(slots=True)
class StepRecord:
    step: int
    t_s: float
    dt_s: float
    real: tuple[int, int, int]
    graph: tuple[int, int, int] | None
    eager_reason: str | None
    admitted: list[tuple[int, int, bool]]
    deferred: int | None
    queue_len: int
    paused: int

    def to_json(self) -> dict:
        return {"step": self.step, "t_s": round(self.t_s, 9), "dt_s": round(self.dt_s, 9),
                "real": list(self.real), "graph": list(self.graph) if self.graph else None,
                "eager_reason": self.eager_reason, "admitted": [list(a) for a in self.admitted],
                "deferred": self.deferred, "queue_len": self.queue_len, "paused": self.paused}


@dataclass
class RunState:
    requests: list[Request] = field(default_factory=list)
    stats: StepStats = field(default_factory=StepStats)
    trace: list[StepRecord] = field(default_factory=list)
    outcome: str = "completed"
    diagnosis: str = ""
    now_s: float = 0.0


class Engine:
    def __init__(self, cfg: BenchConfig, grid: Grid, policy: Policy, backend: StepBackend,
                 stream: ArrivalStream, *, trace: bool = False) -> None:
        e = cfg.engine
        self.cfg = cfg
        self.grid = grid
        self.policy = policy
        self.backend = backend
        self.stream = stream
        self.keep_trace = trace
        self.ctx = Context.from_engine(e)
        gating_enabled = cfg.cg.all_prefills and cfg.cg.non_decode and grid.non_decode
        self.scheduler = Scheduler(self.ctx, grid, policy, chunked_prefill=e.chunked_prefill,
                                   gating_enabled=gating_enabled, flash_attn_guard=e.flash_attn_guard)
        self.q = 1 + e.num_speculative_tokens  # tokens per decode row
        self.resume_limit = min(e.max_requests, e.max_tokens // self.q)
        self.check = e.check_invariants
        self.stall_steps = e.stall_steps or 8 * e.max_sequence_length + 1000
        self.queue: deque[Request] = deque()
        self.active: list[Request] = []  # running decodes, in Megatron's active-row order
        self.paused: list[Request] = []  # oldest first; resume takes from the right (LIFO)
        self.chunked: Request | None = None  # the hidden chunked-prefill request between steps
        self.state = RunState()
        self.step = 0
        self._step_start_s = 0.0
        self.total_work = 0  # prompt + output tokens of every request that arrived (bounds the steps)
        self.last_progress = 0  # last step that admitted or finished a request (the stall watchdog)

    # -- arrivals ---------------------------------------------------------------------------------

    def _arrive(self, spec: RequestSpec) -> None:
        e = self.cfg.engine
        msl = e.max_sequence_length
        req = Request(id=spec.id, prompt_len=spec.prompt_tokens,
                      output_len=max(0, min(spec.output_tokens, msl - spec.prompt_tokens)),
                      arrival_s=spec.arrival_s, arrival_step=self.step)
        self.state.requests.append(req)
        reason = ""
        if spec.prompt_tokens > msl:
            reason = "prompt_exceeds_max_sequence_length"
        elif not e.chunked_prefill and spec.prompt_tokens > e.max_tokens:
            reason = "prompt_exceeds_max_tokens"
        elif ceil_div(spec.prompt_tokens + req.output_len, e.block_size) > self.ctx.active_blocks:
            reason = "kv_block_overflow"
        if reason:
            self._fail(req, reason)
            return
        req.start_prefill(spec.prompt_tokens)
        self.queue.append(req)

    def _fail(self, req: Request, reason: str) -> None:
        req.outcome = Outcome.FAILED
        req.fail_reason = reason
        req.finish_s = self.state.now_s
        req.finish_step = self.step
        self.stream.on_complete(self.state.now_s)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> RunState:
        st = self.state
        while True:
            for spec in self.stream.pop_due(st.now_s):
                self._arrive(spec)
                self.total_work += spec.prompt_tokens + spec.output_tokens
            ctx = self.ctx
            ctx.begin_round(self._decode_count(), len(self.paused))
            queued_before = len(self.queue)
            result = self.scheduler.schedule(self.queue)
            if ctx.active_tokens == 0:
                nxt = self.stream.next_arrival_s()
                if nxt is not None:
                    st.now_s = max(st.now_s, nxt)
                    continue
                if not self.queue and not self.paused and self.chunked is None and self.stream.exhausted():
                    break
                st.outcome = "stalled"
                st.diagnosis = self._diagnose(result.stop_reason)
                break
            if ctx.admitted and (len(self.queue) < queued_before
                                 or any(a.request.first_admit_step < 0 for a in ctx.admitted)):
                self.last_progress = self.step
            elif not ctx.admitted and self._decode_stretch(result):
                if self._out_of_bounds():
                    break
                continue
            self._run_step(result.deferred)
            if self._update():
                self.last_progress = self.step
            self.step += 1
            if self._out_of_bounds():
                break
        return st

    @property
    def step_bound(self) -> int:
        return 4 * self.total_work + 1000

    def _out_of_bounds(self) -> bool:
        st = self.state
        if self.step - self.last_progress > self.stall_steps:
            st.outcome = "stalled"
            st.diagnosis = (f"no request admitted or finished for {self.stall_steps} steps; "
                            + self._diagnose("no progress"))
            return True
        if self.step > self.step_bound:
            st.outcome = "step_bound"
            st.diagnosis = f"exceeded the step bound {self.step_bound} derived from the workload"
            return True
        return False

    def _decode_stretch(self, result: RoundResult) -> bool:
        """Hook for the event-proportional engine: run the decode-only steps up to the next event in one
        move, starting with this round's step. True if it ran any."""
        return False

    def _run_step(self, deferred: Request | None) -> None:
        ctx, st = self.ctx, self.state
        T, P, D = ctx.active_tokens, ctx.prefill_count, ctx.decode_count
        if self.check:
            self._check_budgets(T, P, D)
        graph, reason = self.grid.lookup(T, P, D)
        if graph is not None and self.policy.forward_guard(T, P, graph.token_count):
            graph, reason = None, "pad_guard"
        q = self.q
        decode_ctx = self._decode_context_tokens()
        context_tokens = decode_ctx
        pairs = q * (decode_ctx - D * q) + D * q * (q + 1) // 2  # each decode row attends its whole context
        for a in ctx.admitted:
            done = a.request.finished_chunk  # already includes this chunk
            context_tokens += done
            pairs += a.chunk * (done - a.chunk) + a.chunk * (a.chunk + 1) // 2
        key = tuple(graph) if graph is not None else None
        work = StepWork(T, P, D, context_tokens, key, pairs)
        dt = self.backend.run_step(work, ctx.admitted, self._decode_rows())
        self._step_start_s = st.now_s
        admitted = [(a.request.id, a.chunk, a.final) for a in ctx.admitted] if self.keep_trace else []
        self._account(T, P, D, key, reason, dt, deferred, admitted)

    def _account(self, T: int, P: int, D: int, key: tuple[int, int, int] | None, reason: str | None, dt: float,
                 deferred: Request | None, admitted: list[tuple[int, int, bool]]) -> None:
        """Step statistics, the optional trace record, and the clock."""
        st, stats = self.state, self.state.stats
        stats.steps += 1
        stats.tokens += T
        if P == 0:
            stats.decode_only_steps += 1
        elif D == 0:
            stats.prefill_only_steps += 1
        else:
            stats.mixed_steps += 1
        if key is not None:
            stats.graphed_steps += 1
            stats.graphed_tokens += T
            stats.padded_tokens += key[0] - T
            stats.graphed_time_s += dt
            usage = stats.graph_usage.get(key)
            if usage is None:
                stats.graph_usage[key] = [1, T, key[0] - T]
            else:
                usage[0] += 1
                usage[1] += T
                usage[2] += key[0] - T
        else:
            stats.eager_steps += 1
            stats.eager_tokens += T
            stats.eager_time_s += dt
            stats.eager_reasons[reason] += 1
        if len(self.queue) > stats.max_queue_len:
            stats.max_queue_len = len(self.queue)
        if self.keep_trace:
            st.trace.append(StepRecord(self.step, st.now_s, dt, (T, P, D), key, reason, admitted,
                                       deferred.id if deferred is not None else None, len(self.queue),
                                       len(self.paused)))
        st.now_s += dt

    # -- hooks the event-proportional engine overrides ---------------------------------------------

    def _decode_count(self) -> int:
        return len(self.active)

    def _decode_context_tokens(self) -> int:
        return sum(r.kv_tokens + self.q for r in self.active)

    def _decode_rows(self) -> list[Request]:
        return self.active

    # -- update_requests --------------------------------------------------------------------------

    def _emit(self, req: Request, n: int) -> None:
        now = self.state.now_s
        if req.first_token_step < 0:
            req.first_token_step = self.step
            req.first_token_s = now
        elif req.last_token_s >= 0:
            itl, gap = self.state.stats.itl, now - req.last_token_s
            itl[gap] = itl.get(gap, 0) + n
        req.generated += n
        req.last_token_s = now

    def _finish(self, req: Request) -> None:
        req.outcome = Outcome.COMPLETED
        req.finish_step = self.step
        req.finish_s = self.state.now_s
        self.ctx.release(req)
        self.backend.release(req)
        self.stream.on_complete(self.state.now_s)

    def _update(self) -> bool:
        """Megatron's update_requests after a step. Returns True if a request finished."""
        q = self.q
        finished_any = False
        still: list[Request] = []
        for r in self.active:
            r.kv_tokens += q
            self._emit(r, min(q, r.decode_remaining))
            if r.decode_remaining <= 0:
                self._finish(r)
                finished_any = True
            else:
                still.append(r)
        done, decoding = self._process_admissions()
        finished_any |= done
        still.extend(decoding)
        self.active = still
        self._pause_resume_evict()
        if self.check:
            self._check_blocks()
        return finished_any

    def _process_admissions(self) -> tuple[bool, list[Request]]:
        """The step's prefill chunks: first-admission accounting, the hidden chunked request, first
        tokens. Returns (a request finished, the requests that decode from the next step)."""
        finished_any, decoding = False, []
        for a in self.ctx.admitted:
            r = a.request
            r.kv_tokens += a.chunk
            r.chunks += 1
            r.outcome = Outcome.RUNNING  # also a re-admission after an eviction
            if r.first_admit_step < 0:
                r.first_admit_step = self.step
                r.first_admit_s = self._step_start_s
            if not a.final:
                self.chunked = r
                continue
            if self.chunked is r:
                self.chunked = None
            if r.decode_remaining > 0:  # output_len 0: the prefill's sample is trimmed away
                self._emit(r, 1)
            if r.decode_remaining <= 0:
                self._finish(r)
                finished_any = True
            else:
                decoding.append(r)
        return finished_any, decoding

    def _blocks_needed(self, r: Request) -> int:
        return max(0, ceil_div(r.kv_tokens + self.q, self.ctx.block_size) - r.blocks)

    def _pause_resume_evict(self) -> None:
        needing = [r for r in self.active if self._blocks_needed(r) > 0]
        if needing:
            self.active = [r for r in self.active if self._blocks_needed(r) == 0]
            self.paused.extend(needing)
            for r in needing:
                r.pauses += 1
        if len(self.active) > self.resume_limit and self.chunked is None:
            excess = self.active[self.resume_limit:]
            self.active = self.active[:self.resume_limit]
            self.paused.extend(excess)
            needing = needing + excess
        self._settle_paused(needing)

    def _settle_paused(self, needing: list[Request]) -> None:
        """Resume (LIFO), evict past the paused budget, resume again (ref. 5.6). A pause counts when the
        request missed a step: it is still paused, or was evicted from the paused region."""
        if not self.paused:
            return
        self._resume()
        self._evict()
        self._resume()
        self.state.stats.paused_events += sum(1 for r in needing if r.outcome != Outcome.RUNNING or r in self.paused)

    def _resume(self) -> None:
        if not self.paused:
            return
        ctx = self.ctx
        held_active = self._held_active_blocks()
        if self.chunked is not None:
            held_active += self.chunked.blocks
        active_avail = ctx.active_blocks - held_active
        limit = self.resume_limit - self._decode_count()
        k = cum = new = 0
        for r in reversed(self.paused):
            need = self._blocks_needed(r)
            if k + 1 > limit or cum + r.blocks + need > active_avail or new + need > ctx.free_blocks:
                break
            k += 1
            cum += r.blocks + need
            new += need
        if k == 0:
            return
        resumed = self.paused[len(self.paused) - k:]
        del self.paused[len(self.paused) - k:]
        for r in resumed:
            need = self._blocks_needed(r)
            ctx.free_blocks -= need
            r.blocks += need
        self._reactivate(resumed)

    def _held_active_blocks(self) -> int:
        return sum(r.blocks for r in self.active)

    def _reactivate(self, resumed: list[Request]) -> None:
        self.active.extend(resumed)

    def _evict(self) -> None:
        budget, held, keep = self.ctx.paused_block_budget, 0, 0
        for r in self.paused:
            if held + r.blocks > budget:
                break
            held += r.blocks
            keep += 1
        keep = min(len(self.paused), keep + 1)  # one paused request may overflow into the active pool
        evicted = self.paused[keep:]
        if not evicted:
            return
        del self.paused[keep:]
        at = 1 if self.chunked is not None and self.queue and self.queue[0] is self.chunked else 0
        for r in reversed(evicted):
            self.ctx.release(r)
            self.backend.release(r)
            r.evictions += 1
            r.kv_tokens = 0
            r.outcome = Outcome.WAITING
            r.cg_wait_iters = 0
            new_prompt = r.prompt_len + r.generated
            self.state.stats.evicted_events += 1
            if not self.cfg.engine.chunked_prefill and new_prompt > self.ctx.max_tokens:
                self._fail(r, "evicted_prompt_exceeds_max_tokens")
                continue
            r.start_prefill(new_prompt)
            self.queue.insert(at, r)

    # -- diagnostics and invariants -----------------------------------------------------------------

    def _diagnose(self, stop_reason: str) -> str:
        if not self.queue:
            return f"{len(self.paused)} paused request(s) cannot resume: KV pool exhausted"
        head = self.queue[0]
        ctx = self.ctx
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
        held = sum(r.blocks for r in self.active) + sum(r.blocks for r in self.paused)
        if self.chunked is not None:
            held += self.chunked.blocks
        if held + self.ctx.free_blocks != self.ctx.pool_blocks:
            raise InvariantError(f"step {self.step}: KV blocks not conserved: held {held} + free "
                                 f"{self.ctx.free_blocks} != pool {self.ctx.pool_blocks}")
        for r in self.active:
            if r.blocks < ceil_div(r.kv_tokens + self.q, self.ctx.block_size):
                raise InvariantError(f"step {self.step}: running request {r.id} lacks a KV block")
