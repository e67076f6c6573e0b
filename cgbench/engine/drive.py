"""The one event loop of every engine topology: one engine core, an EP group, or data-parallel ranks.

A *unit* steps on its own clock: one engine core (``cgbench.engine.core.Engine``) or one
expert-parallel group whose ranks step together (``cgbench.engine.ep.EPEngine``); both meet ``Unit``
directly. A *system* is the units of one run behind its workload stream (``System``): it routes each
arrival to a rank, says what a unit's stop means for the run, and merges the run's state. One engine
and one EP group are systems of one unit (themselves); ``cgbench.engine.dp.DPEngine`` is a system of
``dp_size / ep_size`` units. ``Drive.run`` runs any of them:

* an arrival is delivered once every busy unit's clock has reached it: the system routes it to a rank
  then (on the ranks' counts at that time), and a unit waiting for work wakes at it (as does every
  waiting unit that still holds work);
* otherwise the busy unit with the earliest clock (ties: the lowest index) runs its round. A unit whose
  round leaves nothing to run waits for its handoff pulls first (``Unit.await_pulls``: a released slot
  may admit, so it schedules again), else it waits for the next arrival;
* after each step the ``Watchdog`` says whether the unit must stop (an engine assertion, no progress
  for ``stall_steps`` steps, past the step bound its workload gives); the system says whether that
  ends the run (a system of one unit) or only retires that unit (data parallelism: the others run on);
* when nothing runs and nothing more arrives the run is over: stalled if no unit stopped and work is
  left (a unit not drained, or a stream not exhausted), else as it stands.

Every unit starts busy, so it runs a round at its clock 0 even before its first arrival.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from cgbench.engine.contract import StepRecord
from cgbench.engine.ledger import Ledger
from cgbench.engine.stats import StepStats
from cgbench.workload.stream import RequestSpec, RequestStream


@dataclass
class RunState:
    """What a run leaves: its requests, step statistics, trace, outcome and clock."""

    requests: Ledger = field(default_factory=Ledger)  # live requests; finished ones packed (ledger.py)
    stats: StepStats = field(default_factory=StepStats)
    trace: list[StepRecord] = field(default_factory=list)
    outcome: str = "completed"
    diagnosis: str = ""
    now_s: float = 0.0


class Stop(NamedTuple):
    """Why a unit stops: the run's ``outcome`` (``engine_assertion``, ``stalled``, ``step_bound``) and
    its ``diagnosis``."""

    outcome: str
    diagnosis: str


class Unit(Protocol):
    """What steps on one clock: an engine core, or an EP group of cores in lockstep."""

    @property
    def state(self) -> RunState:
        """Its run state; ``state.now_s`` is its clock."""
        ...

    @property
    def step(self) -> int:
        """Steps run so far (an EP group's: lockstep steps)."""
        ...

    @property
    def last_progress(self) -> int:
        """The last step that admitted a request for the first time, took one off a queue or finished one."""
        ...

    @property
    def step_bound(self) -> int:
        """The most steps the workload given so far can need (``Watchdog.bound``)."""
        ...

    @property
    def drained(self) -> bool:
        """Nothing queued, paused or half prefilled: everything it was given has ended."""
        ...

    @property
    def halted(self) -> bool:
        """An engine assertion stopped it (``halt`` says which)."""
        ...

    @property
    def watchdog(self) -> Watchdog: ...

    def wait_until(self, t_s: float) -> None:
        """Nothing runs before ``t_s``: the clock moves there, never back."""
        ...

    def schedule_round(self) -> bool:
        """The scheduling round at this clock (kept for ``run_step``); True if it left a step to run."""
        ...

    def await_pulls(self) -> bool:
        """Nothing to run: wait for the handoff pulls (``Engine.await_pulls``); True if a slot was released."""
        ...

    def run_step(self) -> None:
        """Run the step the last ``schedule_round`` left (a whole decode stretch, for the fast engine)."""
        ...

    def halt(self) -> Stop | None:
        """The engine assertion that stopped it, if one did."""
        ...

    def progress_diagnosis(self) -> tuple[str, str]:
        """For the stall watchdog: where it looked (``""``, or ``" on any rank"``) and why nothing is
        admitted (the head request, its candidate step, the graph it would miss)."""
        ...

    def idle_diagnosis(self) -> str:
        """Why the last round, which left nothing to run, will never be followed by one."""
        ...


class System(Protocol):
    """The units of one run behind one workload stream."""

    @property
    def stream(self) -> RequestStream:
        """The workload every unit's requests come from."""
        ...

    @property
    def units(self) -> Sequence[Unit]: ...

    def can_route(self) -> bool:
        """Whether any unit can still be given a request (a crashed engine cannot)."""
        ...

    def deliver(self, spec: RequestSpec, t_s: float, wake: Callable[[int], None] | None) -> None:
        """``spec`` arrives at ``t_s``: routed to a rank, whose unit is woken first (``wake(unit)``: its
        clock moves to ``t_s`` if it was waiting; None: a system of one unit, woken already)."""
        ...

    def stopped(self, unit: int, stop: Stop) -> bool:
        """Unit ``unit`` stopped for ``stop`` (it steps no more); True if that ends the run."""
        ...

    def stalled(self, unit: int) -> None:
        """Nothing runs and nothing more arrives while work is left: the run stalls at unit ``unit``'s
        last round (the first unit not drained; -1: every unit is, but the stream is not exhausted)."""
        ...

    def finish(self) -> RunState:
        """The run is over: the system's state."""
        ...


class Watchdog:
    """The rules that stop a unit, the same for every topology: an engine assertion, no request
    admitted or finished for ``stall_steps`` steps, or more steps than the workload can need
    (``bound``: four per prompt or output token given, plus 1000)."""

    __slots__ = ("stall_steps",)

    def __init__(self, stall_steps: int) -> None:
        self.stall_steps = stall_steps

    @staticmethod
    def bound(total_work: int) -> int:
        """The step bound of a workload of ``total_work`` prompt and output tokens."""
        return 4 * total_work + 1000

    def fires(self, step: int, last_progress: int, step_bound: int) -> bool:
        """Whether a unit at ``step`` is out of bounds (no progress, or past its step bound)."""
        return step - last_progress > self.stall_steps or step > step_bound

    def first_firing(self, last_progress: int, step_bound: int) -> int:
        """The first step at which ``fires`` holds if nothing progresses (a decode stretch ends before it)."""
        stall, bound = last_progress + self.stall_steps + 1, step_bound + 1
        return stall if stall < bound else bound  # comparisons, not builtin min calls: once per event

    def verdict(self, unit: Unit) -> Stop | None:
        """After ``unit``'s step: why it must stop now, or None."""
        step = unit.step
        if not unit.halted and step - unit.last_progress <= self.stall_steps and step <= unit.step_bound:
            return None  # the common case, first: every step asks
        halted = unit.halt()
        if halted is not None:
            return halted
        if step - unit.last_progress > self.stall_steps:
            where, why = unit.progress_diagnosis()
            return Stop("stalled", f"no request admitted or finished{where} for {self.stall_steps} steps; {why}")
        bound = unit.step_bound
        if step > bound:
            return Stop("step_bound", f"exceeded the step bound {bound} derived from the workload")
        return None


class Drive:
    """Runs a ``System`` (see the module docstring). ``busy``: the units with a round to run (the
    others wait for an arrival); ``retired``: the units that stopped."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.units: list[Unit] = list(system.units)
        self.busy = [True] * len(self.units)
        self.retired = [False] * len(self.units)

    def run(self) -> RunState:
        """Run the system to its end: ``run_one`` for a system of one unit, else ``run_many``."""
        return self.run_one() if len(self.units) == 1 else self.run_many()

    def run_many(self) -> RunState:
        """The loop of the module docstring, for any number of units."""
        system, units, busy, retired = self.system, self.units, self.busy, self.retired
        stream = system.stream
        n = len(units)
        stops = 0
        while True:
            nxt = stream.next_arrival_s()
            u, clock = -1, 0.0  # the busy unit with the earliest clock
            for i in range(n):
                if busy[i]:
                    t = units[i].state.now_s
                    if u < 0 or t < clock:
                        u, clock = i, t
            if nxt is not None and (u < 0 or nxt <= clock):
                if stops and not system.can_route():
                    break  # every engine crashed: nothing is left to take a request
                self._arrivals(nxt)
                continue
            if u < 0:  # nothing runs and nothing more arrives
                if not stops:
                    waiting = next((i for i in range(n) if not units[i].drained), -1)
                    if waiting >= 0 or not stream.exhausted():
                        system.stalled(waiting)
                break
            unit = units[u]
            ready = unit.schedule_round()
            while not ready and not unit.halted and unit.await_pulls():  # a released slot may admit the head now
                ready = unit.schedule_round()
            if unit.halted:  # Megatron's code raised while scheduling (prefix caching): no step runs
                stop = unit.halt()
            elif not ready:
                busy[u] = False
                continue
            else:
                unit.run_step()
                stop = unit.watchdog.verdict(unit)
            if stop is not None:
                busy[u], retired[u] = False, True
                stops += 1
                if system.stopped(u, stop):
                    break
        return system.finish()

    def run_one(self) -> RunState:
        """``run_many`` for a system of one unit (one engine, one EP group, or data-parallel ranks that
        make one EP group), the same steps in the same order (tests/engine/test_drive.py): every
        arrival is this unit's, so it wakes before they are delivered, and there is no earliest clock
        to find. It saves 2.2% of a one-engine run's instructions (docs/architecture.md)."""
        system, unit = self.system, self.units[0]
        stream = system.stream
        state = unit.state
        watchdog = unit.watchdog
        busy = retired = False
        while True:
            nxt = stream.next_arrival_s()
            if nxt is not None and (not busy or nxt <= state.now_s):
                if retired and not system.can_route():
                    break  # the engine crashed: nothing is left to take a request
                if not busy and not retired:
                    unit.wait_until(nxt)
                    busy = True
                for spec in stream.pop_due(nxt):
                    system.deliver(spec, nxt, None)
                continue
            if not busy:  # nothing runs and nothing more arrives
                if not retired and (not unit.drained or not stream.exhausted()):
                    system.stalled(-1 if unit.drained else 0)
                break
            ready = unit.schedule_round()
            while not ready and not unit.halted and unit.await_pulls():  # a released slot may admit the head now
                ready = unit.schedule_round()
            if unit.halted:  # Megatron's code raised while scheduling (prefix caching): no step runs
                stop = unit.halt()
            elif not ready:
                busy = False
                continue
            else:
                unit.run_step()
                stop = watchdog.verdict(unit)
            if stop is not None:
                busy = False
                retired = True
                if system.stopped(0, stop):
                    break
        self.busy[0], self.retired[0] = busy, retired
        return system.finish()

    def _arrivals(self, t_s: float) -> None:
        """The arrivals due at ``t_s``, each routed by the system; every waiting unit that gets a
        request, or still holds work, wakes at ``t_s`` for a round."""
        system, units, busy, retired = self.system, self.units, self.busy, self.retired

        def wake(u: int) -> None:
            if not busy[u] and not retired[u]:
                units[u].wait_until(t_s)
                busy[u] = True

        for spec in system.stream.pop_due(t_s):
            system.deliver(spec, t_s, wake)
        for u, unit in enumerate(units):
            if not busy[u] and not retired[u] and not unit.drained:
                unit.wait_until(t_s)
                busy[u] = True


def drive(system: System) -> RunState:
    """Run ``system`` to its end (``Drive``)."""
    return Drive(system).run()
