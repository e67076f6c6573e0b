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
ranks, dummy steps, the slowest rank's duration), then ``postprocess`` on every rank. The group is a
``cgbench.engine.drive.Unit`` (one clock, its lockstep steps), and, run alone, a system of that one
unit; a data-parallel engine (``cgbench.engine.dp``) drives several groups as its units and routes
their arrivals itself. ``cgbench.engine.build`` builds a group from the config (``group_grid``,
``group_cg``: the graphs and the gating condition of a group under its dispatcher).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cgbench.config.schema import BenchConfig, CGConfig
from cgbench.engine.contract import StepWork
from cgbench.engine.core import Engine
from cgbench.engine.drive import RunState, Stop, Watchdog, drive
from cgbench.engine.ledger import COMPLETED, Ledger
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.router import Router
from cgbench.engine.scheduler import GatingCounters, RoundResult, summed_counters
from cgbench.engine.stats import merged_stats
from cgbench.grids.lookup import Grid
from cgbench.workload.stream import RequestSpec, RequestStream

EP_PREFILL = "ep_prefill"  # this rank has a prefill: under nccl/te every rank runs eager
EP_PREFILL_OTHER = "ep_prefill_other_rank"  # another rank's prefill forced this rank eager
MATCHES_EP_TOKEN_COUNTS = ("nccl", "te")


class RankStream:
    """What a rank core of an EP group run alone sees of the workload: nothing arrives by itself
    (the group routes arrivals); completions go to the shared stream (a closed loop's next request)."""

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


def matches_ep_token_counts(dispatcher: str) -> bool:
    """Under ``nccl`` / ``te`` the ranks agree on the token count (non-decode graphs off)."""
    return dispatcher in MATCHES_EP_TOKEN_COUNTS


def ep_graphs(cfg: BenchConfig, grid: Grid) -> tuple[CGConfig, Grid, str]:
    """The cg settings and grid every EP rank gates and matches on, and why non-decode graphs are off
    when the config's are not: a dispatcher that matches EP token counts (nccl, te) turns them off,
    as Megatron 0.19.2."""
    e = cfg.engine
    if e.ep_size > 1 and matches_ep_token_counts(e.moe_dispatcher):
        why = (f"engine.moe_dispatcher={e.moe_dispatcher} under expert parallelism turns prefill and mixed "
               "graphs off, as Megatron (engine.moe_dispatcher=nvls keeps them)") if cfg.cg.non_decode else ""
        return group_cg(cfg.cg, e.moe_dispatcher), group_grid(grid, e.moe_dispatcher), why
    return cfg.cg, grid, ""


def decode_only_grid(grid: Grid) -> Grid:
    """The grid with non-decode graphs off: its decode-only graphs."""
    return Grid(grid.name, tuple(g for g in grid.graphs if g.prefill_req_count == 0), grid.strict,
                grid.exact_decode)


def group_grid(grid: Grid, dispatcher: str) -> Grid:
    """The graphs an EP group's ranks match on under ``dispatcher``."""
    return decode_only_grid(grid) if matches_ep_token_counts(dispatcher) else grid


def group_cg(cg: CGConfig, dispatcher: str) -> CGConfig:
    """The graph settings an EP group's gating condition reads under ``dispatcher`` (non-decode
    graphs off under nccl/te)."""
    return replace(cg, non_decode=False) if matches_ep_token_counts(dispatcher) else cg


@dataclass
class RankStats:
    """What only the EP engine knows of a rank: its dummy steps, its steps forced eager by another
    rank's prefill, and the requests routed to it."""

    dummy_steps: int = 0
    forced_eager_steps: int = 0  # eager only because another rank had a prefill
    requests_routed: int = 0


class EPEngine:
    """``ep_size`` engine cores in lockstep (see the module docstring)."""

    prefix_cache: PrefixCache | None = None  # modelled on one engine only (engine.prefix_caching)

    def __init__(self, ranks: Sequence[Engine], *, dispatcher: str, router: Router, stream: RequestStream,
                 trace: bool = False) -> None:
        """``ranks``: the cores, built on the group's grid (``group_grid``) and gating; ``router``: how a
        group run alone routes its arrivals (a data-parallel engine routes its groups' itself);
        ``stream``: the workload."""
        self.ranks = list(ranks)
        self.size = len(self.ranks)
        self.dispatcher = dispatcher
        self.router = router
        self.match_ep = matches_ep_token_counts(dispatcher)
        self.grid = self.ranks[0].grid
        self.gating_active = self.ranks[0].gating_active
        self.stream = stream
        self.keep_trace = trace  # every rank traces its own steps; the run's trace interleaves them
        self.rank_stats = [RankStats() for _ in range(self.size)]
        self.q = self.ranks[0].q
        self.watchdog: Watchdog = self.ranks[0].watchdog
        self.state = RunState()
        self.step = 0
        self.lockstep_steps = 0
        self._results: list[RoundResult] = []  # the last begin_round's, per rank
        self._idle: list[bool] = []

    @property
    def counters(self) -> GatingCounters:
        """Every rank's gating counters, summed: the whole system's."""
        return summed_counters(r.counters for r in self.ranks)

    # -- routing ------------------------------------------------------------------------------------

    def route(self, spec: RequestSpec) -> int:
        """The rank a new request goes to (``cgbench.engine.router``), by the ranks' in-flight requests
        at this lockstep boundary."""
        return self.router.route(spec, [r.in_flight for r in self.ranks])

    # -- the run: this group alone, a system of one unit (cgbench.engine.drive) ---------------------

    def run(self) -> RunState:
        """Run to the end: each arrival routed to a rank, every rank's round, then one lockstep step
        (or, when every rank is idle, the wait for the next arrival); the system's merged state."""
        return drive(self)

    @property
    def units(self) -> Sequence[EPEngine]:
        return (self,)

    def can_route(self) -> bool:
        return True

    def deliver(self, spec: RequestSpec, t_s: float, wake: Callable[[int], None] | None) -> None:
        i = self.route(spec)
        if wake is not None:
            wake(0)
        self.ranks[i].arrive(spec)
        self.rank_stats[i].requests_routed += 1

    def stopped(self, unit: int, stop: Stop) -> bool:
        self.state.outcome, self.state.diagnosis = stop
        return True

    def stalled(self, unit: int) -> None:
        self.state.outcome, self.state.diagnosis = "stalled", self.idle_diagnosis()

    def finish(self) -> RunState:
        """Every rank's steps, requests and trace as one system's (each rank's forward pass counts as a
        step; a lockstep step is ``ep_size`` rank-steps). ``counters`` sums the ranks' gating counters."""
        st = self.state
        st.stats = merged_stats(rank.finish().stats for rank in self.ranks)
        st.requests = Ledger.merged([rank.state.requests for rank in self.ranks])
        if self.keep_trace:  # every rank has one record per lockstep step: step-major, rank-minor
            for i, rank in enumerate(self.ranks):
                for record in rank.state.trace:
                    record.rank = i
            st.trace = [record for step in zip(*(r.state.trace for r in self.ranks), strict=True) for record in step]
        return st

    # -- as a unit of the event loop (cgbench.engine.drive.Unit) --------------------------------------

    @property
    def last_progress(self) -> int:
        return max(r.last_progress for r in self.ranks)

    @property
    def step_bound(self) -> int:
        return Watchdog.bound(sum(r.total_work for r in self.ranks))

    @property
    def drained(self) -> bool:
        return all(rank.drained for rank in self.ranks)

    def wait_until(self, t_s: float) -> None:
        """Nothing runs before ``t_s``: the system's clock (and every rank's) moves there, never back."""
        st = self.state
        st.now_s = max(st.now_s, t_s)
        for rank in self.ranks:  # every rank's clock is the system's
            rank.wait_until(t_s)

    def schedule_round(self) -> bool:
        """Every rank's scheduling round; True if any rank has a step to run (then ``run_step``)."""
        self._results = [rank.begin_round() for rank in self.ranks]
        self._idle = [rank.idle for rank in self.ranks]
        return not all(self._idle)

    def await_pulls(self) -> bool:
        """Every rank is idle: each waits for its handoff pulls (every rank asked); True if any released
        a slot."""
        return any([rank.await_pulls() for rank in self.ranks])

    def run_step(self) -> None:
        """The lockstep step of the rounds ``schedule_round`` ran."""
        self._lockstep_step(self._results, self._idle)
        self.step += 1
        self.lockstep_steps += 1

    @property
    def halted(self) -> bool:
        return any(rank.halted for rank in self.ranks)

    def halt(self) -> Stop | None:
        for i, rank in enumerate(self.ranks):
            if rank.halted:
                return Stop(rank.state.outcome, f"rank {i}: {rank.state.diagnosis}")
        return None

    def progress_diagnosis(self) -> tuple[str, str]:
        stuck = next((i for i, r in enumerate(self.ranks) if r.queue or r.paused), 0)
        return " on any rank", f"rank {stuck}: " + self.ranks[stuck].diagnose("no progress")

    def idle_diagnosis(self) -> str:
        """Every rank idle after its round with work left: the first undrained rank's diagnosis, from
        that rank's last round."""
        i = next((i for i, r in enumerate(self.ranks) if not r.drained), 0)
        return f"rank {i}: " + self.ranks[i].stall_diagnosis(self._results[i])

    # -- the lockstep step --------------------------------------------------------------------------

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

    # -- what the run reports -----------------------------------------------------------------------

    @property
    def dummy_steps(self) -> int:
        """Dummy decode rank-steps: they step no row."""
        return sum(s.dummy_steps for s in self.rank_stats)

    def metric_blocks(self) -> dict[str, Any]:
        return {"ep": self.ep_metrics()}

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
            "dummy_steps": self.dummy_steps,
            "rank_dummy_steps": [s.dummy_steps for s in self.rank_stats],
            "forced_eager_fraction": forced / total_eager if total_eager else 0.0,
            "rank_requests": [s.requests_routed for s in self.rank_stats],
            "rank_completed": served,
            "load_imbalance": max(tokens) / mean if mean > 0 else 1.0,
        }
