"""Expert parallelism: several data-parallel attention ranks that step together.

With an MoE model served under expert parallelism (``engine.ep_size`` > 1), every rank has its own
scheduler and context (one ``Engine`` core per rank) and its own queue; new requests are routed to a
rank by the coordinator's rule; and every step is a collective: all ranks step together, a rank with
no work runs a dummy decode of shape ``(1 + spec, 0, 1)`` whenever any rank has work, and the step
takes as long as the slowest rank. Which graph each rank replays follows Megatron 0.19.2's EP rules:

* ``moe_dispatcher`` ``nccl`` or ``te``: non-decode graphs are off (so admission gating is inactive);
  at forward time the ranks agree on the max token count and whether any rank has a prefill. If any
  rank has a prefill, **every** rank runs eager; otherwise every rank matches its decode step on the
  max token count across ranks.
* ``nvls``: non-decode graphs stay on, and matching and gating are per rank.

The ranks are oracle cores (``Engine`` with ``EveryStepRows``): the event-proportional engine's decode
stretches price one engine's steps alone, while a lockstep step costs the slowest rank's time, so
``engine.oracle=false`` runs this same engine for ``ep_size`` > 1.

Each rank is driven through ``Engine``'s public round: ``arrive`` (a routed request),
``begin_round``, then, between the rounds and the steps, this engine's part (the graphs chosen across
ranks, dummy steps, the slowest rank's duration), then ``postprocess`` on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from cgbench.config.schema import BenchConfig
from cgbench.engine.contract import StepBackend, StepWork
from cgbench.engine.core import Engine, RunState
from cgbench.engine.ledger import COMPLETED, Ledger
from cgbench.engine.policies import Policy
from cgbench.engine.router import Router
from cgbench.engine.scheduler import GatingCounters, RoundResult, gating_active
from cgbench.engine.stats import StepStats
from cgbench.grids.lookup import Grid
from cgbench.workload.stream import RequestSpec, RequestStream

EP_PREFILL = "ep_prefill"  # this rank has a prefill: under nccl/te every rank runs eager
EP_PREFILL_OTHER = "ep_prefill_other_rank"  # another rank's prefill forced this rank eager
MATCHES_EP_TOKEN_COUNTS = ("nccl", "te")
_COUNTERS = ("deferral_events", "starvation_warnings", "snap_splits", "eager_admissions")  # GatingCounters


class _RankStream:
    """What a rank core sees of the workload: nothing arrives by itself (the EP engine routes
    arrivals); completions go to the shared stream (a closed loop's next request)."""

    def __init__(self, shared: RequestStream) -> None:
        self.shared = shared

    @property
    def total(self) -> int:
        """Requests of its own: none (every one is routed to it)."""
        return 0

    def on_complete(self, now_s: float) -> None:
        self.shared.on_complete(now_s)

    def pop_due(self, now_s: float) -> list[RequestSpec]:
        return []

    def next_arrival_s(self) -> float | None:
        return None

    def exhausted(self) -> bool:
        return True


def decode_only_grid(grid: Grid) -> Grid:
    """The grid with non-decode graphs off: its decode-only graphs."""
    return Grid(grid.name, tuple(g for g in grid.graphs if g.prefill_req_count == 0), grid.strict,
                grid.exact_decode)


@dataclass
class RankStats:
    """What only the EP engine knows of a rank: its dummy steps, its steps forced eager by another
    rank's prefill, and the requests routed to it."""

    dummy_steps: int = 0
    forced_eager_steps: int = 0  # eager only because another rank had a prefill
    requests_routed: int = 0


class EPEngine:
    """``ep_size`` engine cores in lockstep (see the module docstring)."""

    def __init__(self, cfg: BenchConfig, grid: Grid, policy: Policy, backend: StepBackend,
                 stream: RequestStream, *, trace: bool = False,
                 rank_streams: Sequence[RequestStream] | None = None) -> None:
        """``rank_streams``: what each rank core sees of the workload, when a data-parallel engine
        drives this one as one of its EP groups (it routes the arrivals); by default ``_RankStream``."""
        e = cfg.engine
        self.size = e.ep_size
        self.dispatcher = e.moe_dispatcher
        self.routing = e.ep_routing  # (a DP engine driving this group routes its arrivals itself)
        self.router = Router(self.size, self.routing)
        self.match_ep = e.moe_dispatcher in MATCHES_EP_TOKEN_COUNTS
        cg = replace(cfg.cg, non_decode=False) if self.match_ep else cfg.cg
        self.grid = decode_only_grid(grid) if self.match_ep else grid
        self.gating_active = gating_active(policy, cg, self.grid)
        self.stream = stream
        self.keep_trace = trace
        # every rank traces its own steps; the run's trace interleaves them, each tagged with its rank
        streams = rank_streams if rank_streams is not None else [_RankStream(stream) for _ in range(self.size)]
        self.ranks = [Engine(e, self.grid, policy, backend, rs, gating=self.gating_active, trace=trace,
                             seed=cfg.seed) for rs in streams]
        self.rank_stats = [RankStats() for _ in range(self.size)]
        self.q = self.ranks[0].q
        self.stall_steps = self.ranks[0].stall_steps
        self.state = RunState()
        self.step = 0
        self.lockstep_steps = 0
        self._results: list[RoundResult] = []  # the last begin_round's, per rank
        self._idle: list[bool] = []

    @property
    def counters(self) -> GatingCounters:
        """Every rank's gating counters, summed: the whole system's."""
        return summed_counters(self.ranks)

    # -- routing ------------------------------------------------------------------------------------

    def route(self, spec: RequestSpec) -> int:
        """The rank a new request goes to (``cgbench.engine.router``), by the ranks' in-flight requests
        at this lockstep boundary."""
        return self.router.route(spec, [r.in_flight for r in self.ranks])

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> RunState:
        """Run to the end: each arrival routed to a rank, every rank's round, then one lockstep step
        (or, when every rank is idle, the wait for the next arrival); the system's merged state."""
        st = self.state
        ranks = self.ranks
        while True:
            for spec in self.stream.pop_due(st.now_s):
                i = self.route(spec)
                ranks[i].arrive(spec)
                self.rank_stats[i].requests_routed += 1
            if not self.begin_round():
                nxt = self.stream.next_arrival_s()
                if nxt is not None:
                    self.wait_until(nxt)
                    continue
                if all(rank.drained for rank in ranks) and self.stream.exhausted():
                    break
                self.stall_idle()
                break
            if self.advance():
                break
        return self._merged()

    def wait_until(self, t_s: float) -> None:
        """Nothing runs before ``t_s``: the system's clock (and every rank's) moves there, never back."""
        st = self.state
        st.now_s = max(st.now_s, t_s)
        for rank in self.ranks:  # every rank's clock is the system's
            rank.wait_until(t_s)

    def begin_round(self) -> bool:
        """Every rank's scheduling round; True if any rank has a step to run (then ``advance``). When
        every rank is idle, each waits for its handoff pulls (``Engine.await_pulls``) and, if a slot
        was released, the rounds run again."""
        while True:
            self._results = [rank.begin_round() for rank in self.ranks]
            self._idle = [rank.idle for rank in self.ranks]
            if not all(self._idle) or not any([rank.await_pulls() for rank in self.ranks]):  # every rank asked
                return not all(self._idle)

    def advance(self) -> bool:
        """The lockstep step of the rounds ``begin_round`` ran; True if the run must stop."""
        self._lockstep_step(self._results, self._idle)
        self.step += 1
        self.lockstep_steps += 1
        return self._stopped()

    def _lockstep_step(self, results: list[RoundResult], idle: list[bool]) -> None:
        """One collective step: every rank's work (a dummy decode where a rank is ``idle``) with the
        graph the dispatcher's rules give it, priced by the slowest rank, then post-processed on each
        rank."""
        works = self._rank_works(idle)
        dt = max(rank.price(work) for rank, work in zip(self.ranks, works, strict=True))  # the slowest rank
        for rank, work, rs, result, dummy in zip(self.ranks, works, self.rank_stats, results, idle, strict=True):
            rs.dummy_steps += dummy
            rs.forced_eager_steps += work.eager_reason == EP_PREFILL_OTHER
            rank.postprocess(work, dt, result)
        self.state.now_s += dt

    def _rank_works(self, idle: list[bool]) -> list[StepWork]:
        """Each rank's step this round. Under nccl/te a prefill on any rank makes every rank eager, and
        otherwise every rank matches its decode graph on the most tokens any rank runs; under nvls
        each rank matches its own shape. An ``idle`` rank steps a dummy decode ``(q, 0, 1)``."""
        shapes = [(self.q, 0, 1) if dummy else (r.ctx.active_tokens, r.ctx.prefill_count, r.ctx.decode_count)
                  for r, dummy in zip(self.ranks, idle, strict=True)]
        any_prefill = any(P > 0 for _, P, _ in shapes)
        t_max = max(T for T, _, _ in shapes)
        works = []
        graph: tuple[int, int, int] | None
        reason: str | None
        for rank, (T, P, D), dummy in zip(self.ranks, shapes, idle, strict=True):
            if self.match_ep and any_prefill:
                graph, reason = None, (EP_PREFILL if P > 0 else EP_PREFILL_OTHER)
            elif self.match_ep:
                graph, reason = rank.graphs.resolve(t_max, 0, D)  # matched on the max token count
            else:
                graph, reason = rank.graphs.resolve(T, P, D)
            # a dummy attends its own token only (an idle rank holds no running row)
            works.append(StepWork(T, P, D, self.q, graph, None, reason) if dummy else rank.step_work(graph, reason))
        return works

    # -- ends ---------------------------------------------------------------------------------------

    def _stopped(self) -> bool:
        st = self.state
        for i, rank in enumerate(self.ranks):
            if rank.halted:
                st.outcome, st.diagnosis = rank.state.outcome, f"rank {i}: {rank.state.diagnosis}"
                return True
        progress = max(r.last_progress for r in self.ranks)
        if self.step - progress > self.stall_steps:
            st.outcome = "stalled"
            stuck = next((i for i, r in enumerate(self.ranks) if r.queue or r.paused), 0)
            st.diagnosis = (f"no request admitted or finished on any rank for {self.stall_steps} steps; rank "
                            f"{stuck}: " + self.ranks[stuck].diagnose("no progress"))
            return True
        bound = 4 * sum(r.total_work for r in self.ranks) + 1000
        if self.step > bound:
            st.outcome = "step_bound"
            st.diagnosis = f"exceeded the step bound {bound} derived from the workload"
            return True
        return False

    def stall_idle(self) -> str:
        """Every rank idle after ``begin_round`` with work left: the system stalls; its diagnosis is the
        first undrained rank's, from that rank's last round."""
        st = self.state
        st.outcome = "stalled"
        i = next((i for i, r in enumerate(self.ranks) if not r.drained), 0)
        st.diagnosis = f"rank {i}: " + self.ranks[i].stall_diagnosis(self._results[i])
        return st.diagnosis

    # -- the whole system ---------------------------------------------------------------------------

    def _merged(self) -> RunState:
        """Every rank's steps, requests and trace as one system's (each rank's forward pass counts as a
        step; a lockstep step is ``ep_size`` rank-steps). ``counters`` sums the ranks' gating counters."""
        st = self.state
        stats = StepStats()
        for rank in self.ranks:
            merge_stats(stats, rank.finish().stats)
        st.stats = stats
        st.requests = Ledger.merged([rank.state.requests for rank in self.ranks])
        if self.keep_trace:  # every rank has one record per lockstep step: step-major, rank-minor
            for i, rank in enumerate(self.ranks):
                for record in rank.state.trace:
                    record.rank = i
            st.trace = [record for step in zip(*(r.state.trace for r in self.ranks), strict=True) for record in step]
        return st

    def ep_metrics(self) -> dict[str, Any]:
        """The EP-only metrics (present only for ``ep_size`` > 1)."""
        eager = [r.state.stats.eager_steps / r.state.stats.steps if r.state.stats.steps else 0.0
                 for r in self.ranks]
        total_eager = sum(r.state.stats.eager_steps for r in self.ranks)
        forced = sum(s.forced_eager_steps for s in self.rank_stats)
        served = [r.state.requests.int_column("fate").count(COMPLETED) for r in self.ranks]
        tokens = [sum(r.state.requests.int_column("generated")) for r in self.ranks]
        mean = sum(tokens) / len(tokens)
        return {
            "ep_size": self.size,
            "moe_dispatcher": self.dispatcher,
            "lockstep_steps": self.lockstep_steps,
            "rank_eager_step_fraction": eager,
            "dummy_steps": sum(s.dummy_steps for s in self.rank_stats),
            "rank_dummy_steps": [s.dummy_steps for s in self.rank_stats],
            "forced_eager_fraction": forced / total_eager if total_eager else 0.0,
            "rank_requests": [s.requests_routed for s in self.rank_stats],
            "rank_completed": served,
            "load_imbalance": max(tokens) / mean if mean > 0 else 1.0,
        }


def summed_counters(ranks: list[Engine]) -> GatingCounters:
    """The gating counters of ``ranks``, summed (an EP group's or a DP system's)."""
    total = GatingCounters()
    for rank in ranks:
        for name in _COUNTERS:
            setattr(total, name, getattr(total, name) + getattr(rank.counters, name))
    return total


def merge_stats(into: StepStats, s: StepStats) -> None:
    """Add ``s``'s step accounting to ``into``."""
    for name in ("steps", "graphed_steps", "eager_steps", "tokens", "eager_tokens", "graphed_tokens",
                 "padded_tokens", "mixed_steps", "prefill_only_steps", "decode_only_steps", "paused_events",
                 "evicted_events", "decode_rows", "prefill_emitted"):
        setattr(into, name, getattr(into, name) + getattr(s, name))
    into.graphed_time_s += s.graphed_time_s
    into.eager_time_s += s.eager_time_s
    into.eager_reasons.update(s.eager_reasons)
    for g, (hits, real, pad) in s.graph_usage.items():
        u = into.graph_usage.setdefault(g, [0, 0, 0])
        u[0] += hits
        u[1] += real
        u[2] += pad
    for gap, n in s.itl.items():
        into.itl[gap] = into.itl.get(gap, 0) + n
    for second, n in s.emitted_by_second.items():
        into.emitted_by_second[second] = into.emitted_by_second.get(second, 0) + n
    for size, n in s.batch_requests.items():
        into.batch_requests[size] = into.batch_requests.get(size, 0) + n
    into.max_queue_len = max(into.max_queue_len, s.max_queue_len)

