"""The peers' metric set (cgbench.results.peer_metrics): worked examples of the concurrency sweeps,
and each metric of a run against an oracle built from the run's own per-step and per-request
records (``--trace``, ``--requests``); ``metrics.percentiles``; null statistics of empty summaries."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.config.compose import load_config
from cgbench.config.schema import ConfigError
from cgbench.pipeline import run_point
from cgbench.results.metrics import summary
from cgbench.results.peer_metrics import (
    concurrency_summary,
    level_spans,
    level_spans_walked,
    peak_concurrency,
    peak_walked,
)
from cgbench.results.percentiles import active_percentiles, percentiles_in_effect, summary_fields


def test_peak_concurrency_is_half_open_like_vllms_sweep():
    # [0, 2) and [2, 3) touch but never overlap; [1, 4) overlaps both
    assert peak_concurrency(np.array([0.0, 2.0, 1.0]), np.array([2.0, 3.0, 4.0])) == 2
    assert peak_concurrency(np.array([0.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0])) == 3
    assert peak_concurrency(np.array([]), np.array([])) == 0


def test_concurrency_weights_each_level_by_its_time():
    # A in [0, 4), B in [1, 2), C arrives at 3 and is still running at the horizon 5:
    # level 1 for [0,1) [2,3) [4,5) = 3 s, level 2 for [1,2) [3,4) = 2 s
    s = concurrency_summary(np.array([0.0, 1.0, 3.0]), np.array([4.0, 2.0, -1.0]),
                            np.array([True, True, False]), 5.0)
    assert s["count"] == 3 and s["min"] == 1.0 and s["max"] == 2.0
    assert s["mean"] == pytest.approx((3 * 1 + 2 * 2) / 5)  # Little's law: 4 + 1 + 2 request-seconds / 5 s
    assert s["std"] == pytest.approx(math.sqrt((3 * (1 - 1.4) ** 2 + 2 * (2 - 1.4) ** 2) / 5))
    assert (s["p50"], s["p90"]) == (1.0, 2.0)  # level 1 holds 60 % of the time


def _level_time_loop(arrival, finish, ended, horizon_s) -> dict[int, float]:
    """The oracle: the events sorted by time (an end first at the same time), walked one by one in
    Python, each span added to the level that held during it, in time order."""
    events = sorted([(min(max(a, 0.0), horizon_s), 1) for a in arrival.tolist()]
                    + [(min(max(f if e else horizon_s, 0.0), horizon_s), -1)
                       for f, e in zip(finish.tolist(), ended.tolist(), strict=True)])
    by_level: dict[int, float] = {}
    level, at = 0, 0.0
    for t, delta in [*events, (horizon_s, 0)]:
        span = t - at
        if span > 0:
            by_level[level] = by_level.get(level, 0.0) + span
        level, at = level + delta, t
    return by_level


TIMES = st.sampled_from([0.0, 0.25, 1.0, 1.5, 3.0, 7.25]) | st.floats(0.0, 12.0, allow_subnormal=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(TIMES, TIMES, st.booleans()), min_size=1, max_size=40),
       st.sampled_from([0.5, 3.0, 7.25, 10.0, 1e3]))
def test_level_times_are_the_event_loops_floats(requests, horizon_s):
    """The arrays' level-by-level times are the floats the one-by-one walk adds up (ties, requests
    ending at their arrival, ends past the horizon, requests still in flight)."""
    arrival = np.array([a for a, _, _ in requests])
    finish = np.array([a + d for a, d, _ in requests])
    ended = np.array([e for _, _, e in requests])
    levels, spans = level_spans(arrival, finish, ended, horizon_s)
    assert dict(zip(levels, spans, strict=True)) == _level_time_loop(arrival, finish, ended, horizon_s)
    assert levels == sorted(levels)
    assert level_spans_walked(arrival.tolist(), finish.tolist(), ended.tolist(), horizon_s) == (levels, spans)


def _peak_by_events(start, end) -> int:
    """The oracle: every start and end as an event, sorted by time with ends first at a tie, the
    running level's maximum (0 for none)."""
    level = peak = 0
    for _, delta in sorted([(t, 1) for t in start] + [(t, -1) for t in end]):
        level += delta
        peak = max(peak, level)
    return peak


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(TIMES, TIMES), max_size=40))
def test_the_peak_is_the_event_walks(intervals):
    start = np.array([a for a, _ in intervals])
    end = np.array([a + d for a, d in intervals])
    assert peak_concurrency(start, end) == _peak_by_events(start.tolist(), end.tolist())
    assert peak_walked(start.tolist(), end.tolist()) == peak_concurrency(start, end)


def test_no_requests_or_no_time_is_a_summary_of_nothing():
    for s in (concurrency_summary(np.array([]), np.array([]), np.array([], dtype=bool), 1.0),
              concurrency_summary(np.array([0.0]), np.array([0.0]), np.array([True]), 0.0)):
        assert s["mean"] is None and s["p99"] is None and s["max"] is None


@pytest.fixture(scope="module")
def chunked() -> dict:
    ovr = ["workload=chat", "workload.num_requests=60", "engine=chunked"]
    return run_point(load_config(ovr), ovr, trace=True, requests=True)


def test_tokens_per_second_and_batches_from_the_step_records(chunked):
    """The oracle: a step emits a token for each decode row and each final prefill chunk, at its end."""
    m, per_second, batches = chunked["metrics"], Counter(), Counter()
    for s in chunked["steps"]:
        _, P, D = s["real"]
        per_second[int(s["t_s"] + s["dt_s"])] += D + sum(1 for a in s["admitted"] or [] if a[2])
        batches[P + D] += 1
    assert sum(per_second.values()) == m["output_tokens"]
    assert m["peak_output_throughput_tok_s"] == max(per_second.values())
    expanded = np.array([size for size, n in batches.items() for _ in range(n)])
    assert m["batch_requests"] == summary(expanded)


def test_lengths_input_tokens_and_peak_concurrency_from_the_request_records(chunked):
    m = chunked["metrics"]
    done = [r for r in chunked["requests"] if r["outcome"] == "completed"]
    assert m["input_tokens"] == sum(r["prompt_tokens"] for r in done)
    assert m["input_length"] == summary(np.array([r["prompt_tokens"] for r in done]))
    assert m["output_length"] == summary(np.array([r["generated"] for r in done]))
    assert m["input_throughput_tok_s"] == round(m["input_tokens"] / m["makespan_s"], 3)
    # brute force: the most requests whose [arrival, finish) holds a given start time
    starts = [r["arrival_s"] for r in done]
    brute = max(sum(1 for r in done if r["arrival_s"] <= t < r["finish_s"]) for t in starts)
    assert m["max_concurrent_requests"] == brute
    assert m["concurrency"]["max"] >= brute and m["concurrency"]["count"] == len(chunked["requests"])


def test_the_step_engine_and_the_event_proportional_one_agree():
    ovr = ["workload=chat", "workload.num_requests=40"]
    fast = run_point(load_config(ovr), ovr)["metrics"]
    step = run_point(load_config([*ovr, "engine.oracle=true"]), ovr)["metrics"]
    for name in ("peak_output_throughput_tok_s", "batch_requests", "concurrency", "max_concurrent_requests"):
        assert fast[name] == step[name], name


def test_metrics_percentiles_adds_p25_and_p75_in_order():
    ovr = ["workload=small", "metrics.percentiles=[25,50,75,90,95,99]"]
    doc = run_point(load_config(ovr), ovr, requests=True)
    ttft = doc["metrics"]["ttft_ms"]
    assert list(ttft) == list(summary_fields((25, 50, 75, 90, 95, 99)))
    values = sorted((r["first_token_s"] - r["arrival_s"]) * 1000 for r in doc["requests"])
    for q in (25, 75):  # nearest rank over the per-request values
        assert ttft[f"p{q}"] == pytest.approx(values[math.ceil(q / 100 * len(values)) - 1], abs=1e-5)
    assert list(doc["metrics"]["concurrency"]) == list(ttft)
    assert active_percentiles() == (50, 90, 95, 99)  # only while the run's metrics are computed


@pytest.mark.parametrize(("value", "words"), [
    ("[33,50,90,95,99]", "33 is not one of 1, 5, 10, 25, 50, 75, 90, 95, 99"),
    ("[25,50,90,95]", "must include 50, 90, 95, 99"),
    ("[50,50,90,95,99]", "lists a percentile twice"),
])
def test_a_bad_percentile_set_is_one_line(value, words):
    with pytest.raises(ConfigError, match="metrics.percentiles") as e:
        load_config([f"metrics.percentiles={value}"])
    assert words in str(e.value)


def test_a_summary_of_nothing_is_null_not_zero():
    doc = run_point(load_config(["workload=small", "policy=budget"]), [])
    s = doc["metrics"]["ttft_ms_deferred"]  # budget never defers
    assert s["count"] == 0 and all(v is None for k, v in s.items() if k != "count")
    with percentiles_in_effect((5, 50, 90, 95, 99)):
        assert list(summary(np.array([]))) == list(summary_fields((5, 50, 90, 95, 99)))
