"""One pass over a Megatron step log, kept as per-rank aggregates (bounded memory, any log length).

``digest_log`` reads the file once (``cgbench.workload.megatron_log``) and keeps, per rank: step
counts and times, graphed and eager; the steps of each distinct ``(real shape, graph)`` pair (count,
time sums, KV blocks held: what explaining and fitting need, with no step kept); the longest run of
consecutive eager steps; and deferral-like waits. Both ``cgbench explain --megatron-log`` and
``cgbench calibrate --megatron-log`` start from a ``LogDigest``.

A deferral-like wait is a logged step that ran decode only (``P = 0``) while requests waited
(``w > 0``) with request slots free (``a < max``) and nothing paused (``p = 0``): the head of the
queue was not admitted although a slot was free. Gating deferrals (#4870) look like that; so do a
prompt larger than the token budget left or KV blocks short, which the log cannot tell apart.

Memory is bounded whatever the log holds: past ``MAX_SHAPES`` distinct pairs (over every rank), a
new pair's real token count is rounded up to a multiple of ``COARSE_TOKENS`` (matching a rounded-up
count is conservative: a miss stays a miss), and past as many rounded pairs again a step is counted
but not kept by shape (``unkept_steps``); the digest says how many steps were folded or not kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cgbench.workload.megatron_log import MegatronLogReader, RankSteps, ReadStats, StepLine

MAX_SHAPES = 1 << 18  # distinct (real, graph) pairs kept exactly, over every rank (then as many rounded)
COARSE_TOKENS = 64

Shape = tuple[int, int, int]
ShapeKey = tuple[Shape, Shape | None]


@dataclass(slots=True)
class ShapeSteps:
    """The logged steps of one ``(real shape, graph)`` pair."""

    steps: int = 0
    ms: float = 0.0
    ms2: float = 0.0  # Σ ms², for the spread
    blocks: int = 0  # Σ KV blocks held by active requests
    first_step: int = -1

    @property
    def mean_ms(self) -> float:
        return self.ms / self.steps

    @property
    def mean_blocks(self) -> float:
        return self.blocks / self.steps


@dataclass(slots=True)
class Run:
    """A run of consecutive logged steps with some property: its length and where it was."""

    steps: int = 0
    first_step: int = -1
    last_step: int = -1

    def to_json(self) -> dict[str, int]:
        return {"steps": self.steps, "first_step": self.first_step, "last_step": self.last_step}


@dataclass
class RankDigest:
    """Everything one rank's step lines say, aggregated."""

    rank: int
    steps: int = 0  # logged steps that ran (idle lines excluded)
    graphed_steps: int = 0
    eager_steps: int = 0
    idle_lines: int = 0
    graphed_ms: float = 0.0
    eager_ms: float = 0.0
    decode_steps: int = 0
    prefill_steps: int = 0  # P > 0 and D = 0
    mixed_steps: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    shapes: dict[ShapeKey, ShapeSteps] = field(default_factory=dict)
    folded_steps: int = 0  # steps whose real T was rounded up (MAX_SHAPES reached)
    unkept_steps: int = 0  # steps kept by no shape (twice MAX_SHAPES reached)
    budget: list[int] = field(default_factory=lambda: [0, 0])  # pairs kept (exact, rounded), shared by the ranks
    longest_eager: Run = field(default_factory=Run)
    longest_wait: Run = field(default_factory=Run)
    wait_steps: int = 0
    max_requests: int = 0
    max_waiting: int = 0
    max_paused: int = 0
    evicted: int = 0  # the last line's cumulative count
    finished: int = 0
    first_clock: str = ""
    last_clock: str = ""
    spec: tuple[int, int, int] | None = None  # the last cumulative acceptance
    _eager_run: Run = field(default_factory=Run)
    _wait_run: Run = field(default_factory=Run)
    _last_step: int = -1

    def add(self, s: StepLine) -> None:
        real, graph, kind, number, ms = s.real, s.graph, s.kind, s.step, s.ms
        T, P, D = real
        if T == 0 or kind == "idle":
            self.idle_lines += 1
            return
        self.steps += 1
        kinds = self.kinds
        kinds[kind] = kinds.get(kind, 0) + 1
        if P == 0:
            self.decode_steps += 1
        elif D == 0:
            self.prefill_steps += 1
        else:
            self.mixed_steps += 1
        restart = number <= self._last_step
        self._last_step = number
        eager_run = self._eager_run
        if graph is None:
            self.eager_steps += 1
            self.eager_ms += ms
            _extend(eager_run, number, restart)
            if eager_run.steps > self.longest_eager.steps:
                self.longest_eager = Run(eager_run.steps, eager_run.first_step, number)
        else:
            self.graphed_steps += 1
            self.graphed_ms += ms
            eager_run.steps = 0
        wait_run = self._wait_run
        if P == 0 and s.waiting > 0 and s.paused == 0 and s.active < s.max_requests:
            self.wait_steps += 1
            _extend(wait_run, number, restart)
            if wait_run.steps > self.longest_wait.steps:
                self.longest_wait = Run(wait_run.steps, wait_run.first_step, number)
        else:
            wait_run.steps = 0
        key: ShapeKey = (real, graph)
        group = self.shapes.get(key)
        if group is None:
            budget = self.budget
            if budget[0] < MAX_SHAPES:
                budget[0] += 1
            else:
                key = ((-(-T // COARSE_TOKENS) * COARSE_TOKENS, P, D), s.graph)
                self.folded_steps += 1
                group = self.shapes.get(key)
                if group is None:
                    if budget[1] >= MAX_SHAPES:
                        self.unkept_steps += 1
                        self._last_values(s)
                        return
                    budget[1] += 1
            if group is None:
                group = self.shapes[key] = ShapeSteps(first_step=number)
        group.steps += 1
        group.ms += ms
        group.ms2 += ms * ms
        group.blocks += s.active_used
        self._last_values(s)

    def _last_values(self, s: StepLine) -> None:
        """The maxima and last values a line carries (every line, kept by shape or not)."""
        if s.max_requests > self.max_requests:
            self.max_requests = s.max_requests
        if s.waiting > self.max_waiting:
            self.max_waiting = s.waiting
        if s.paused > self.max_paused:
            self.max_paused = s.paused
        self.evicted, self.finished = s.evicted, s.finished
        if not self.first_clock:
            self.first_clock = s.clock
        self.last_clock = s.clock
        if s.spec is not None:
            self.spec = s.spec

    @property
    def step_ms(self) -> float:
        return self.graphed_ms + self.eager_ms

    def graphs(self) -> set[Shape]:
        return {g for _, g in self.shapes if g is not None}


def _extend(run: Run, step: int, restart: bool) -> None:
    """``run`` grows by the logged step ``step`` (a restart starts it over)."""
    if run.steps == 0 or restart:
        run.steps, run.first_step = 0, step
    run.steps += 1
    run.last_step = step


@dataclass
class LogDigest:
    """A log read once: what the reader saw (``stats``, capture, arguments, the emitted header) and
    each rank's aggregates."""

    path: Path
    label: str
    stats: ReadStats
    ranks: dict[int, RankDigest]
    numbering: dict[int, RankSteps]
    capture: list[Shape]
    capture_count: int
    capture_conflicts: int
    arguments: dict[str, str]
    emitted: dict[str, str] | None
    size_bytes: int

    def rank(self, rank: int | None = None) -> RankDigest:
        """``rank``'s digest (the lowest rank when None); a ConfigError naming the ranks otherwise."""
        from cgbench.errors import ConfigError

        if rank is None:
            return self.ranks[min(self.ranks)]
        if rank not in self.ranks:
            raise ConfigError(f"--rank: {self.label} has no step line of rank {rank} (ranks: "
                              f"{', '.join(map(str, sorted(self.ranks)))})")
        return self.ranks[rank]

    def replayed(self) -> set[Shape]:
        """Every graph a step of any rank replayed."""
        out: set[Shape] = set()
        for r in self.ranks.values():
            out |= r.graphs()
        return out


def digest_log(path: str | Path, *, label: str | None = None,
               progress: Callable[[int, int], None] | None = None) -> LogDigest:
    """Read ``path`` once and aggregate it (a ConfigError when it holds no step line)."""
    import os

    reader = MegatronLogReader(path, label=label, progress=progress)
    ranks: dict[int, RankDigest] = {}
    budget = [0, 0]
    for s in reader.steps():
        r = ranks.get(s.rank)
        if r is None:
            r = ranks[s.rank] = RankDigest(s.rank, budget=budget)
        r.add(s)
    reader.finish()
    return LogDigest(Path(path), reader.label, reader.stats, ranks, reader.ranks, list(reader.capture.graphs),
                     reader.capture.count, reader.capture.conflicts, reader.arguments, reader.emitted,
                     os.stat(path).st_size)
