"""Step statistics: the per-step accumulators the engine updates as it runs (``StepStats``) and
the one way a step, or a stretch of equal steps, is added to them. ``cgbench.results.metrics`` turns
them into the result's metrics."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

# Gap records held before they are folded into the sorted histogram: 16 MiB of buffer at most, so
# about 16 folds for the chat preset's million requests (each a sort of the buffer and a merge).
_GAPS_BUFFERED = 1 << 20


class GapHistogram:
    """The inter-token-latency histogram: inter-token gap (s) -> tokens emitted after that gap.

    A run of a million requests has over a million distinct gaps (the float clock rounds each
    step's ``now + dt - now`` its own way), so a dict keyed by gap grew to ~130 MB, and in the
    compiled build its hash lookups were a third of the time. Here each record (a gap and its
    tokens) is appended to two typed arrays, and every ``_GAPS_BUFFERED`` records they are folded,
    with numpy, into the ascending distinct gaps and their token counts. The counts are integers,
    so the histogram is the same whatever the order and grouping of the records: reading it
    (``arrays``, ``items``) gives what the dict gave, sorted."""

    __slots__ = ("_gaps", "_tokens", "_values", "_counts", "_buffered")

    def __init__(self, buffered: int = _GAPS_BUFFERED) -> None:
        """``buffered``: records held before a fold (a test folds often to check that folding is exact)."""
        self._buffered = buffered
        self._gaps = array("d")
        self._tokens = array("q")
        self._values: Any = None  # folded: the ascending distinct gaps (numpy float64)
        self._counts: Any = None  # their tokens (numpy int64)

    @classmethod
    def of(cls, histogram: dict[float, int]) -> GapHistogram:
        """A histogram holding ``histogram``'s gaps and counts (tests, and a dict-built record)."""
        out = cls()
        for gap, tokens in histogram.items():
            out.add(gap, tokens)
        return out

    def add(self, gap: float, tokens: int) -> None:
        """``tokens`` tokens were emitted ``gap`` seconds after their rows' previous ones."""
        self._gaps.append(gap)
        self._tokens.append(tokens)
        if len(self._gaps) >= self._buffered:
            self._fold()

    def add_each(self, gaps: Iterable[float], tokens: int) -> None:
        """``tokens`` tokens after each of ``gaps``."""
        for gap in gaps:
            self.add(gap, tokens)

    def merge(self, other: GapHistogram) -> None:
        """Add every gap and count of ``other`` (an EP or DP rank's) to this one."""
        for gap, tokens in other.items():
            self.add(gap, tokens)

    def arrays(self) -> tuple[Any, Any]:
        """(the ascending distinct gaps as a numpy float64 array, their tokens as int64)."""
        self._fold()
        if self._values is None:
            import numpy as np

            return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
        return self._values, self._counts

    def items(self) -> list[tuple[float, int]]:
        """(gap, tokens) pairs in ascending gap order: ``sorted(dict.items())`` of the same records."""
        values, counts = self.arrays()
        return list(zip(values.tolist(), counts.tolist(), strict=True))

    def __len__(self) -> int:
        """The number of distinct gaps."""
        return len(self.arrays()[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GapHistogram):
            return NotImplemented
        return self.items() == other.items()

    def _fold(self) -> None:
        """The buffered records sorted and grouped by gap, then merged into the folded histogram (a
        binary search places each new gap: its count is added to an equal one's, or it is inserted),
        so the transient memory is about the buffer's and the histogram's, not their sum sorted again."""
        if not self._gaps:
            return
        import numpy as np

        # the buffers read in place (no copy), and let go once sorted
        buffered_gaps = np.frombuffer(self._gaps, dtype=np.float64)
        buffered_tokens = np.frombuffer(self._tokens, dtype=np.int64)
        self._gaps, self._tokens = array("d"), array("q")
        order = np.argsort(buffered_gaps)
        sorted_gaps = buffered_gaps[order]
        del buffered_gaps
        sorted_tokens = buffered_tokens[order]
        del buffered_tokens, order
        gaps, tokens = _grouped(sorted_gaps, sorted_tokens)
        del sorted_gaps, sorted_tokens
        if self._values is None:
            self._values, self._counts = gaps, tokens
            return
        values, counts = self._values, self._counts
        at = np.searchsorted(values, gaps)
        inside = at < len(values)
        same = np.zeros(len(gaps), dtype=bool)
        same[inside] = values[at[inside]] == gaps[inside]  # 0.0 == -0.0, as dict keys
        counts[at[same]] += tokens[same]  # distinct gaps: distinct places, so no place is added twice
        new = ~same
        places = at[new]
        del at, inside, same
        self._values = np.insert(values, places, gaps[new])
        del values  # the old histogram's gaps go before its counts are copied
        self._counts = np.insert(counts, places, tokens[new])


def _grouped(gaps: Any, tokens: Any) -> tuple[Any, Any]:
    """Ascending ``gaps`` (numpy) with their ``tokens``: the distinct gaps and each one's total."""
    import numpy as np

    first = np.empty(len(gaps), dtype=bool)  # where a new gap value starts
    first[0] = True
    np.not_equal(gaps[1:], gaps[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return gaps[starts], np.add.reduceat(tokens, starts)


@dataclass(slots=True)
class StepStats:
    """Per-step accumulators the engine updates (no per-step allocation)."""

    steps: int = 0
    graphed_steps: int = 0
    eager_steps: int = 0
    eager_reasons: Counter = field(default_factory=Counter)
    tokens: int = 0
    eager_tokens: int = 0
    graphed_tokens: int = 0  # real tokens in graphed steps
    padded_tokens: int = 0  # padding in graphed steps
    graphed_time_s: float = 0.0
    eager_time_s: float = 0.0
    mixed_steps: int = 0  # steps with P > 0 and D > 0
    prefill_only_steps: int = 0
    decode_only_steps: int = 0
    # (T, P, D) -> [hits, real_tokens, padded_tokens]
    graph_usage: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    itl: GapHistogram = field(default_factory=GapHistogram)  # inter-token gap (s) -> tokens emitted after it
    # whole second of the clock (int(t)) -> tokens emitted in it, first tokens included (the peak output rate)
    emitted_by_second: dict[int, int] = field(default_factory=dict)
    batch_requests: dict[int, int] = field(default_factory=dict)  # P + D of a step (its batch) -> steps
    paused_events: int = 0
    evicted_events: int = 0
    max_queue_len: int = field(default=0, metadata={"merge": "max"})  # a system's: its largest rank queue
    decode_rows: int = 0  # Σ D over steps: decode row-steps (an EP rank's dummy decode included)
    prefill_emitted: int = 0  # tokens emitted by final prefill chunks (the rest are decode tokens)


def merged_stats(parts: Iterable[StepStats]) -> StepStats:
    """The step accounting of several engines (an EP group's or a DP system's ranks) as one system's,
    field by field in ``parts``' order, by each field's kind: a count or a busy time adds, a
    histogram (``eager_reasons``, ``itl``) adds per key, ``graph_usage`` adds per graph, a field
    marked ``merge: max`` takes the largest."""
    into = StepStats()
    kinds = [(f.name, f.metadata.get("merge", "add")) for f in fields(StepStats)]
    for s in parts:
        for name, kind in kinds:
            mine, theirs = getattr(into, name), getattr(s, name)
            if kind == "max":
                setattr(into, name, max(mine, theirs))
            elif isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, GapHistogram):
                mine.merge(theirs)
            elif isinstance(mine, dict):
                for key, value in theirs.items():
                    if isinstance(value, list):
                        row = mine.setdefault(key, [0] * len(value))
                        for i, v in enumerate(value):
                            row[i] += v
                    else:
                        mine[key] = mine.get(key, 0) + value
            else:
                setattr(into, name, mine + theirs)
    return into


def record_steps(stats: StepStats, T: int, P: int, D: int, graph: tuple[int, int, int] | None,
                 reason: str | None, durations: Sequence[float], queue_len: int) -> None:
    """Account ``len(durations)`` steps of real shape ``(T, P, D)``, all replaying ``graph`` (or all eager
    for ``reason``). Their durations are added to the busy time one by one, in step order, so a
    stretch recorded at once gives the same floats as its steps recorded one at a time."""
    k = len(durations)
    if k == 0:
        return
    busy = stats.graphed_time_s if graph is not None else stats.eager_time_s
    busy = busy + durations[0] if k == 1 else add_in_order(busy, durations)
    record_step_totals(stats, T, P, D, graph, reason, k, busy, queue_len)


def record_step_totals(stats: StepStats, T: int, P: int, D: int, graph: tuple[int, int, int] | None,
                       reason: str | None, k: int, busy_s: float, queue_len: int) -> None:
    """``record_steps`` for a caller that added the ``k`` steps' durations to the graphed (or eager) busy
    time itself, in step order: ``busy_s`` is that running sum's new value."""
    if k == 0:
        return
    stats.steps += k
    stats.tokens += k * T
    stats.decode_rows += k * D
    batch = stats.batch_requests
    batch[P + D] = batch.get(P + D, 0) + k
    if P == 0:
        stats.decode_only_steps += k
    elif D == 0:
        stats.prefill_only_steps += k
    else:
        stats.mixed_steps += k
    if graph is not None:
        stats.graphed_time_s = busy_s
        pad = graph[0] - T
        stats.graphed_steps += k
        stats.graphed_tokens += k * T
        stats.padded_tokens += k * pad
        usage = stats.graph_usage.get(graph)
        if usage is None:
            stats.graph_usage[graph] = [k, k * T, k * pad]
        else:
            usage[0] += k
            usage[1] += k * T
            usage[2] += k * pad
    else:
        stats.eager_time_s = busy_s
        stats.eager_steps += k
        stats.eager_tokens += k * T
        stats.eager_reasons[reason] += k
    if queue_len > stats.max_queue_len:
        stats.max_queue_len = queue_len


def add_emitted(stats: StepStats, t_s: float, n: int) -> None:
    """``n`` tokens emitted at time ``t_s`` (>= 0): counted in the whole second they fall in."""
    by = stats.emitted_by_second
    second = int(t_s)
    by[second] = by.get(second, 0) + n


def add_in_order(total: float, durations: Sequence[float]) -> float:
    """``total + d0 + d1 + ...`` left to right (a running sum, never reassociated)."""
    if len(durations) > 512:
        import numpy as np

        acc = np.empty(len(durations) + 1)
        acc[0] = total
        acc[1:] = durations
        return float(np.add.accumulate(acc)[-1])  # sequential: the same float as the loop below
    for dt in durations:
        total += dt
    return total
