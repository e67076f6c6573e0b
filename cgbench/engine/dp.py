"""Data parallelism: ``engine.dp_size`` engines behind Megatron's coordinator.

Megatron 0.19.2 runs one dynamic engine per data-parallel rank (each with its own context, KV pool,
captured graphs and scheduler) and one ``DataParallelInferenceCoordinator`` process that routes
every new request to a rank (``cgbench.engine.router``) on the ranks' *pending* counts: requests it
routed there that the rank has not yet reported finished. The ranks step on their own: a DP rank
waits for no other, except that the ranks of one expert-parallel group (``engine.ep_size`` > 1; the
EP ranks of an MoE model *are* DP ranks) step together (``cgbench.engine.ep``), dummy forwards
included. So the system is ``dp_size / ep_size`` *units*, each with its own clock: one engine core
(``ep_size`` 1) or one lockstep EP group.

The loop is the discrete-event one of every topology (``cgbench.engine.drive``): the unit whose
clock is earliest steps next, and an arrival is routed once every busy unit's clock has reached it
(the ranks' pending counts then are those at the arrival: a completion at a later step end is not yet
reported). A unit with nothing to run waits for the next arrival anywhere (as a single engine waits
for its stream's next arrival) and wakes at it. A unit that stops (an engine assertion, a stall, the
step bound) steps no more while the others run on, so that what each rank does never depends on the
order the loop visits the units in; a crashed unit is also taken out of the routing (the coordinator
drops an engine it cannot reach). The run's outcome is the earliest stop in simulated time (ties: the
lowest rank), else a stall of waiting ranks, else completed.

Single-rank units run the event-proportional engine when the run would (its stretches are bounded by
what a rank's stream says is next: the next arrival, and under a closed loop also the earliest other
busy unit's clock, whose completions release the next requests); the per-rank oracle equality is in
tests/engine/test_dp.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cgbench.engine.core import Engine
from cgbench.engine.drive import Drive, RunState, Stop, Unit
from cgbench.engine.ep import EPEngine
from cgbench.engine.ledger import COMPLETED, Ledger
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.router import Router
from cgbench.engine.scheduler import GatingCounters, summed_counters
from cgbench.engine.stats import merged_stats
from cgbench.grids.lookup import Grid
from cgbench.workload.stream import RequestSpec, RequestStream


class RankStream:
    """What a DP rank core sees of the workload: nothing arrives by itself (the coordinator routes);
    its completions go to the shared stream and are stamped for the coordinator's pending counts;
    ``next_arrival_s`` is the horizon its decode stretches must not cross."""

    def __init__(self, engine: DPEngine, unit: int) -> None:
        self.engine = engine
        self.unit = unit
        self.completions: deque[float] = deque()  # completion times not yet seen by the coordinator
        self.settled = 0  # completions the coordinator has seen
        self.routed = 0

    @property
    def total(self) -> int:
        return 0

    def on_complete(self, now_s: float) -> None:
        self.completions.append(now_s)
        self.engine.stream.on_complete(now_s)

    def pop_due(self, now_s: float) -> list[RequestSpec]:
        return []

    def next_arrival_s(self) -> float | None:
        return self.engine.horizon(self.unit)

    def exhausted(self) -> bool:
        return True

    def pending(self, t_s: float) -> int:
        """Requests routed here and not reported finished by ``t_s``."""
        done = self.completions
        while done and done[0] <= t_s:
            done.popleft()
            self.settled += 1
        return self.routed - self.settled


class DPUnit(Unit, Protocol):
    """A unit of a data-parallel system: an engine core or an EP group, with the cores it holds."""

    @property
    def ranks(self) -> list[Engine]: ...

    @property
    def grid(self) -> Grid: ...

    @property
    def gating_active(self) -> bool: ...

    def finish(self) -> RunState: ...


@dataclass
class DPRankStats:
    requests_routed: int = 0


class DPEngine:
    """``dp_size`` data-parallel ranks behind the coordinator (see the module docstring)."""

    prefix_cache: PrefixCache | None = None  # modelled on one engine only (engine.prefix_caching)

    def __init__(self, stream: RequestStream, router: Router, *, units: int, ep_size: int,
                 build_unit: Callable[[list[RankStream]], DPUnit], trace: bool = False) -> None:
        """``units`` units of ``ep_size`` ranks each, made by ``build_unit`` from their ranks' streams
        (``cgbench.engine.build``: an engine core, or an EP group); ``router``: the coordinator's
        routing over every rank."""
        self.size = units * ep_size
        self.ep_size = ep_size
        self.stream = stream
        self.keep_trace = trace
        self.closed_loop = bool(getattr(stream, "concurrency", 0))
        self.router = router
        self.rank_streams: list[RankStream] = []
        self.units: list[DPUnit] = []
        for u in range(units):
            streams = [RankStream(self, u) for _ in range(ep_size)]
            self.rank_streams.extend(streams)
            self.units.append(build_unit(streams))
        self.gating_active = self.units[0].gating_active
        self.grid = self.units[0].grid
        self.ranks: list[Engine] = [r for unit in self.units for r in unit.ranks]
        self.ep_groups: list[EPEngine] = [u for u in self.units if isinstance(u, EPEngine)]
        self.unit_of = [u for u, unit in enumerate(self.units) for _ in unit.ranks]
        self.rank_stats = [DPRankStats() for _ in self.ranks]
        self.crashed = [False] * len(self.units)  # units that stopped on an engine assertion: not routed to
        self.stops: list[tuple[float, int, str, str]] = []  # (clock, first rank, outcome, diagnosis)
        self.state = RunState()
        self._drive = Drive(self)

    @property
    def counters(self) -> GatingCounters:
        """Every rank's gating counters, summed."""
        return summed_counters(r.counters for r in self.ranks)

    @property
    def retired(self) -> list[bool]:
        """Per unit: it stopped, and steps no more."""
        return self._drive.retired

    def horizon(self, unit: int) -> float | None:
        """What ``unit``'s decode stretches must not cross: the next arrival; under a closed loop also
        the earliest clock of another busy unit (a completion there releases the next request)."""
        nxt = self.stream.next_arrival_s()
        if self.closed_loop:
            busy = self._drive.busy
            for u, other in enumerate(self.units):
                if u != unit and busy[u] and (nxt is None or other.state.now_s < nxt):
                    nxt = other.state.now_s
        return nxt

    # -- the run (cgbench.engine.drive) -------------------------------------------------------------

    def run(self) -> RunState:
        """Run to the end (see the module docstring)."""
        return self._drive.run()

    def can_route(self) -> bool:
        return not all(self.crashed)

    def deliver(self, spec: RequestSpec, t_s: float, wake: Callable[[int], None] | None) -> None:
        """Routed on the ranks' pending counts at ``t_s``, a crashed unit's ranks excluded."""
        loads = [rs.pending(t_s) for rs in self.rank_streams]
        r = self.router.route(spec, loads, [not self.crashed[u] for u in self.unit_of])
        if wake is not None:
            wake(self.unit_of[r])
        self.rank_streams[r].routed += 1
        self.rank_stats[r].requests_routed += 1
        self.ranks[r].arrive(spec)

    def stopped(self, unit: int, stop: Stop) -> bool:
        """The unit steps no more; the others run on (a crashed one is routed to no more)."""
        self.crashed[unit] = stop.outcome == "engine_assertion"
        self.stops.append((self.units[unit].state.now_s, self.unit_of.index(unit), *stop))
        return False

    def stalled(self, unit: int) -> None:
        stuck = 0 if unit < 0 else self.unit_of.index(unit) + next(
            i for i, r in enumerate(self.units[unit].ranks) if not r.drained)
        self.state.outcome = "stalled"
        self.state.diagnosis = f"rank {stuck}: " + self.units[self.unit_of[stuck]].idle_diagnosis()

    def finish(self) -> RunState:
        """Every rank's steps, requests and trace as one system's; the makespan is the latest clock; the
        outcome the earliest stop's, if a unit stopped."""
        st = self.state
        if self.stops:
            _, first, outcome, why = min(self.stops)
            st.outcome, st.diagnosis = outcome, f"rank {first}: {why}"
        for unit in self.units:
            unit.finish()
        st.stats = merged_stats(rank.state.stats for rank in self.ranks)
        st.requests = Ledger.merged([rank.state.requests for rank in self.ranks])
        st.now_s = max([st.now_s] + [unit.state.now_s for unit in self.units])
        if self.keep_trace:  # by start time, then rank
            for i, rank in enumerate(self.ranks):
                for record in rank.state.trace:
                    record.rank = i
            st.trace = sorted((rec for rank in self.ranks for rec in rank.state.trace),
                              key=lambda rec: (rec.t_s, rec.rank))
        return st

    # -- what the run reports -----------------------------------------------------------------------

    @property
    def dummy_steps(self) -> int:
        """Its EP groups' dummy decode rank-steps."""
        return sum(g.dummy_steps for g in self.ep_groups)

    def metric_blocks(self) -> dict[str, Any]:
        blocks = {"dp": self.dp_metrics()}
        if self.ep_groups:
            blocks["ep"] = self.ep_metrics()
        return blocks

    def dp_metrics(self) -> dict[str, Any]:
        """The DP-only metrics (present only for ``dp_size`` > 1)."""
        steps = [r.state.stats.steps for r in self.ranks]
        eager = [r.state.stats.eager_steps / s if s else 0.0 for r, s in zip(self.ranks, steps, strict=True)]
        routed = [s.requests_routed for s in self.rank_stats]
        tokens = [sum(r.state.requests.int_column("generated")) for r in self.ranks]
        mean_eager = sum(eager) / len(eager)
        return {
            "dp_size": self.size,
            "routing": self.router.policy,
            "rank_steps": steps,
            "rank_eager_step_fraction": eager,
            "rank_requests": routed,
            "rank_completed": [r.state.requests.int_column("fate").count(COMPLETED) for r in self.ranks],
            "rank_tokens": tokens,
            "rank_makespan_s": [r.state.now_s for r in self.ranks],
            "request_imbalance": _imbalance(routed),
            "token_imbalance": _imbalance(tokens),
            "most_eager_rank": eager.index(max(eager)),
            "eager_fraction_spread": max(eager) - mean_eager,
        }

    def ep_metrics(self) -> dict[str, Any]:
        """The ``ep`` block over every EP group (``ep_size`` > 1 only): the groups' lockstep and dummy
        steps summed, the per-rank lists over all ``dp_size`` ranks, the requests the coordinator routed."""
        groups = self.ep_groups
        parts = [g.ep_metrics() for g in groups]
        forced = sum(s.forced_eager_steps for g in groups for s in g.rank_stats)
        total_eager = sum(r.state.stats.eager_steps for r in self.ranks)
        tokens = [sum(r.state.requests.int_column("generated")) for r in self.ranks]
        return {
            "ep_size": self.ep_size,
            "moe_dispatcher": groups[0].dispatcher,
            "lockstep_steps": sum(p["lockstep_steps"] for p in parts),
            "rank_eager_step_fraction": [f for p in parts for f in p["rank_eager_step_fraction"]],
            "dummy_steps": sum(p["dummy_steps"] for p in parts),
            "rank_dummy_steps": [d for p in parts for d in p["rank_dummy_steps"]],
            "forced_eager_fraction": forced / total_eager if total_eager else 0.0,
            "rank_requests": [s.requests_routed for s in self.rank_stats],
            "rank_completed": [c for p in parts for c in p["rank_completed"]],
            "load_imbalance": _imbalance(tokens),
        }


def _imbalance(values: list[int]) -> float:
    """max / mean (1 = balanced; 1.0 when nothing at all)."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0
