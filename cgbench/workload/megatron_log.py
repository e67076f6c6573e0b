"""Reading Megatron-LM's console log: the dynamic engine's step lines, and what else the log says.

A production log is whatever the launcher captured: the engine's step lines (one every
``--inference-logging-step-interval`` steps, ``cgbench.workload.megatron_log_format``) interleaved
with every other line Megatron and the user's code print, from one or several ranks, gzip'd or not,
its last line perhaps cut off by a crash. ``MegatronLogReader`` reads it once, streaming (bounded
memory whatever its length: the file is opened by ``cgbench.workload.trace_file``'s rules), and
yields the step lines (``StepLine``). On the way it counts what is not a step line, keeps each
rank's step numbering apart (``RankSteps``: first and last step, the gaps between logged steps,
restarts), and collects three things a log may also hold:

* the captured-graph list (``CAPTURE`` lines, written once per rank at capture, in stored order);
* Megatron's argument dump (``---- arguments ----`` ... ``---- end of arguments ----``, rank 0);
* the header ``cgbench run --emit-megatron-log`` writes (``cgbench: emitted log: key=value ...``).

A line that starts like a step line but does not parse as one of the known versions is malformed:
counted, the first few kept for the message; a cut-off last line is told apart. A file with no step
line at all is one ``ConfigError``, naming what the file did hold.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from cgbench.errors import ConfigError
from cgbench.workload import megatron_log_format as fmt
from cgbench.workload.trace_file import file_size, is_gzip, trace_lines

KEY = "--megatron-log"
EMITTED_MARK = "cgbench: emitted log: "
MAX_EXAMPLES = 3  # malformed lines kept for the message
MAX_GAPS = 64  # distinct gaps between logged steps kept per rank (more: the numbering is irregular anyway)
MAX_ARGUMENTS = 10_000  # entries of an argument dump kept
MAX_CAPTURE = 100_000  # graphs of a capture listing kept (limits.MAX_GRAPHS is far below)
MAX_RANKS = 1 << 14  # distinct ranks in one log (a larger job's log is split per node anyway)
PROGRESS_EVERY = 1 << 16  # lines between progress calls
MAX_CACHED_CONFIGS = 1 << 16  # distinct bracketed configs (kind, real shape, graph) kept parsed


class StepLine(NamedTuple):
    """One step line, its fields as Megatron wrote them (``cgbench.workload.megatron_log_format``).

    ``real`` is the step's batch shape ``(T, P, D)``, ``graph`` the graph it replayed (None: eager,
    ``cuda graph OFF``). ``active`` is requests minus paused, counted before the step; ``waiting``,
    ``finished`` and ``evicted`` after it (the last two cumulative). Blocks: ``active_used`` KV blocks
    held by active requests, ``paused_used`` by paused ones; ``pool_blocks`` the pool (0.19: the
    active part; main: the usable pool), ``paused_budget`` the paused requests' budget. ``spec``:
    the cumulative speculative acceptance suffix ``(accepted, proposed, steps)`` when the line has one.
    (A tuple: a million of them are built in a few seconds.)"""

    lineno: int
    version: str
    rank: int
    step: int
    clock: str
    ms: float
    kind: str
    previous: str | None
    real: tuple[int, int, int]
    graph: tuple[int, int, int] | None
    active: int
    max_requests: int
    paused: int
    waiting: int
    finished: int
    evicted: int
    active_used: int
    paused_used: int
    pool_blocks: int
    paused_budget: int
    spec: tuple[int, int, int] | None = None

    @property
    def eager(self) -> bool:
        return self.graph is None


@dataclass
class RankSteps:
    """One rank's step numbering as logged: steps seen, first and last, the gaps between consecutive
    logged steps (a counter), and restarts (a step number not above the previous one: a new engine,
    or two runs in one file)."""

    lines: int = 0
    first: int = -1
    last: int = -1
    gaps: Counter[int] = field(default_factory=Counter)
    gaps_overflow: int = 0
    restarts: int = 0

    def add(self, step: int) -> None:
        self.lines += 1
        if self.first < 0:
            self.first = step
        elif step <= self.last:
            self.restarts += 1
        else:
            gap = step - self.last
            if gap in self.gaps or len(self.gaps) < MAX_GAPS:
                self.gaps[gap] += 1
            else:
                self.gaps_overflow += 1
        self.last = step

    @property
    def interval(self) -> int | None:
        """The logging interval when every gap is the same (1 when only one step was logged and it is
        step 1 or less); None when the gaps differ (steps lost, or the interval changed)."""
        if self.gaps_overflow or len(self.gaps) > 1:
            return None
        if not self.gaps:
            return self.first if self.first >= 1 else 1
        return next(iter(self.gaps))

    def sampling(self) -> str:
        """In words: is every step in the log, or one in N, or irregular."""
        n = self.interval
        if n == 1:
            return "every step logged"
        if n is not None:
            return f"one step in {n} logged (--inference-logging-step-interval {n}): counts are of logged steps"
        gaps = ", ".join(f"{g} ({c}x)" for g, c in self.gaps.most_common(4))
        return f"irregular gaps between logged steps ({gaps}{', ...' if len(self.gaps) > 4 else ''})"


@dataclass
class CaptureListing:
    """The graphs the log's capture lines list (``[graph i/N] SHAPE``), in stored order. Every rank
    writes the list; ``conflicts`` counts listings that disagree with the first."""

    count: int = 0  # N, as the lines say
    graphs: list[tuple[int, int, int]] = field(default_factory=list)
    listings: int = 0
    conflicts: int = 0
    _current: list[tuple[int, int, int]] = field(default_factory=list)

    def add(self, index: int, count: int, shape: tuple[int, int, int]) -> None:
        if index == 1:
            self._current = []
        if len(self._current) < MAX_CAPTURE:
            self._current.append(shape)
        if index == count:
            self.listings += 1
            if not self.graphs:
                self.graphs, self.count = self._current, count
            elif self._current != self.graphs:
                self.conflicts += 1
            self._current = []

    @property
    def complete(self) -> bool:
        return bool(self.graphs) and len(self.graphs) == self.count


@dataclass
class ReadStats:
    """What the file held besides step lines."""

    lines: int = 0
    step_lines: int = 0
    other_lines: int = 0
    malformed: int = 0
    malformed_examples: list[tuple[int, str]] = field(default_factory=list)
    truncated_last: bool = False
    versions: Counter[str] = field(default_factory=Counter)
    gzip: bool = False

    def skipped_text(self) -> str:
        parts = [f"{self.other_lines:,} other line(s) skipped"]
        if self.malformed:
            parts.append(f"{self.malformed:,} malformed step line(s) skipped (first at line "
                         f"{self.malformed_examples[0][0]})")
        if self.truncated_last:
            parts.append("the last line is cut off (skipped)")
        return ", ".join(parts)


def _int(m, name: str) -> int:
    return int(m.group(name))


_make = StepLine._make
_MARK, _COLOR_END, _COLOR_END_LEN, _SPEC_RE = fmt.STEP_MARK, fmt.COLOR_END, len(fmt.COLOR_END), fmt.SPEC_RE
# one line of Megatron's argument dump: two spaces, the name, dots up to column 48 (none for a long
# name), a space, the value
_ARGUMENT = re.compile(r"  ([A-Za-z_]\w*) \.* ?(.*?)\r?\n?$")
_TEXT_FIELDS = ("clock", "ms", "config")
_INT_FIELDS = ("rank", "step", "active", "max_requests", "paused", "waiting", "finished", "evicted")
# per version: (the pool, the paused budget, blocks held by active requests, by paused ones)
_BLOCK_FIELDS = {fmt.V019: ("active_total", "paused_total", "active_used", "paused_used"),
                 fmt.MAIN: ("usable", "paused_total", "active_used", "paused_used")}


def _getter(pattern, names: tuple[str, ...]) -> Callable[[tuple], tuple]:  # type: ignore[type-arg,no-untyped-def]
    """``names``' values from ``Match.groups()`` of ``pattern``, in that order (one C call)."""
    return itemgetter(*(pattern.groupindex[n] - 1 for n in names))


class MegatronLogReader:
    """Reads one log file once (module docstring). Iterate ``steps()``; then ``finish()`` checks that
    the file held a step line, and ``stats``, ``ranks``, ``capture``, ``arguments`` and ``emitted``
    say what else it held."""

    def __init__(self, path: str | Path, *, label: str | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        """``progress(bytes read, file size)``: called every ``PROGRESS_EVERY`` lines."""
        self.path = Path(path)
        self.label = label or str(path)
        self.progress = progress
        self.stats = ReadStats()
        self.ranks: dict[int, RankSteps] = {}
        self.capture = CaptureListing()
        self.arguments: dict[str, str] = {}
        self.emitted: dict[str, str] | None = None
        self._bodies = {v: fmt.body_regex(v) for v in fmt.VERSIONS}
        self._order = list(fmt.VERSIONS)
        self._first = self._bodies[self._order[0]]
        self._counts: dict[str, int] = {}  # step lines per version, folded into stats.versions at the end
        self._consumed, self._total = [0], 0
        # getters of ``Match.groups()``: the text fields (the same groups in every version), and per
        # version the integer fields
        self._texts = _getter(self._bodies[fmt.V019], _TEXT_FIELDS)
        self._ints = {v: _getter(self._bodies[v], _INT_FIELDS + _BLOCK_FIELDS[v]) for v in fmt.VERSIONS}
        self._configs: dict[str, tuple] = {}  # type: ignore[type-arg]  # config text -> parse_config
        self._done = False

    # ------------------------------------------------------------------ reading

    def steps(self) -> Iterator[StepLine]:
        """Every step line of the file, in file order."""
        consumed = self._consumed = [0]
        total = self._total = file_size(self.path, self.label, KEY) if self.progress is not None else 0
        stats = self.stats
        stats.gzip = is_gzip(self.path, self.label, KEY)
        mark = fmt.STEP_MARK
        in_arguments = False
        parse = self._line
        progress = self.progress
        for lineno, line in trace_lines(self.path, self.label, KEY, consumed):
            if mark in line:
                step = parse(lineno, line)
                if step is not None:
                    yield step
                continue
            if progress is not None and not lineno % PROGRESS_EVERY:
                progress(consumed[0], total)
            stats.other_lines += 1
            if line.startswith("---"):
                in_arguments = self._arguments_marker(line, in_arguments)
            elif in_arguments:
                self._argument(line)
            elif "[graph " in line:
                self._capture(line)
            elif line.startswith(EMITTED_MARK):
                self._emitted(line)
        stats.versions.update(self._counts)
        stats.step_lines = sum(self._counts.values())
        stats.lines = stats.step_lines + stats.other_lines + stats.malformed + stats.truncated_last
        self._done = True
        if self.progress is not None:
            self.progress(total, total)

    def _line(self, lineno: int, line: str) -> StepLine | None:
        """The step line ``line`` parsed, counted and numbered by rank; None (counted) when it is not
        one. One function, its lookups local: it runs once per step line of a log of millions."""
        if lineno % PROGRESS_EVERY == 0 and self.progress is not None:
            self.progress(self._consumed[0], self._total)
        text = line.rstrip("\r\n")
        start = text.find(_MARK)
        if start:
            text = text[start:]
        if text.endswith(_COLOR_END):
            text = text[:-_COLOR_END_LEN]
        version = self._order[0]
        m = self._first.match(text)
        if m is None:
            for i, other in enumerate(self._order[1:], 1):
                m = self._bodies[other].match(text)
                if m is not None:  # the version that matched is tried first from now on
                    self._order.insert(0, self._order.pop(i))
                    self._first, version = self._bodies[other], other
                    break
        step = None if m is None else self._fields(m, text, lineno, version)
        if step is None:
            stats = self.stats
            if not line.endswith("\n"):  # only the last line can lack its newline: cut off
                stats.truncated_last = True
            else:
                stats.malformed += 1
                if len(stats.malformed_examples) < MAX_EXAMPLES:
                    stats.malformed_examples.append((lineno, text[:160]))
            return None
        counts = self._counts
        counts[version] = counts.get(version, 0) + 1
        rank, number = step.rank, step.step
        r = self.ranks.get(rank)
        if r is None:
            if len(self.ranks) >= MAX_RANKS:
                raise ConfigError(f"{KEY}: {self.label}:{lineno}: more than {MAX_RANKS:,} ranks: not one run's log")
            r = self.ranks[rank] = RankSteps()
        r.add(number)
        return step

    def _fields(self, m: re.Match[str], text: str, lineno: int, version: str) -> StepLine | None:
        g = m.groups()
        clock, ms, config_text = self._texts(g)
        config = self._configs.get(config_text)
        if config is None:
            config = fmt.parse_config(config_text)
            if config is None:
                return None
            if len(self._configs) >= MAX_CACHED_CONFIGS:
                self._configs.clear()
            self._configs[config_text] = config
        kind, previous, real, graph = config
        rank, step, active, max_requests, paused, waiting, finished, evicted, pool, budget, used, paused_used = \
            map(int, self._ints[version](g))
        spec = None
        if m.end() < len(text):
            sm = _SPEC_RE.match(text, m.end())
            if sm is not None:
                spec = (int(sm.group("accepted")), int(sm.group("proposed")), int(sm.group("steps")))
        seconds = float(ms)
        if not seconds >= 0 or seconds == math.inf:  # NaN fails the first test
            return None
        return _make((lineno, version, rank, step, clock, seconds, kind, previous, real, graph, active,
                      max_requests, paused, waiting, finished, evicted, used, paused_used, pool, budget, spec))

    # ------------------------------------------------------------------ the other lines it reads

    def _arguments_marker(self, line: str, inside: bool) -> bool:
        text = line.strip().strip("-").strip()
        if text.startswith("end of "):
            return False
        return text == "arguments" or inside

    def _argument(self, line: str) -> None:
        m = _ARGUMENT.match(line)
        if m is not None and len(self.arguments) < MAX_ARGUMENTS:
            self.arguments[m.group(1)] = m.group(2)

    def _capture(self, line: str) -> None:
        m = fmt.CAPTURE_RE.search(line)
        if m is None:
            return
        shape = fmt.parse_shape(m.group("shape"))
        if shape is not None:
            self.capture.add(_int(m, "index"), _int(m, "count"), shape)

    def _emitted(self, line: str) -> None:
        pairs = (w.partition("=") for w in line[len(EMITTED_MARK):].split())
        self.emitted = {k: v for k, eq, v in pairs if eq}

    # ------------------------------------------------------------------ after reading

    def finish(self) -> None:
        """After ``steps()`` ran out: one ConfigError when the file held no step line."""
        if not self._done:
            raise RuntimeError("MegatronLogReader.finish() before steps() ran out")
        s = self.stats
        if s.step_lines:
            return
        if s.malformed:
            n, text = s.malformed_examples[0]
            raise ConfigError(f"{KEY}: {self.label}: no step line in the format of megatron-core 0.19 or main: "
                              f"{s.malformed:,} line(s) start like one but do not parse, the first at line {n}: "
                              f"{text!r}")
        what = "an empty file" if not s.lines else f"{s.lines:,} line(s), none of them a step line"
        raise ConfigError(f"{KEY}: {self.label}: no step line ('* rank R | step N | ...'): {what}; Megatron "
                          "writes them only with --inference-logging-step-interval N (N > 0) and logging at "
                          "INFO level")

    def sampling(self) -> dict[int, str]:
        """Each rank's sampling in words (``RankSteps.sampling``)."""
        return {rank: r.sampling() for rank, r in sorted(self.ranks.items())}


def read_all(path: str | Path, **kwargs) -> tuple[MegatronLogReader, list[StepLine]]:  # type: ignore[no-untyped-def]
    """Every step line in a list (tests and small logs; the commands stream)."""
    reader = MegatronLogReader(path, **kwargs)
    steps = list(reader.steps())
    reader.finish()
    return reader, steps
