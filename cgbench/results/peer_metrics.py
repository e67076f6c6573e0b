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
from cgbench.results.metrics import empty_summary, summary, weighted_summary
from cgbench.results.percentiles import active_percentiles

DIGITS = 6


def peer_metrics(stats: StepStats, requests: Ledger, *, makespan_s: float) -> dict[str, Any]:
    """The block's step and request metrics (deterministic) and its time metrics (the run's clock)."""
    fate = _column(requests, "fate")
    done = fate == COMPLETED
    prompt = _column(requests, "prompt_len", wide=True)
    generated = _column(requests, "generated", wide=True)
    input_tokens = int(prompt[done].sum())
    arrival = _column(requests, "arrival_s")
    finish = _column(requests, "finish_s")
    peak = max(stats.emitted_by_second.values()) if stats.emitted_by_second else None
    return {
        "input_tokens": input_tokens,
        "input_length": summary(prompt[done]),
        "output_length": summary(generated[done]),
        "batch_requests": weighted_summary(sorted(stats.batch_requests.items())),
        "input_throughput_tok_s": round(input_tokens / makespan_s, 3) if makespan_s > 0 else 0.0,
        "peak_output_throughput_tok_s": float(peak) if peak is not None else None,
        "concurrency": concurrency_summary(arrival, finish, fate != UNFINISHED, makespan_s),
        "max_concurrent_requests": peak_concurrency(arrival[done], finish[done]),
    }


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
    time: half-open), 0 for none: vLLM's ``max_concurrent_requests`` over its successful requests."""
    import numpy as np

    if len(start) == 0:
        return 0
    times = np.concatenate([start, end])
    deltas = np.concatenate([np.ones(len(start), dtype=np.int64), -np.ones(len(end), dtype=np.int64)])
    order = np.lexsort((deltas, times))  # by time, then -1 (an end) before +1 (a start)
    return int(np.cumsum(deltas[order]).max())


def concurrency_summary(arrival: Any, finish: Any, ended: Any, horizon_s: float) -> dict[str, Any]:
    """The requests in flight (arrived, not yet completed or failed) over the run's time ``[0,
    horizon_s]``, as a summary whose statistics weight each level by how long it held: ``mean`` is the
    time-average (Little's law: the requests' time in the system / the time), ``pQ`` the smallest level
    that holds for at least Q % of the time together with the levels below it, ``min``/``max`` the
    lowest and highest level held for any time; ``count`` is the requests that arrived. A request still
    in flight at the end counts until ``horizon_s``. Null statistics without requests or time."""
    import numpy as np

    n = len(arrival)
    if n == 0 or horizon_s <= 0:
        return {**empty_summary(), "count": n}
    end = np.where(ended, finish, horizon_s)
    times = np.clip(np.concatenate([arrival, end]), 0.0, horizon_s)
    deltas = np.concatenate([np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)])
    order = np.lexsort((deltas, times))
    times, levels = times[order], np.cumsum(deltas[order])
    bounds = np.concatenate([[0.0], times, [horizon_s]])
    held = np.concatenate([[0], levels])  # the level from bounds[i] to bounds[i + 1]
    spans = np.diff(bounds)
    keep = spans > 0
    return _time_weighted(held[keep].tolist(), spans[keep].tolist(), n)


def _time_weighted(levels: list[int], spans: list[float], count: int) -> dict[str, Any]:
    """Summary statistics of integer ``levels`` each held for ``spans`` seconds (exact sums: fsum)."""
    if not spans:
        return {**empty_summary(), "count": count}
    by_level: dict[int, float] = {}
    for level, span in zip(levels, spans, strict=True):
        by_level[level] = by_level.get(level, 0.0) + span
    items = sorted(by_level.items())
    total = math.fsum(s for _, s in items)
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
