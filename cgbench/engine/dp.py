"""Data parallelism: ``engine.dp_size`` engines behind Megatron's coordinator.

Megatron 0.19.2 runs one dynamic engine per data-parallel rank (each with its own context, KV pool,
captured graphs and scheduler) and one ``DataParallelInferenceCoordinator`` process that routes
every new request to a rank (``cgbench.engine.router``) on the ranks' *pending* counts: requests it
routed there that the rank has not yet reported finished. The ranks step on their own: a DP rank
waits for no other, except that the ranks of one expert-parallel group (``engine.ep_size`` > 1; the
EP ranks of an MoE model *are* DP ranks) step together (``cgbench.engine.ep``), dummy forwards
included. So the system is ``dp_size / ep_size`` *units*, each with its own clock: one engine core
(``ep_size`` 1) or one lockstep EP group.

The loop is a discrete-event one: the unit whose clock is earliest steps next, and an arrival is
routed once every busy unit's clock has reached it (the ranks' pending counts then are those at the
arrival: a completion at a later step end is not yet reported). A unit with nothing to run waits for
the next arrival anywhere (as a single engine waits for its stream's next arrival) and wakes at it.

Single-rank units run the event-proportional engine when the run would (its stretches are bounded by
what a rank's stream says is next: the next arrival, and under a closed loop also the earliest other
busy unit's clock, whose completions release the next requests); the per-rank oracle equality is in
tests/engine/test_dp.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from cgbench.config.schema import BenchConfig
from cgbench.engine.contract import StepBackend
from cgbench.engine.core import Engine, RunState
from cgbench.engine.ep import EPEngine, merge_stats, summed_counters
from cgbench.engine.fast import FastEngine
from cgbench.engine.ledger import COMPLETED, Ledger
from cgbench.engine.policies import Policy
from cgbench.engine.router import Router
from cgbench.engine.scheduler import GatingCounters, RoundResult, gating_active
from cgbench.engine.selection import runs_step_by_step
from cgbench.engine.stats import StepStats
from cgbench.grids.lookup import Grid
from cgbench.workload.prefix_model import prefix_source_tokens
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


class _Single:
    """A unit of one engine core (``ep_size`` 1)."""

    def __init__(self, core: Engine) -> None:
        self.core = core
        self.ranks = [core]
        self.result: RoundResult | None = None

    @property
    def now_s(self) -> float:
        return self.core.state.now_s

    def wait_until(self, t_s: float) -> None:
        self.core.wait_until(t_s)

    def begin_round(self) -> bool:
        self.result = self.core.begin_round()
        if self.core.idle and self.core.await_pulls():  # as the engine's own loop: a released slot may admit
            self.result = self.core.begin_round()
        return not self.core.idle

    def advance(self) -> tuple[str, str] | None:
        core = self.core
        assert self.result is not None
        core.advance(self.result)
        if core.must_stop():
            return core.state.outcome, core.state.diagnosis
        return None

    def stall_diagnosis(self) -> str:
        assert self.result is not None
        return self.core.stall_diagnosis(self.result)


class _Group:
    """A unit of one EP group (``ep_size`` ranks in lockstep, ``cgbench.engine.ep``)."""

    def __init__(self, group: EPEngine) -> None:
        self.group = group
        self.ranks = group.ranks

    @property
    def now_s(self) -> float:
        return self.group.state.now_s

    def wait_until(self, t_s: float) -> None:
        self.group.wait_until(t_s)

    def begin_round(self) -> bool:
        return self.group.begin_round()

    def advance(self) -> tuple[str, str] | None:
        g = self.group
        if g.advance():
            return g.state.outcome, g.state.diagnosis
        return None

    def stall_diagnosis(self) -> str:
        return self.group.stall_idle()


@dataclass
class DPRankStats:
    requests_routed: int = 0


class DPEngine:
    """``dp_size`` data-parallel ranks behind the coordinator (see the module docstring)."""

    def __init__(self, cfg: BenchConfig, grid: Grid, policy: Policy, backend: StepBackend,
                 stream: RequestStream, *, trace: bool = False) -> None:
        e = cfg.engine
        self.size = e.dp_size
        self.ep_size = e.ep_size
        self.stream = stream
        self.keep_trace = trace
        self.closed_loop = bool(getattr(stream, "concurrency", 0))
        self.router = Router(self.size, e.dp_routing, e.dp_routing_alpha, e.max_requests, e.block_size,
                             prefix_source_tokens(cfg.workload) or e.block_size)
        self.rank_streams: list[RankStream] = []
        self.units: list[_Single | _Group] = []
        if e.ep_size == 1:
            self.gating_active = gating_active(policy, cfg.cg, grid)
            self.grid = grid
            fast = not runs_step_by_step(e, backend, policy)
            for u in range(self.size):
                rs = RankStream(self, u)
                self.rank_streams.append(rs)
                core: Engine
                if fast:
                    assert backend.pricer is not None
                    core = FastEngine(e, grid, policy, backend, rs, gating=self.gating_active, trace=trace,
                                      pricer=backend.pricer)
                else:
                    core = Engine(e, grid, policy, backend, rs, gating=self.gating_active, trace=trace, seed=cfg.seed)
                self.units.append(_Single(core))
        else:  # dp_size / ep_size EP groups, each in lockstep (oracle cores: see cgbench.engine.ep)
            group_cfg = replace(cfg, engine=replace(e, dp_size=1))
            for u in range(self.size // e.ep_size):
                streams = [RankStream(self, u) for _ in range(e.ep_size)]
                self.rank_streams.extend(streams)
                self.units.append(_Group(EPEngine(group_cfg, grid, policy, backend, stream, trace=trace,
                                                  rank_streams=streams)))
            g0 = self.units[0]
            assert isinstance(g0, _Group)
            self.gating_active, self.grid = g0.group.gating_active, g0.group.grid
        self.ranks: list[Engine] = [r for unit in self.units for r in unit.ranks]
        self.ep_groups: list[EPEngine] = [u.group for u in self.units if isinstance(u, _Group)]
        self.unit_of = [u for u, unit in enumerate(self.units) for _ in unit.ranks]
        self.rank_stats = [DPRankStats() for _ in self.ranks]
        self.busy = [False] * len(self.units)  # a unit with a step to run (else it waits for an arrival)
        self.retired = [False] * len(self.units)  # a unit that stopped: it steps no more
        self.crashed = [False] * len(self.units)  # one that stopped on an engine assertion: not routed to
        self.state = RunState()

    @property
    def counters(self) -> GatingCounters:
        """Every rank's gating counters, summed."""
        return summed_counters(self.ranks)

    def horizon(self, unit: int) -> float | None:
        """What ``unit``'s decode stretches must not cross: the next arrival; under a closed loop also
        the earliest clock of another busy unit (a completion there releases the next request)."""
        nxt = self.stream.next_arrival_s()
        if self.closed_loop:
            for u, other in enumerate(self.units):
                if u != unit and self.busy[u] and (nxt is None or other.now_s < nxt):
                    nxt = other.now_s
        return nxt

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> RunState:
        """Run to the end (see the module docstring). A unit that stops (an engine assertion, a stall,
        the step bound) steps no more while the others run on, so that what each rank does never
        depends on the order the loop visits the units in; a crashed unit is also taken out of the
        routing (the coordinator drops an engine it cannot reach). The run's outcome is the earliest
        stop in simulated time (ties: the lowest rank), else a stall of waiting ranks, else completed."""
        st, units, busy, retired = self.state, self.units, self.busy, self.retired
        stops: list[tuple[float, int, str, str]] = []  # (clock, first rank, outcome, diagnosis)
        while True:
            nxt = self.stream.next_arrival_s()
            u = -1
            for i, unit in enumerate(units):
                if busy[i] and (u < 0 or unit.now_s < units[u].now_s):
                    u = i
            if nxt is not None and (u < 0 or nxt <= units[u].now_s):
                if not self._arrivals(nxt):
                    break  # every engine crashed: nothing is left to take a request
                continue
            if u < 0:  # nothing runs and nothing more arrives
                waiting = [i for i, r in enumerate(self.ranks) if not r.drained and not retired[self.unit_of[i]]]
                if not stops and (waiting or not self.stream.exhausted()):
                    stuck = waiting[0] if waiting else 0
                    st.outcome = "stalled"
                    st.diagnosis = f"rank {stuck}: " + units[self.unit_of[stuck]].stall_diagnosis()
                break
            unit = units[u]
            if not unit.begin_round():
                busy[u] = False
                continue
            stop = unit.advance()
            if stop is not None:
                busy[u], retired[u] = False, True
                self.crashed[u] = stop[0] == "engine_assertion"
                stops.append((unit.now_s, self.unit_of.index(u), *stop))
        if stops:
            _, first, outcome, why = min(stops)
            st.outcome, st.diagnosis = outcome, f"rank {first}: {why}"
        return self._merged()

    def _arrivals(self, t_s: float) -> bool:
        """The arrivals due at ``t_s``, each routed on the pending counts then (a crashed unit's ranks
        excluded); every waiting unit that is not drained (or gets a request) wakes at ``t_s`` for a
        round. False, with nothing routed, when every unit crashed."""
        alive = [not self.crashed[u] for u in self.unit_of]
        if not any(alive):
            return False
        for spec in self.stream.pop_due(t_s):
            loads = [rs.pending(t_s) for rs in self.rank_streams]
            r = self.router.route(spec, loads, alive)
            u = self.unit_of[r]
            if not self.busy[u] and not self.retired[u]:
                self.units[u].wait_until(t_s)
                self.busy[u] = True
            self.rank_streams[r].routed += 1
            self.rank_stats[r].requests_routed += 1
            self.ranks[r].arrive(spec)
        for u, unit in enumerate(self.units):
            if not self.busy[u] and not self.retired[u] and not all(r.drained for r in unit.ranks):
                unit.wait_until(t_s)
                self.busy[u] = True
        return True

    # -- the whole system ---------------------------------------------------------------------------

    def _merged(self) -> RunState:
        """Every rank's steps, requests and trace as one system's; the makespan is the latest clock."""
        st = self.state
        stats = StepStats()
        for unit in self.units:
            if isinstance(unit, _Group):
                unit.group._merged()
            else:
                unit.core.finish()
        for rank in self.ranks:
            merge_stats(stats, rank.state.stats)
        st.stats = stats
        st.requests = Ledger.merged([rank.state.requests for rank in self.ranks])
        st.now_s = max([st.now_s] + [unit.now_s for unit in self.units])
        if self.keep_trace:  # by start time, then rank
            for i, rank in enumerate(self.ranks):
                for record in rank.state.trace:
                    record.rank = i
            st.trace = sorted((rec for rank in self.ranks for rec in rank.state.trace),
                              key=lambda rec: (rec.t_s, rec.rank))
        return st

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
        groups = [unit.group for unit in self.units if isinstance(unit, _Group)]
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
