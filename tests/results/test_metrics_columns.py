"""The column-based metrics equal an independent oracle: the list-based computation over ``Request``
objects that cgbench used before the ledger (kept here, changed only where a definition changed: no
SLO, no goodput, as vLLM bench leaves it), on random ledgers and on real runs (both engines, tight
KV pools with evictions, failures, unfinished requests, EP), with and without SLOs. Equality is of
the whole metrics dict, so every float must be the same float."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.config.schema import SloConfig
from cgbench.engine.ledger import Ledger
from cgbench.engine.request import Outcome, Request
from cgbench.engine.stats import GapHistogram, StepStats
from cgbench.pipeline import build_engine
from cgbench.results import peer_metrics as peer_metrics_module
from cgbench.results.metrics import compute_metrics, summary
from cgbench.results.small_metrics import small_ledger_metrics
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import examples, make_cfg, scenarios, tight_pools

pytestmark = pytest.mark.slow  # oracle comparisons over random configs

EXAMPLES = examples(200)  # the deep profile raises it

# -- the oracle: the list-based metrics, as they were --------------------------------------------------


def _percentile(sorted_values, q):
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * n))
    return float(sorted_values[min(rank, n) - 1])


def _weighted_percentile(items, q):
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


def _empty():  # since schema_version 2 a summary of no values has null statistics (it was all 0.0)
    return {"count": 0, "min": None, "mean": None, "std": None, "p50": None, "p90": None, "p95": None, "p99": None,
            "max": None}


def _summary(values, scale=1.0, digits=6):
    vals = sorted(v * scale for v in values)
    if not vals:
        return _empty()
    n = len(vals)
    mean = sum(vals) / n
    out = {"count": n, "min": round(vals[0], digits), "mean": round(mean, digits),
           "std": round(math.sqrt(sum((v - mean) * (v - mean) for v in vals) / n), digits)}
    for q in (50, 90, 95, 99):
        out[f"p{q}"] = round(_percentile(vals, q), digits)
    out["max"] = round(vals[-1], digits)
    return out


def _weighted_summary(items, scale, digits=6):
    total = sum(c for _, c in items)
    if not total:
        return _empty()
    mean = sum(v * c for v, c in items) / total
    out = {"count": total, "min": round(items[0][0] * scale, digits), "mean": round(mean * scale, digits),
           "std": round(math.sqrt(sum(c * (v - mean) * (v - mean) for v, c in items) / total) * scale, digits)}
    for q in (50, 90, 95, 99):
        out[f"p{q}"] = round(_weighted_percentile(items, q) * scale, digits)
    out["max"] = round(items[-1][0] * scale, digits)
    return out


def _ratio(a, b):
    return round(a / b, 6) if b else 0.0


def oracle_metrics(stats, requests, *, makespan_s, slo, outcome, diagnosis, counters):
    done = [r for r in requests if r.outcome == Outcome.COMPLETED]
    failed = [r for r in requests if r.outcome == Outcome.FAILED]
    admitted = [r for r in requests if r.first_admit_step >= 0]
    emitted = [r for r in requests if r.first_token_step >= 0]
    deferred = [r for r in requests if r.deferrals > 0]
    worst = max(requests, key=lambda r: (r.max_cg_wait, -r.id), default=None)
    output_tokens = sum(r.generated for r in requests)
    prompt_tokens = sum(r.prompt_len for r in done)
    m = {
        "outcome": outcome, "diagnosis": diagnosis, "steps": stats.steps, "graphed_steps": stats.graphed_steps,
        "eager_steps": stats.eager_steps, "eager_step_fraction": _ratio(stats.eager_steps, stats.steps),
        "eager_steps_by_reason": dict(sorted(stats.eager_reasons.items())),
        "eager_token_fraction": _ratio(stats.eager_tokens, stats.tokens),
        "padded_token_fraction": _ratio(stats.padded_tokens, stats.graphed_tokens + stats.padded_tokens),
        "step_kinds": {"decode_only": stats.decode_only_steps, "prefill_only": stats.prefill_only_steps,
                       "mixed": stats.mixed_steps},
        "tokens_computed": stats.tokens, "deferral_events": counters["deferral_events"],
        "deferred_requests": len(deferred), "max_cg_wait_iters": worst.max_cg_wait if worst else 0,
        "max_cg_wait_request": worst.id if worst is not None and worst.max_cg_wait > 0 else None,
        "snap_splits": counters["snap_splits"], "starvation_warnings": counters["starvation_warnings"],
        "eager_admissions": counters["eager_admissions"],
    }
    qwait = [r.first_admit_step - r.arrival_step for r in admitted]
    m["max_queue_wait_iters"] = max(qwait, default=0)
    m["queue_wait_iters"] = _summary(qwait)
    m["max_queue_len"] = stats.max_queue_len
    m["ttft_steps"] = _summary(r.first_token_step - r.arrival_step + 1 for r in emitted)
    m["tpot_steps"] = _summary((r.finish_step - r.first_token_step) / (r.generated - 1)
                               for r in done if r.generated > 1)
    m["e2e_steps"] = _summary(r.finish_step - r.arrival_step + 1 for r in done)
    m["requests"] = {
        "total": len(requests), "completed": len(done), "failed": len(failed),
        "failed_by_reason": dict(sorted(Counter(r.fail_reason for r in failed).items())),
        "unfinished": len(requests) - len(done) - len(failed),
        "evicted_events": stats.evicted_events, "paused_events": stats.paused_events,
    }
    m["output_tokens"] = output_tokens
    ms = 1000.0
    ttft = [r.first_token_s - r.arrival_s for r in emitted]
    ttft_deferred = [t for t, r in zip(ttft, emitted, strict=True) if r.deferrals > 0]
    ttft_not_deferred = [t for t, r in zip(ttft, emitted, strict=True) if r.deferrals <= 0]
    tpot = [(r.last_token_s - r.first_token_s) / (r.generated - 1) for r in done if r.generated > 1]
    e2e = [r.finish_s - r.arrival_s for r in done]
    itl_items = sorted(stats.itl.items())
    itl = _weighted_summary(itl_items, ms)

    def meets(r):
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
    has_slo = any(v is not None for v in (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms))
    m.update({
        "makespan_s": round(makespan_s, 6),
        "queue_wait_ms": _summary((r.first_admit_s - r.arrival_s for r in requests if r.first_admit_step >= 0), ms),
        "ttft_ms": _summary(ttft, ms), "ttft_ms_deferred": _summary(ttft_deferred, ms),
        "ttft_ms_not_deferred": _summary(ttft_not_deferred, ms), "tpot_ms": _summary(tpot, ms), "itl_ms": itl,
        "e2e_ms": _summary(e2e, ms),
        "output_throughput_tok_s": round(output_tokens / makespan_s, 3) if makespan_s > 0 else 0.0,
        "total_throughput_tok_s": round((output_tokens + prompt_tokens) / makespan_s, 3) if makespan_s > 0 else 0.0,
        "request_throughput_req_s": round(len(done) / makespan_s, 6) if makespan_s > 0 else 0.0,
        # no bound set: no goodput (vLLM bench's request_goodput is None then), and the SLO says so
        "goodput_slo": " ".join(f"{k}<={v:g}" for k, v in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms),
                                                            ("e2e_ms", slo.e2e_ms)) if v is not None) or "none",
        "goodput_req_s": (round(good / makespan_s, 6) if makespan_s > 0 else 0.0) if has_slo else None,
        "goodput_fraction": _ratio(good, len(requests)) if has_slo else None,
        "graphed_time_s": round(stats.graphed_time_s, 6), "eager_time_s": round(stats.eager_time_s, 6),
        "eager_time_fraction": _ratio(stats.eager_time_s, stats.eager_time_s + stats.graphed_time_s),
    })
    return m


# -- the comparisons -----------------------------------------------------------------------------------

SLO_MS = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 5.0, 50.0, 1e9]), st.floats(0, 500, allow_nan=False))
slos = st.builds(SloConfig, ttft_ms=SLO_MS, tpot_ms=SLO_MS, e2e_ms=SLO_MS)
COUNTERS = {"deferral_events": 3, "snap_splits": 1, "starvation_warnings": 0, "eager_admissions": 2}


def _both(stats, ledger, slo, makespan_s=1.25, outcome="completed"):
    """(the metrics, the oracle's), after checking that the list path (``small_ledger_metrics``) gives
    what the numpy path gives for the same ledger, whatever its size."""
    kw = dict(makespan_s=makespan_s, slo=slo, outcome=outcome, diagnosis="", counters=COUNTERS)
    new = compute_metrics(stats, ledger, **kw)
    assert small_ledger_metrics(stats, ledger, **kw) == new
    return new, oracle_metrics(stats, list(ledger), **kw)


STEP = st.integers(-1, 10**7)
TIME = st.one_of(st.just(-1.0), st.floats(0, 1e4, allow_nan=False), st.sampled_from([0.1, 0.2, 0.3, 1 / 3]))


@st.composite
def random_requests(draw, rid):
    outcome = draw(st.sampled_from(list(Outcome)))
    return Request(id=rid, prompt_len=draw(st.integers(0, 10**6)), output_len=draw(st.integers(0, 10**4)),
                   arrival_s=draw(TIME), arrival_step=draw(STEP), generated=draw(st.integers(0, 5000)),
                   deferrals=draw(st.integers(0, 3)), max_cg_wait=draw(st.integers(0, 3)),
                   first_admit_step=draw(STEP), first_admit_s=draw(TIME), first_token_step=draw(STEP),
                   first_token_s=draw(TIME), last_token_s=draw(TIME), finish_step=draw(STEP),
                   finish_s=draw(TIME), outcome=outcome,
                   fail_reason=draw(st.sampled_from(["a", "b", "kv_block_overflow"]))
                   if outcome == Outcome.FAILED else "")


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), slos)
def test_random_ledgers(data, slo):
    n = data.draw(st.integers(0, 40))
    ids = data.draw(st.permutations(range(n)))  # ids not in arrival order
    ledger = Ledger()
    reqs = [data.draw(random_requests(i)) for i in ids]
    for r in reqs:
        ledger.arrive(r)
    for r in data.draw(st.permutations([r for r in reqs if r.outcome in (Outcome.COMPLETED, Outcome.FAILED)])):
        ledger.retire(r)
    stats = StepStats(steps=10, graphed_steps=7, eager_steps=3, tokens=100, graphed_tokens=60, padded_tokens=4,
                      graphed_time_s=0.3, eager_time_s=0.1,
                      itl=GapHistogram.of(data.draw(st.dictionaries(st.floats(0, 1, allow_nan=False),
                                                                    st.integers(1, 9)))))
    new, old = _both(stats, ledger, slo, makespan_s=data.draw(st.sampled_from([0.0, 0.7, 1e3])))
    assert new == old


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_small_ledgers_peer_block_is_the_numpy_paths(data):
    """The peers' block (lengths, concurrency over time, peak concurrency) of a random small ledger: its
    Python lists give what numpy's arrays give, finishes before arrivals and unfinished requests included."""
    n = data.draw(st.integers(0, 40))
    ledger = Ledger()
    reqs = [data.draw(random_requests(i)) for i in range(n)]
    for r in reqs:
        ledger.arrive(r)
    for r in reqs:
        if r.outcome in (Outcome.COMPLETED, Outcome.FAILED):
            ledger.retire(r)
    stats = StepStats(batch_requests={1: 3, 4: 2})
    makespan_s = data.draw(st.sampled_from([0.0, 0.7, 1e3]))
    small = peer_metrics_module.peer_metrics(stats, ledger, makespan_s=makespan_s)
    kept = peer_metrics_module.SMALL_LEDGER
    peer_metrics_module.SMALL_LEDGER = -1
    try:
        assert peer_metrics_module.peer_metrics(stats, ledger, makespan_s=makespan_s) == small
    finally:
        peer_metrics_module.SMALL_LEDGER = kept


@settings(max_examples=EXAMPLES)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.integers(-10**6, 10**6)), max_size=3000),
       st.sampled_from([1.0, 1000.0, 0.001, 3.0]))
def test_summary_unrounded(values, scale):
    """At 20 digits ``round`` changes nothing: the mean must be the very float of the list's ``sum``
    (a pairwise or reordered sum differs in its last bits)."""
    import numpy as np

    dtype = np.int64 if all(isinstance(v, int) for v in values) else np.float64
    assert summary(np.array(values, dtype=dtype), scale, 20) == _summary([dtype(v).item() for v in values], scale, 20)


def test_summary_of_a_million_values():
    import numpy as np

    values = np.random.default_rng(7).lognormal(0.0, 2.0, 1_000_000)
    assert summary(values, 1000.0, 20) == _summary(values.tolist(), 1000.0, 20)


def _run(cfg, reqs):
    eng = build_engine(cfg, stream=ArrivalStream(reqs))
    return eng.run()


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios(), tight_pools()), st.booleans(), slos)
def test_engine_runs(scenario, oracle, slo):
    """Failed, evicted, unfinished (stalled or crashed runs) requests included."""
    cfg, reqs = scenario
    state = _run(replace(cfg, engine=replace(cfg.engine, oracle=oracle)), reqs)
    new, old = _both(state.stats, state.requests, slo, state.now_s, state.outcome)
    assert new == old


@settings(max_examples=max(20, EXAMPLES // 5), suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 4]), st.sampled_from(["nccl", "nvls"]), st.integers(1, 30), st.integers(0, 2**16), slos)
def test_ep_runs(k, dispatcher, n, seed, slo):
    """The EP engine's merged ledger (every rank's requests by id)."""
    cfg = make_cfg(kind="hybrid", max_requests=8, max_tokens=256, max_sequence_length=128, block_size=16)
    cfg = replace(cfg, engine=replace(cfg.engine, ep_size=k, moe_dispatcher=dispatcher))
    reqs = [RequestSpec(i, (seed % (i + 3)) * 0.002, 1 + (seed * (i + 1)) % 140, 1 + (seed >> (i % 9)) % 40)
            for i in range(n)]  # some prompts longer than max_sequence_length: failures
    state = _run(cfg, reqs)
    new, old = _both(state.stats, state.requests, slo, state.now_s, state.outcome)
    assert new == old
