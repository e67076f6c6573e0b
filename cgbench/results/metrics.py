"""Step and request records -> the result document's metrics (their names, units and definitions
are the registry's: ``cgbench/results/names.py``)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cgbench.config.schema import SloConfig
from cgbench.engine.ledger import COMPLETED, FLOAT_COLUMNS, Ledger
from cgbench.engine.request import Request
from cgbench.engine.stats import StepStats
from cgbench.results.percentiles import active_percentiles

# Nearest rank: every percentile is a value that was observed (a real request's latency, a whole
# number of iterations), never a blend of two neighbours; see docs/metrics.md for the difference.
# PERCENTILES is the default set; a run's metrics.percentiles is active_percentiles() (results/percentiles.py)
PERCENTILES = (50, 90, 95, 99)


def summary(values: Any, scale: float = 1.0, digits: int = 6) -> dict[str, float | None]:
    """Count, min, mean, standard deviation, percentiles and max of a numpy array ``values``, each
    value scaled by ``scale`` (elementwise ``v * scale``: the same float as in Python). The mean is
    Python's ``sum`` over the ascending values as Python floats (fed a chunk at a time), so it is the
    float that summing a list of them gives, on any Python version; the standard deviation (of the
    population: over n, not n - 1) sums the squared deviations from that mean the same way."""
    n = len(values)
    if n == 0:
        return empty_summary()
    if isinstance(values, list):  # a small ledger's values (``small_metrics``)
        return _small_summary(sorted([v * scale for v in values]), digits)
    vals = values * scale
    vals.sort()
    if n <= _SMALL:  # the same operations on Python floats: numpy's per-call cost is most of a short one
        return _small_summary(vals.tolist(), digits)
    total = _python_sum(vals)
    mean = total / n
    deviation = vals - mean
    spread = _python_sum(deviation * deviation)
    del deviation
    out: dict[str, float | None] = {"count": n, "min": round(float(vals[0]), digits), "mean": round(mean, digits),
                             "std": round(math.sqrt(spread / n), digits)}
    for q in active_percentiles():
        out[f"p{q}"] = round(float(vals[_nearest_rank(n, q) - 1]), digits)
    out["max"] = round(float(vals[-1]), digits)
    return out


_SMALL = 256  # values summarised as a Python list (a sweep point's few requests)
SMALL_LEDGER = 256  # a ledger of at most this many requests is read as Python lists (``small_metrics``)


def _small_summary(vals: list[float], digits: int) -> dict[str, float | None]:
    """``summary``'s statistics of ascending, scaled ``vals``: each deviation and square is the float
    numpy's elementwise operation gives, and the sums are the same ``sum`` in the same order."""
    n = len(vals)
    mean = sum(vals) / n
    spread = sum([(v - mean) * (v - mean) for v in vals])
    out: dict[str, float | None] = {"count": n, "min": round(vals[0], digits), "mean": round(mean, digits),
                                    "std": round(math.sqrt(spread / n), digits)}
    for q in active_percentiles():
        out[f"p{q}"] = round(vals[_nearest_rank(n, q) - 1], digits)
    out["max"] = round(vals[-1], digits)
    return out


def empty_summary() -> dict[str, float | None]:
    """The summary of no values: a count of 0 and no statistic (null: there is none, not a 0)."""
    out: dict[str, float | None] = {"count": 0, "min": None, "mean": None, "std": None}
    for q in active_percentiles():
        out[f"p{q}"] = None
    out["max"] = None
    return out


def _python_sum(vals: Any) -> float:
    """Python's ``sum`` of a numpy float array's values in order, a chunk at a time."""
    n = len(vals)
    chunks = (vals[i:i + _SUM_CHUNK].tolist() for i in range(0, n, _SUM_CHUNK))
    total: float = sum(itertools.chain.from_iterable(chunks))
    return total


def weighted_summary(items: Sequence[tuple[float, int]], scale: float = 1.0,
                     digits: int = 6) -> dict[str, float | None]:
    """The ``summary`` of (value, count) pairs sorted by value (each value counted ``count`` times),
    scaled after the statistics are taken."""
    if len(items) <= _SMALL:
        return small_weighted_summary([v for v, _ in items], [c for _, c in items], scale, digits)
    import numpy as np

    values = np.fromiter((v for v, _ in items), dtype=np.float64, count=len(items))
    counts = np.fromiter((c for _, c in items), dtype=np.int64, count=len(items))
    return _weighted_arrays(values, counts, scale, digits)


def histogram_summary(histogram: dict[float, int], scale: float = 1.0, digits: int = 6) -> dict[str, float | None]:
    """``weighted_summary`` of a histogram (value -> count; the ITL's record), without building its
    sorted list of pairs: the values and counts go into two numpy arrays, sorted by value once."""
    import numpy as np

    n = len(histogram)
    values = np.fromiter(histogram.keys(), dtype=np.float64, count=n)
    counts = np.fromiter(histogram.values(), dtype=np.int64, count=n)
    order = np.argsort(values, kind="stable")  # a dict's keys are distinct: the order of sorted(items)
    return _weighted_arrays(values[order], counts[order], scale, digits)


def _weighted_arrays(values: Any, counts: Any, scale: float, digits: int) -> dict[str, float | None]:
    """The weighted summary of ascending ``values`` (float64) counted ``counts`` (int64) times, in one
    cumulative pass: the running count gives the total and every nearest rank (a binary search each);
    the mean and the squared deviations are Python's ``sum`` over the elementwise products, in value
    order, so each float is the one the pairwise loop ``sum(v * c for v, c in items)`` and
    ``sum(c * (v - mean) * (v - mean) ...)`` gives (numpy's ``c * d`` converts ``c`` to a float as
    Python does)."""
    import numpy as np

    if len(counts) == 0:
        return empty_summary()
    running = np.cumsum(counts)
    total = int(running[-1])
    if total == 0:
        return empty_summary()
    mean = _chunked_sum(lambda v, c: v * c, values, counts) / total
    spread = _chunked_sum(lambda v, c: (c * (v - mean)) * (v - mean), values, counts)
    out: dict[str, float | None] = {"count": total, "min": round(float(values[0]) * scale, digits),
                             "mean": round(mean * scale, digits),
                             "std": round(math.sqrt(spread / total) * scale, digits)}
    qs = active_percentiles()
    ranks = np.array([_nearest_rank(total, q) for q in qs], dtype=np.int64)
    at = np.searchsorted(running, ranks, side="left")  # the first value whose running count reaches the rank
    for q, i in zip(qs, at.tolist(), strict=True):
        out[f"p{q}"] = round(float(values[i]) * scale, digits)
    out["max"] = round(float(values[-1]) * scale, digits)
    return out


_SUM_CHUNK = 1 << 16  # values turned into Python floats at a time by ``summary``


def small_weighted_summary(values: list[float], counts: list[int], scale: float,
                           digits: int) -> dict[str, float | None]:
    """``_weighted_arrays`` of ascending Python floats and their int counts: the same operations on
    each value (numpy's ``v * c`` converts ``c`` to a float as Python does), the same sums in value
    order, each rank's first value by a binary search of the running count."""
    if not counts:
        return empty_summary()
    running = list(itertools.accumulate(counts))
    total = running[-1]
    if total == 0:
        return empty_summary()
    mean = sum([v * c for v, c in zip(values, counts, strict=True)]) / total
    spread = sum([(c * (v - mean)) * (v - mean) for v, c in zip(values, counts, strict=True)])
    out: dict[str, float | None] = {"count": total, "min": round(values[0] * scale, digits),
                                    "mean": round(mean * scale, digits),
                                    "std": round(math.sqrt(spread / total) * scale, digits)}
    for q in active_percentiles():
        out[f"p{q}"] = round(values[bisect.bisect_left(running, _nearest_rank(total, q))] * scale, digits)
    out["max"] = round(values[-1] * scale, digits)
    return out


def gap_summary(values: Any, counts: Any, scale: float, digits: int) -> dict[str, float | None]:
    """The weighted summary of a histogram's ascending ``values`` (numpy) and ``counts``: as Python
    lists when there are few (the same floats), else in one numpy pass."""
    if len(values) <= _SMALL:
        return small_weighted_summary(values.tolist(), counts.tolist(), scale, digits)
    return _weighted_arrays(values, counts, scale, digits)


def _chunked_sum(term: Any, values: Any, counts: Any) -> float:
    """Python's ``sum`` of ``term(values, counts)`` elementwise, in order, computed a chunk at a time:
    the same float as the whole arrays' (each element is computed alone), without arrays of every
    distinct value's product (a million-request run's inter-token gaps are over a million)."""
    chunks = (term(values[i:i + _SUM_CHUNK], counts[i:i + _SUM_CHUNK]).tolist()
              for i in range(0, len(values), _SUM_CHUNK))
    total: float = sum(itertools.chain.from_iterable(chunks))  # one sum: Python 3.12 compensates across items
    return total


def _nearest_rank(n: int, q: float) -> int:
    """The 1-based nearest rank of percentile ``q`` (in [0, 100]) among ``n`` > 0 ascending values."""
    return min(max(1, math.ceil(q / 100.0 * n)), n)


def _ratio(a: float, b: float) -> float:
    return round(a / b, 6) if b else 0.0


def _column(requests: Ledger, name: str, *, wide: bool = False) -> Any:
    """Field ``name`` of every request as a numpy array, a copy (the ledger's columns stay free to
    grow): int64 when ``wide`` (for arithmetic), else the column's own width (for comparisons)."""
    import numpy as np

    if name in FLOAT_COLUMNS:
        return np.frombuffer(requests.float_column(name), dtype=np.float64).copy()
    col = requests.int_column(name)
    view = np.frombuffer(col, dtype=np.dtype(col.typecode))
    return view.astype(np.int64) if wide else view.copy()


def step_block(stats: StepStats, counters: dict[str, int], outcome: str, diagnosis: str, deferred_requests: int,
               worst_wait: int, worst_id: int | None) -> dict:
    """The metrics' first block: the outcome, the step counts and kinds, the gating counters."""
    return {
        "outcome": outcome,
        "diagnosis": diagnosis,
        "steps": stats.steps,
        "graphed_steps": stats.graphed_steps,
        "eager_steps": stats.eager_steps,
        "eager_step_fraction": _ratio(stats.eager_steps, stats.steps),
        "eager_steps_by_reason": dict(sorted(stats.eager_reasons.items())),
        "eager_token_fraction": _ratio(stats.eager_tokens, stats.tokens),
        "padded_token_fraction": _ratio(stats.padded_tokens, stats.graphed_tokens + stats.padded_tokens),
        "step_kinds": {"decode_only": stats.decode_only_steps, "prefill_only": stats.prefill_only_steps,
                       "mixed": stats.mixed_steps},
        "tokens_computed": stats.tokens,
        "deferral_events": counters["deferral_events"],
        "deferred_requests": deferred_requests,
        "max_cg_wait_iters": worst_wait,
        "max_cg_wait_request": worst_id,
        "snap_splits": counters["snap_splits"],
        "starvation_warnings": counters["starvation_warnings"],
        "eager_admissions": counters["eager_admissions"],
    }


def requests_block(stats: StepStats, total: int, n_done: int, n_failed: int,
                   failed_by_reason: dict[str, int]) -> dict:
    """The ``requests`` block: how many ended how, the eviction and pause events."""
    return {
        "total": total,
        "completed": n_done,
        "failed": n_failed,
        "failed_by_reason": {r: c for r, c in sorted(failed_by_reason.items()) if c},
        "unfinished": total - n_done - n_failed,
        "evicted_events": stats.evicted_events,
        "paused_events": stats.paused_events,
    }


def time_block(stats: StepStats, latencies: dict[str, dict[str, float | None]], makespan_s: float,
               slo: SloConfig, output_tokens: int, prompt_tokens: int, n_good: int, n_done: int,
               total: int) -> dict:
    """The time metrics: the latency summaries (``latencies``, in the block's order), throughputs,
    goodput and busy times."""
    out: dict = {"makespan_s": round(makespan_s, 6)}
    out.update(latencies)
    out.update({
        "output_throughput_tok_s": round(output_tokens / makespan_s, 3) if makespan_s > 0 else 0.0,
        "total_throughput_tok_s": round((output_tokens + prompt_tokens) / makespan_s, 3)
        if makespan_s > 0 else 0.0,
        "request_throughput_req_s": round(n_done / makespan_s, 6) if makespan_s > 0 else 0.0,
        # vLLM bench's rule: no SLO, no goodput (null, never every completed request)
        "goodput_slo": slo.describe(),
        "goodput_req_s": (round(n_good / makespan_s, 6) if makespan_s > 0 else 0.0) if slo.is_set else None,
        "goodput_fraction": _ratio(n_good, total) if slo.is_set else None,
        "graphed_time_s": round(stats.graphed_time_s, 6),
        "eager_time_s": round(stats.eager_time_s, 6),
        "eager_time_fraction": _ratio(stats.eager_time_s, stats.eager_time_s + stats.graphed_time_s),
    })
    return out


def compute_metrics(stats: StepStats, requests: Ledger, *, makespan_s: float,
                    slo: SloConfig, outcome: str, diagnosis: str, counters: dict[str, int]) -> dict:
    """The run's metrics, from the ledger's columns (numpy arrays over every request in one order; a
    per-request list is never built, and each array is dropped once used, to keep the peak low). A
    small ledger's are cheaper as Python lists (``small_metrics.ledger_metrics`` chooses)."""
    fate = _column(requests, "fate")
    done = fate == COMPLETED
    n_done = int(done.sum())
    failed_by_reason = {reason: int((fate == code).sum()) for code, reason in enumerate(requests.fail_reasons, 1)}
    n_failed = int((fate > COMPLETED).sum())
    del fate
    deferred = _column(requests, "deferrals") > 0
    max_cg_wait = _column(requests, "max_cg_wait")
    worst_wait = int(max_cg_wait.max()) if len(max_cg_wait) else 0
    worst_id = int(_column(requests, "id")[max_cg_wait == worst_wait].min()) if worst_wait > 0 else None
    del max_cg_wait
    generated = _column(requests, "generated", wide=True)
    output_tokens = int(generated.sum())
    prompt_tokens = int(_column(requests, "prompt_len", wide=True)[done].sum())
    multi = done & (generated > 1)  # completed with more than one token: they have a time per token

    m = step_block(stats, counters, outcome, diagnosis, int(deferred.sum()), worst_wait, worst_id)
    arrival_step = _column(requests, "arrival_step", wide=True)
    first_admit_step = _column(requests, "first_admit_step", wide=True)
    admitted = first_admit_step >= 0
    qwait = (first_admit_step - arrival_step)[admitted]
    del first_admit_step
    m["max_queue_wait_iters"] = int(qwait.max()) if len(qwait) else 0
    m["queue_wait_iters"] = summary(qwait)
    del qwait
    m["max_queue_len"] = stats.max_queue_len
    first_token_step = _column(requests, "first_token_step", wide=True)
    emitted = first_token_step >= 0
    m["ttft_steps"] = summary((first_token_step - arrival_step + 1)[emitted])
    finish_step = _column(requests, "finish_step", wide=True)
    m["tpot_steps"] = summary((finish_step - first_token_step)[multi] / (generated[multi] - 1))
    del first_token_step
    m["e2e_steps"] = summary((finish_step - arrival_step + 1)[done])
    del finish_step, arrival_step
    m["requests"] = requests_block(stats, len(requests), n_done, n_failed, failed_by_reason)
    m["output_tokens"] = output_tokens
    m.update(_time_metrics(stats, requests, _Masks(done, admitted, emitted, deferred, multi, generated),
                           makespan_s, slo, output_tokens, prompt_tokens))
    return m


@dataclass(slots=True)
class _Masks:
    """Which requests (numpy bool arrays over the ledger's column order) count in which time metric."""

    done: Any
    admitted: Any
    emitted: Any
    deferred: Any
    multi: Any  # completed with more than one token
    generated: Any  # tokens emitted (int64)


def _time_metrics(stats: StepStats, requests: Ledger, k: _Masks, makespan_s: float, slo: SloConfig,
                  output_tokens: int, prompt_tokens: int) -> dict:
    import numpy as np

    ms = 1000.0
    # a completed request is good if it meets every SLO set (one without a token misses a TTFT SLO)
    good = k.done.copy()
    arrival_s = _column(requests, "arrival_s")
    queue_wait = summary((_column(requests, "first_admit_s") - arrival_s)[k.admitted], ms)
    first_token_s = _column(requests, "first_token_s")
    ttft_all = first_token_s - arrival_s  # meaningful where a token was emitted
    if slo.ttft_ms is not None:
        good &= k.emitted & (ttft_all * ms <= slo.ttft_ms)
    ttft = summary(ttft_all[k.emitted], ms)
    ttft_deferred = summary(ttft_all[k.emitted & k.deferred], ms)
    ttft_not_deferred = summary(ttft_all[k.emitted & ~k.deferred], ms)
    del ttft_all
    multi = k.multi
    tpot_multi = (_column(requests, "last_token_s")[multi] - first_token_s[multi]) / (k.generated[multi] - 1)
    del first_token_s
    if slo.tpot_ms is not None:  # the others' time per token is 0.0
        tpot_all = np.zeros(len(arrival_s))
        tpot_all[multi] = tpot_multi
        good &= tpot_all * ms <= slo.tpot_ms
        del tpot_all
    tpot = summary(tpot_multi, ms)
    del tpot_multi
    e2e_all = _column(requests, "finish_s") - arrival_s
    del arrival_s
    if slo.e2e_ms is not None:
        good &= e2e_all * ms <= slo.e2e_ms
    e2e = summary(e2e_all[k.done], ms)
    del e2e_all
    itl = gap_summary(*stats.itl.arrays(), ms, 6)
    n_good, n_done = int(good.sum()), int(k.done.sum())
    latencies = {"queue_wait_ms": queue_wait, "ttft_ms": ttft, "ttft_ms_deferred": ttft_deferred,
                 "ttft_ms_not_deferred": ttft_not_deferred, "tpot_ms": tpot, "itl_ms": itl, "e2e_ms": e2e}
    return time_block(stats, latencies, makespan_s, slo, output_tokens, prompt_tokens, n_good, n_done,
                      len(requests))


def graph_usage_records(stats: StepStats, graphs: Iterable[Iterable[int]]) -> list[dict]:
    """Per captured graph (stored order; a ``BatchShape`` or a ``(T, P, D)`` tuple): hits, real tokens,
    padded tokens."""
    out = []
    for g in graphs:
        t, p, d = g
        usage = stats.graph_usage.get((t, p, d))
        hits, real, padded = (usage[0], usage[1], usage[2]) if usage is not None else (0, 0, 0)
        out.append({"graph": [t, p, d], "hits": hits, "real_tokens": real, "padded_tokens": padded})
    return out


def request_record(r: Request) -> dict:
    rec = {
        "id": r.id, "prompt_tokens": r.prompt_len, "output_tokens": r.output_len, "generated": r.generated,
        "outcome": r.outcome.value, "fail_reason": r.fail_reason or None,
        "arrival_s": round(r.arrival_s, 9), "arrival_step": r.arrival_step,
        "first_admit_step": r.first_admit_step, "first_token_step": r.first_token_step,
        "finish_step": r.finish_step, "first_token_s": round(r.first_token_s, 9),
        "finish_s": round(r.finish_s, 9), "chunks": r.chunks, "deferrals": r.deferrals,
        "max_cg_wait_iters": r.max_cg_wait, "evictions": r.evictions, "pauses": r.pauses,
    }
    return rec
