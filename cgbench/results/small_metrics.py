"""The metrics of a small ledger (at most ``SMALL_LEDGER`` requests: a sweep point, a quick run) from its
columns as Python lists.

``compute_metrics`` reads whole columns as numpy arrays, which is what a million requests need; on eight
requests numpy's cost per call was most of a point's metrics (about 0.6 ms of a sweep point's 2.5). Here
each column is one ``tolist`` and every quantity the same operation on Python numbers: IEEE floats and
exact integers give the same value numpy's float64 and int64 elementwise operations give (an int64
divided by an int64 is both converted to a float first, as Python does below 2**53), the summaries
are ``summary``'s on lists, and the blocks are assembled by the same functions.
tests/results/test_metrics_columns.py holds the two paths equal (and equal to an oracle) on random
ledgers and on engine runs, test_peer_metrics.py the peers' walks."""

from __future__ import annotations

from typing import Any

from cgbench.config.schema import SloConfig
from cgbench.engine.ledger import COMPLETED, FLOAT_COLUMNS, Ledger
from cgbench.engine.stats import StepStats
from cgbench.results.metrics import (
    SMALL_LEDGER,
    compute_metrics,
    gap_summary,
    requests_block,
    step_block,
    summary,
    time_block,
)


def columns(requests: Ledger, *names: str) -> list[list[Any]]:
    """The ledger's columns ``names`` as lists, in the ledger's one column order."""
    return [(requests.float_column(n) if n in FLOAT_COLUMNS else requests.int_column(n)).tolist() for n in names]


def ledger_metrics(stats: StepStats, requests: Ledger, *, makespan_s: float, slo: SloConfig, outcome: str,
                   diagnosis: str, counters: dict[str, int]) -> dict:
    """The run's metrics block from its ledger: ``small_ledger_metrics`` for at most ``SMALL_LEDGER``
    requests, else ``compute_metrics`` (numpy's arrays). The same values either way."""
    metrics = small_ledger_metrics if len(requests) <= SMALL_LEDGER else compute_metrics
    return metrics(stats, requests, makespan_s=makespan_s, slo=slo, outcome=outcome, diagnosis=diagnosis,
                   counters=counters)


def small_ledger_metrics(stats: StepStats, requests: Ledger, *, makespan_s: float, slo: SloConfig, outcome: str,
                         diagnosis: str, counters: dict[str, int]) -> dict:
    """``compute_metrics`` of a small ledger (module docstring)."""
    (fate, deferrals, max_cg_wait, ids, generated, prompt, arrival_step, first_admit_step, first_token_step,
     finish_step) = columns(requests, "fate", "deferrals", "max_cg_wait", "id", "generated", "prompt_len",
                            "arrival_step", "first_admit_step", "first_token_step", "finish_step")
    total = len(fate)
    done = [f == COMPLETED for f in fate]
    n_done = sum(done)
    failed_by_reason = {reason: fate.count(code) for code, reason in enumerate(requests.fail_reasons, 1)}
    n_failed = sum(1 for f in fate if f > COMPLETED)
    deferred = [d > 0 for d in deferrals]
    worst_wait = max(max_cg_wait) if total else 0
    worst_id = min(i for i, w in zip(ids, max_cg_wait, strict=True) if w == worst_wait) if worst_wait > 0 else None
    output_tokens = sum(generated)
    prompt_tokens = sum(p for p, d in zip(prompt, done, strict=True) if d)
    multi = [d and g > 1 for d, g in zip(done, generated, strict=True)]  # they have a time per token
    admitted = [s >= 0 for s in first_admit_step]
    emitted = [s >= 0 for s in first_token_step]

    m = step_block(stats, counters, outcome, diagnosis, sum(deferred), worst_wait, worst_id)
    qwait = [f - a for f, a, ok in zip(first_admit_step, arrival_step, admitted, strict=True) if ok]
    m["max_queue_wait_iters"] = max(qwait) if qwait else 0
    m["queue_wait_iters"] = summary(qwait)
    m["max_queue_len"] = stats.max_queue_len
    m["ttft_steps"] = summary([t - a + 1 for t, a, ok in zip(first_token_step, arrival_step, emitted, strict=True)
                               if ok])
    m["tpot_steps"] = summary([(f - t) / (g - 1) for f, t, g, ok in
                               zip(finish_step, first_token_step, generated, multi, strict=True) if ok])
    m["e2e_steps"] = summary([f - a + 1 for f, a, ok in zip(finish_step, arrival_step, done, strict=True) if ok])
    m["requests"] = requests_block(stats, total, n_done, n_failed, failed_by_reason)
    m["output_tokens"] = output_tokens

    ms = 1000.0
    arrival_s, first_admit_s, first_token_s, last_token_s, finish_s = columns(
        requests, "arrival_s", "first_admit_s", "first_token_s", "last_token_s", "finish_s")
    good = list(done)  # a completed request is good if it meets every SLO set
    queue_wait = summary([f - a for f, a, ok in zip(first_admit_s, arrival_s, admitted, strict=True) if ok], ms)
    ttft_all = [t - a for t, a in zip(first_token_s, arrival_s, strict=True)]
    if slo.ttft_ms is not None:
        bound = slo.ttft_ms
        good = [g and e and t * ms <= bound for g, e, t in zip(good, emitted, ttft_all, strict=True)]
    ttft = summary([t for t, e in zip(ttft_all, emitted, strict=True) if e], ms)
    ttft_deferred = summary([t for t, e, d in zip(ttft_all, emitted, deferred, strict=True) if e and d], ms)
    ttft_not_deferred = summary([t for t, e, d in zip(ttft_all, emitted, deferred, strict=True) if e and not d], ms)
    tpot_all = [(last - first) / (g - 1) if ok else 0.0
                for last, first, g, ok in zip(last_token_s, first_token_s, generated, multi, strict=True)]
    if slo.tpot_ms is not None:  # the others' time per token is 0.0
        bound = slo.tpot_ms
        good = [g and t * ms <= bound for g, t in zip(good, tpot_all, strict=True)]
    tpot = summary([t for t, ok in zip(tpot_all, multi, strict=True) if ok], ms)
    e2e_all = [f - a for f, a in zip(finish_s, arrival_s, strict=True)]
    if slo.e2e_ms is not None:
        bound = slo.e2e_ms
        good = [g and e * ms <= bound for g, e in zip(good, e2e_all, strict=True)]
    e2e = summary([e for e, d in zip(e2e_all, done, strict=True) if d], ms)
    itl = gap_summary(*stats.itl.arrays(), ms, 6)
    latencies = {"queue_wait_ms": queue_wait, "ttft_ms": ttft, "ttft_ms_deferred": ttft_deferred,
                 "ttft_ms_not_deferred": ttft_not_deferred, "tpot_ms": tpot, "itl_ms": itl, "e2e_ms": e2e}
    m.update(time_block(stats, latencies, makespan_s, slo, output_tokens, prompt_tokens, sum(good), n_done, total))
    return m
