"""Step and request records -> the result document's metrics (their names, units and definitions
are the registry's: ``cgbench/results/names.py``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cgbench.config.schema import SloConfig
from cgbench.engine.request import Outcome, Request

PERCENTILES = (50, 90, 99)


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
    itl: dict[float, int] = field(default_factory=dict)  # inter-token gap (s) -> tokens emitted after that gap
    paused_events: int = 0
    evicted_events: int = 0
    max_queue_len: int = 0


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in [0, 100])."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * n))
    return float(sorted_values[min(rank, n) - 1])


def weighted_percentile(items: Sequence[tuple[float, int]], q: float) -> float:
    """Nearest-rank percentile over (value, count) pairs sorted by value."""
    total = sum(c for _, c in items)
    if total == 0:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * total))
    seen = 0
    for value, count in items:
        seen += count
        if seen >= rank:
            return float(value)
    return float(items[-1][0])


def summary(values: Iterable[float], scale: float = 1.0, digits: int = 6) -> dict[str, float]:
    vals = sorted(v * scale for v in values)
    if not vals:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    out: dict[str, float] = {"count": len(vals), "mean": round(sum(vals) / len(vals), digits)}
    for q in PERCENTILES:
        out[f"p{q}"] = round(percentile(vals, q), digits)
    out["max"] = round(vals[-1], digits)
    return out


def _ratio(a: float, b: float) -> float:
    return round(a / b, 6) if b else 0.0


def compute_metrics(stats: StepStats, requests: list[Request], *, makespan_s: float,
                    slo: SloConfig, outcome: str, diagnosis: str, counters: dict[str, int]) -> dict:
    done = [r for r in requests if r.outcome == Outcome.COMPLETED]
    failed = [r for r in requests if r.outcome == Outcome.FAILED]
    admitted = [r for r in requests if r.first_admit_step >= 0]
    emitted = [r for r in requests if r.first_token_step >= 0]
    deferred = [r for r in requests if r.deferrals > 0]
    worst = max(requests, key=lambda r: (r.max_cg_wait, -r.id), default=None)
    output_tokens = sum(r.generated for r in requests)
    prompt_tokens = sum(r.prompt_len for r in done)

    m: dict = {
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
        "deferred_requests": len(deferred),
        "max_cg_wait_iters": worst.max_cg_wait if worst else 0,
        "max_cg_wait_request": worst.id if worst is not None and worst.max_cg_wait > 0 else None,
        "snap_splits": counters["snap_splits"],
        "starvation_warnings": counters["starvation_warnings"],
        "eager_admissions": counters["eager_admissions"],
    }
    qwait = [r.first_admit_step - r.arrival_step for r in admitted]
    m["max_queue_wait_iters"] = max(qwait, default=0)
    m["queue_wait_iters"] = summary(qwait)
    m["max_queue_len"] = stats.max_queue_len
    m["ttft_steps"] = summary(r.first_token_step - r.arrival_step + 1 for r in emitted)
    m["tpot_steps"] = summary((r.finish_step - r.first_token_step) / (r.generated - 1)
                              for r in done if r.generated > 1)
    m["e2e_steps"] = summary(r.finish_step - r.arrival_step + 1 for r in done)
    m["requests"] = {
        "total": len(requests),
        "completed": len(done),
        "failed": len(failed),
        "failed_by_reason": dict(sorted(Counter(r.fail_reason for r in failed).items())),
        "unfinished": len(requests) - len(done) - len(failed),
        "evicted_events": stats.evicted_events,
        "paused_events": stats.paused_events,
    }
    m["output_tokens"] = output_tokens
    m.update(_time_metrics(stats, requests, done, emitted, makespan_s, slo,
                           output_tokens, prompt_tokens))
    return m


def _time_metrics(stats: StepStats, requests: list[Request], done: list[Request], emitted: list[Request],
                  makespan_s: float, slo: SloConfig, output_tokens: int,
                  prompt_tokens: int) -> dict:
    ms = 1000.0
    # per-request times as plain lists (no id-keyed dicts: a million-request run keeps its peak low)
    ttft = [r.first_token_s - r.arrival_s for r in emitted]
    ttft_deferred = [t for t, r in zip(ttft, emitted, strict=True) if r.deferrals > 0]
    ttft_not_deferred = [t for t, r in zip(ttft, emitted, strict=True) if r.deferrals <= 0]
    tpot = [(r.last_token_s - r.first_token_s) / (r.generated - 1) for r in done if r.generated > 1]
    e2e = [r.finish_s - r.arrival_s for r in done]
    itl_items = sorted(stats.itl.items())
    itl_count = sum(c for _, c in itl_items)
    itl = {"count": itl_count,
           "mean": round(sum(v * c for v, c in itl_items) / itl_count * ms, 6) if itl_count else 0.0}
    for q in PERCENTILES:
        itl[f"p{q}"] = round(weighted_percentile(itl_items, q) * ms, 6)
    itl["max"] = round(itl_items[-1][0] * ms, 6) if itl_items else 0.0

    def meets(r: Request) -> bool:
        """The request meets every SLO set (a request that never emitted a token misses a TTFT SLO)."""
        if slo.ttft_ms is not None:
            t = r.first_token_s - r.arrival_s if r.first_token_step >= 0 else math.inf
            if not t * ms <= slo.ttft_ms:
                return False
        if slo.tpot_ms is not None:
            t = (r.last_token_s - r.first_token_s) / (r.generated - 1) if r.generated > 1 else 0.0
            if not t * ms <= slo.tpot_ms:
                return False
        return slo.e2e_ms is None or (r.finish_s - r.arrival_s) * ms <= slo.e2e_ms

    good = sum(1 for r in done if meets(r))
    return {
        "makespan_s": round(makespan_s, 6),
        "queue_wait_ms": summary((r.first_admit_s - r.arrival_s for r in requests if r.first_admit_step >= 0), ms),
        "ttft_ms": summary(ttft, ms),
        "ttft_ms_deferred": summary(ttft_deferred, ms),
        "ttft_ms_not_deferred": summary(ttft_not_deferred, ms),
        "tpot_ms": summary(tpot, ms),
        "itl_ms": itl,
        "e2e_ms": summary(e2e, ms),
        "output_throughput_tok_s": round(output_tokens / makespan_s, 3) if makespan_s > 0 else 0.0,
        "total_throughput_tok_s": round((output_tokens + prompt_tokens) / makespan_s, 3)
        if makespan_s > 0 else 0.0,
        "request_throughput_req_s": round(len(done) / makespan_s, 6) if makespan_s > 0 else 0.0,
        "goodput_req_s": round(good / makespan_s, 6) if makespan_s > 0 else 0.0,
        "goodput_fraction": _ratio(good, len(requests)),
        "graphed_time_s": round(stats.graphed_time_s, 6),
        "eager_time_s": round(stats.eager_time_s, 6),
        "eager_time_fraction": _ratio(stats.eager_time_s, stats.eager_time_s + stats.graphed_time_s),
    }


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
