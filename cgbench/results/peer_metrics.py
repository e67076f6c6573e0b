"""The metrics serving benchmarks report (vLLM's ``vllm bench serve``, GuideLLM, AIPerf) that the rest
of the metrics block does not hold: input tokens and throughput, the input and output length of each
request, the requests in flight over time (concurrency) and in each step's batch (occupancy), the peak
concurrency and the peak output rate. Their definitions, next to the peers', are in docs/metrics.md;
names and units in ``cgbench.results.names``.

Every function reads what the run already recorded: the ledger's columns (numpy arrays in one order)
and the step statistics' histograms (``StepStats.batch_requests``, ``StepStats.emitted_by_second``),
so the event-proportional engine and the step-by-step one give the same values."""

from __future__ import annotations

import math
from typing import Any

from cgbench.engine.ledger import COMPLETED, FLOAT_COLUMNS, UNFINISHED, Ledger
from cgbench.engine.stats import StepStats
from cgbench.results.metrics import SMALL_LEDGER, empty_summary, summary, weighted_summary
from cgbench.results.percentiles import active_percentiles
from cgbench.results.small_metrics import columns

DIGITS = 6


def peer_metrics(stats: StepStats, requests: Ledger, *, makespan_s: float) -> dict[str, Any]:
    """The block's step and request metrics (deterministic) and its time metrics (the run's clock).
    Each column is dropped once its metrics are taken (a million requests' columns are 8 MB each); a
    small ledger's are read as Python lists (``SMALL_LEDGER``: the same values)."""
    if len(requests) <= SMALL_LEDGER:
        input_tokens, input_length, output_length, concurrency, peak_requests = _small_ledger(requests, makespan_s)
    else:
        fate = _column(requests, "fate")
        done = fate == COMPLETED
        prompt = _column(requests, "prompt_len", wide=True)[done]
        input_tokens = int(prompt.sum())
        input_length = summary(prompt)
        del prompt
        output_length = summary(_column(requests, "generated", wide=True)[done])
        arrival = _column(requests, "arrival_s")
        finish = _column(requests, "finish_s")
        concurrency = concurrency_summary(arrival, finish, fate != UNFINISHED, makespan_s)
        del fate
        peak_requests = peak_concurrency(arrival[done], finish[done])
    peak = max(stats.emitted_by_second.values()) if stats.emitted_by_second else None
    return {
        "input_tokens": input_tokens,
        "input_length": input_length,
        "output_length": output_length,
        "batch_requests": weighted_summary(sorted(stats.batch_requests.items())),
        "input_throughput_tok_s": round(input_tokens / makespan_s, 3) if makespan_s > 0 else 0.0,
        "peak_output_throughput_tok_s": float(peak) if peak is not None else None,
        "concurrency": concurrency,
        "max_concurrent_requests": peak_requests,
    }


def _small_ledger(requests: Ledger, horizon_s: float) -> tuple[int, dict, dict, dict, int]:
    """(input tokens, input and output length summaries, concurrency summary, peak concurrency) of a
    small ledger, from its columns as lists."""
    fate, prompt, generated, arrival, finish = columns(requests, "fate", "prompt_len", "generated", "arrival_s",
                                                       "finish_s")
    done = [f == COMPLETED for f in fate]
    prompt_done = [p for p, d in zip(prompt, done, strict=True) if d]
    n = len(fate)
    if n == 0 or horizon_s <= 0:
        concurrency = {**empty_summary(), "count": n}
    else:
        levels, spans = level_spans_walked(arrival, finish, [f != UNFINISHED for f in fate], horizon_s)
        concurrency = _time_weighted(levels, spans, n)
    peak = peak_walked([a for a, d in zip(arrival, done, strict=True) if d],
                       [f for f, d in zip(finish, done, strict=True) if d])
    return (sum(prompt_done), summary(prompt_done), summary([g for g, d in zip(generated, done, strict=True) if d]),
            concurrency, peak)


def _events(starts: list[float], ends: list[float]) -> list[tuple[float, int]]:
    """Every start (+1) and end (-1), by time, an end first at the same time."""
    return sorted([(t, 1) for t in starts] + [(t, -1) for t in ends])


def level_spans_walked(arrival: list[float], finish: list[float], ended: list[bool],
                       horizon_s: float) -> tuple[list[int], list[float]]:
    """``level_spans`` of lists, by walking the events in time order."""
    def clipped(t: float) -> float:
        return min(max(t, 0.0), horizon_s)

    ends = [clipped(f if e else horizon_s) for f, e in zip(finish, ended, strict=True)]
    by_level: dict[int, float] = {}
    level, at = 0, 0.0
    for t, delta in [*_events([clipped(a) for a in arrival], ends), (horizon_s, 0)]:
        if t - at > 0:
            by_level[level] = by_level.get(level, 0.0) + (t - at)
        level, at = level + delta, t
    levels = sorted(by_level)
    return levels, [by_level[k] for k in levels]


def peak_walked(starts: list[float], ends: list[float]) -> int:
    """``peak_concurrency`` of lists: the highest level the events reach in time order (0 for none)."""
    level, peak = 0, 0
    for _, delta in _events(starts, ends):
        level += delta
        if level > peak:
            peak = level
    return peak


def _column(requests: Ledger, name: str, *, wide: bool = False) -> Any:
    """The ledger's column ``name`` as a numpy array (a copy): float64, or int64 when ``wide``."""
    import numpy as np

    if name in FLOAT_COLUMNS:
        return np.frombuffer(requests.float_column(name), dtype=np.float64).copy()
    col = requests.int_column(name)
    view = np.frombuffer(col, dtype=np.dtype(col.typecode))
    return view.astype(np.int64) if wide else view.copy()


def peak_concurrency(start: Any, end: Any) -> int:
    """The most intervals ``[start, end)`` that overlap at one time (an end before a start at the same
    time: half-open), 0 for none: vLLM's ``max_concurrent_requests`` over its successful requests.
    The level only rises at a start, where it is the starts up to that time less the ends up to it
    (those at the same time included): two sorted copies and two binary searches, not the merged,
    sorted and summed events (five arrays of twice the requests)."""
    import numpy as np

    if len(start) == 0:
        return 0
    starts = np.sort(start)
    ends = np.sort(end)
    level = np.searchsorted(starts, starts, side="right")
    level -= np.searchsorted(ends, starts, side="right")
    return int(level.max())


def concurrency_summary(arrival: Any, finish: Any, ended: Any, horizon_s: float) -> dict[str, Any]:
    """The requests in flight (arrived, not yet completed or failed) over the run's time ``[0,
    horizon_s]``, as a summary whose statistics weight each level by how long it held: ``mean`` is the
    time-average (Little's law: the requests' time in the system / the time), ``pQ`` the smallest level
    that holds for at least Q % of the time together with the levels below it, ``min``/``max`` the
    lowest and highest level held for any time; ``count`` is the requests that arrived. A request still
    in flight at the end counts until ``horizon_s``. Null statistics without requests or time."""
    n = len(arrival)
    if n == 0 or horizon_s <= 0:
        return {**empty_summary(), "count": n}
    levels, spans = level_spans(arrival, finish, ended, horizon_s)
    return _time_weighted(levels, spans, n)


def level_spans(arrival: Any, finish: Any, ended: Any, horizon_s: float) -> tuple[list[int], list[float]]:
    """Each level of requests in flight that held for some time, ascending, and its time: the spans
    between consecutive events (an arrival, an end; an end first at the same time) added up level by
    level in time order (``bincount`` adds its weights in input order: the floats of that loop; a
    level's spans of no time add 0.0, which changes no sum). A few arrays the size of the events at a
    time: a million requests' events as Python lists were most of a run's peak memory."""
    import numpy as np

    n = len(arrival)
    times = np.concatenate([finish, arrival])  # the ends first: a stable sort keeps them first at a tie
    times[:n][~ended] = horizon_s
    np.clip(times, 0.0, horizon_s, out=times)
    order = np.argsort(times, kind="stable")
    deltas = np.where(order >= n, np.int8(1), np.int8(-1))  # an arrival raises the level, an end lowers it
    del order
    times.sort()  # the same values as the stable order's
    spans = np.empty(2 * n + 1)  # from the start, event to event, to the horizon
    spans[0] = times[0] - 0.0
    np.subtract(times[1:], times[:-1], out=spans[1:-1])
    spans[-1] = horizon_s - times[-1]
    del times
    held = np.empty(2 * n + 1, dtype=np.int64)  # the level during each span
    held[0] = 0
    np.cumsum(deltas, out=held[1:])
    del deltas
    low = int(held.min())  # below 0 only for no time (an end before an arrival at one instant)
    held -= low
    time_at = np.bincount(held, weights=spans)
    present = np.flatnonzero(time_at > 0)
    return (present + low).tolist(), time_at[present].tolist()


def _time_weighted(levels: list[int], spans: list[float], count: int) -> dict[str, Any]:
    """Summary statistics of ascending, distinct integer ``levels`` each held for ``spans`` seconds in
    all (exact sums: fsum)."""
    if not spans:
        return {**empty_summary(), "count": count}
    items = list(zip(levels, spans, strict=True))
    total = math.fsum(spans)
    mean = math.fsum(level * s for level, s in items) / total
    variance = math.fsum(s * (level - mean) ** 2 for level, s in items) / total
    out: dict[str, Any] = {"count": count, "min": float(items[0][0]), "mean": round(mean, DIGITS),
                           "std": round(math.sqrt(variance), DIGITS)}
    for q in active_percentiles():
        out[f"p{q}"] = float(_time_rank(items, total, q))
    out["max"] = float(items[-1][0])
    return out


def _time_rank(items: list[tuple[int, float]], total: float, q: float) -> int:
    """The smallest level whose time, with the lower levels', reaches ``q`` % of ``total`` (nearest rank
    over time; p0 would be the minimum)."""
    need = q / 100.0 * total
    seen = 0.0
    for level, span in items:
        seen += span
        if seen >= need:
            return level
    return items[-1][0]
