"""The latency summaries peers report (min, mean, std, p50, p90, p95, p99, max): worked examples, the
weighted (histogram) form against the expanded values, every run's summaries carrying exactly the
registry's fields, and a compare gate whose BASE predates the new fields."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.metrics import histogram_summary, summary, weighted_summary
from cgbench.results.names import METRICS, SUMMARY_FIELDS, lookup, metric
from tests.helpers import examples

NEW_FIELDS = ("min", "std", "p95")  # added after schema_version 1's first results


def test_one_to_ten() -> None:
    s = summary(np.arange(1, 11))
    assert list(s) == list(SUMMARY_FIELDS)
    # nearest rank: p90 is the 9th value, p95 and p99 the 10th (an interpolated p99 would be 9.91)
    assert s == {"count": 10, "min": 1.0, "mean": 5.5, "std": round(math.sqrt(8.25), 6), "p50": 5.0,
                 "p90": 9.0, "p95": 10.0, "p99": 10.0, "max": 10.0}


def test_scale_and_single_value() -> None:
    assert summary(np.array([0.25]), 1000.0) == {"count": 1, "min": 250.0, "mean": 250.0, "std": 0.0,
                                                 "p50": 250.0, "p90": 250.0, "p95": 250.0, "p99": 250.0,
                                                 "max": 250.0}
    empty = summary(np.array([], dtype=np.float64))
    assert list(empty) == list(SUMMARY_FIELDS) and empty["count"] == 0
    assert all(v is None for k, v in empty.items() if k != "count")  # no value: null, not 0


def test_twenty_values_p95_differs_from_p90_and_p99() -> None:
    s = summary(np.arange(1, 21) * 2.0)  # 2, 4, ..., 40
    assert (s["p90"], s["p95"], s["p99"]) == (36.0, 38.0, 40.0)


def test_weighted_equals_the_expanded_values() -> None:
    items = [(1.0, 3), (2.0, 1), (4.0, 5), (8.0, 1)]
    expanded = np.array([v for v, c in items for _ in range(c)])
    assert weighted_summary(items, 1.0) == summary(expanded)
    assert list(weighted_summary([], 1000.0)) == list(SUMMARY_FIELDS)


def _pairwise_weighted_summary(items: list[tuple[float, int]], scale: float, digits: int) -> dict:
    """The weighted summary as it was computed pair by pair (each percentile a rescan of the running
    count): the oracle of the one-pass form."""
    total = sum(c for _, c in items)
    if total == 0:
        return summary(np.array([], dtype=np.float64))
    mean = sum(v * c for v, c in items) / total
    spread = sum(c * (v - mean) * (v - mean) for v, c in items)
    out = {"count": total, "min": round(items[0][0] * scale, digits), "mean": round(mean * scale, digits),
           "std": round(math.sqrt(spread / total) * scale, digits)}
    for q in (50, 90, 95, 99):
        rank = min(max(1, math.ceil(q / 100.0 * total)), total)
        seen = 0
        for value, count in items:
            seen += count
            if seen >= rank:
                out[f"p{q}"] = round(value * scale, digits)
                break
    out["max"] = round(items[-1][0] * scale, digits)
    return out


# rounding to 6 digits would hide a last-bit difference: 30 digits keep every float as it is
EXACT = 30
GAPS = st.floats(min_value=0.0, max_value=2.0, allow_nan=False, allow_subnormal=False)


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(GAPS, st.integers(1, 10**9), max_size=60), st.sampled_from([1.0, 1000.0]))
def test_the_one_pass_histogram_summary_is_the_pairwise_one(histogram: dict[float, int], scale: float) -> None:
    """Every field the same float as the pair-by-pair computation over the sorted items, unrounded and
    rounded, for histograms of any shape (one value, huge counts, values that differ in the last bit)."""
    items = sorted(histogram.items())
    for digits in (EXACT, 6):
        expected = _pairwise_weighted_summary(items, scale, digits)
        assert histogram_summary(histogram, scale, digits) == expected
        assert weighted_summary(items, scale, digits) == expected


def test_the_histogram_summary_of_a_long_run_of_distinct_gaps() -> None:
    """More values than one chunk of the Python sum (which feeds 65,536 floats at a time)."""
    rng = np.random.default_rng(0)
    gaps = rng.uniform(0.005, 0.05, 150_000).tolist()
    histogram = {g: int(c) for g, c in zip(gaps, rng.integers(1, 40, len(gaps)), strict=True)}
    items = sorted(histogram.items())
    assert histogram_summary(histogram, 1000.0, EXACT) == _pairwise_weighted_summary(items, 1000.0, EXACT)


def test_new_fields_are_registered_metrics_with_the_parents_unit() -> None:
    for field in NEW_FIELDS:
        m = metric(f"ttft_ms.{field}")
        assert m is not None and m.unit == "ms" and m.needs_clock
    assert metric("queue_wait_iters.p95").unit == "iterations"


@pytest.fixture(scope="module")
def doc() -> dict:
    return run_point(load_config(["workload.num_requests=40"]), [])


def test_every_summary_of_a_run_has_the_registry_fields_in_order(doc: dict) -> None:
    summaries = [m for m in METRICS if m.summary]
    assert len(summaries) >= 11
    for m in summaries:
        rec = lookup(doc["metrics"], m.name)
        assert list(rec) == list(SUMMARY_FIELDS), m.name
        if rec["count"]:
            assert rec["min"] <= rec["p50"] <= rec["p90"] <= rec["p95"] <= rec["p99"] <= rec["max"], m.name
            assert rec["min"] <= rec["mean"] <= rec["max"] and rec["std"] >= 0, m.name


def _without_new_fields(metrics: dict) -> dict:
    return {k: ({f: x for f, x in v.items() if f not in NEW_FIELDS} if isinstance(v, dict) else v)
            for k, v in metrics.items()}


def test_compare_gate_passes_against_a_base_without_the_new_fields(doc: dict, tmp_path) -> None:
    """A BASE written before min/std/p95 existed: the default rules name none of them, so NEW's extra
    fields are not compared and the gate stays OK; the fields the base has are compared as before."""
    from cgbench.results.document import write_json_atomic

    base = dict(doc, metrics=_without_new_fields(doc["metrics"]))
    assert "p95" not in base["metrics"]["ttft_ms"]
    write_json_atomic(tmp_path / "base.json", base)
    write_json_atomic(tmp_path / "new.json", doc)
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")])
    assert r.exit_code == 0, r.output
    assert "OK" in r.output
    moved = dict(doc, metrics=json.loads(json.dumps(doc["metrics"])))
    moved["metrics"]["ttft_ms"]["p99"] *= 2  # a real regression is still caught
    write_json_atomic(tmp_path / "moved.json", moved)
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "moved.json")])
    assert r.exit_code == 1, r.output


def test_plots_compare_and_tables_take_the_new_fields(tmp_path) -> None:
    """They resolve names through the registry: an axis label, a compare rule, a table header."""
    from cgbench.analysis.compare import judge, load_rules
    from cgbench.analysis.plots.data import metric_label
    from cgbench.results.names import label

    assert metric_label("ttft_ms.p95") == "TTFT p95 (ms)"
    assert label("e2e_ms.std") == "E2E std (ms)" and label("queue_wait_iters.min") == "queue wait min (iterations)"
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  ttft_ms.p95: {rel_tol: 0.05}\n  tpot_ms.std: {abs_tol: 1}\n")
    p95, std = load_rules(rules)
    assert p95.better == "lower" and std.better == "lower"
    assert judge(p95, 100.0, 104.0) == "within" and judge(p95, 100.0, 106.0) == "regressed"


def test_a_rule_naming_a_new_field_skips_it_against_an_older_base(doc: dict) -> None:
    """Even a rule that names p95 does not fail the gate on a BASE that has none; a metric NEW lost
    is still a change."""
    from cgbench.analysis.compare import CHANGED, SKIPPED, Rule, compare_docs

    base = dict(doc, metrics=_without_new_fields(doc["metrics"]))
    rules = [Rule("ttft_ms.p95", "lower", rel_tol=0.05), Rule("ttft_ms.p99", "lower", rel_tol=0.05)]
    (p95, p99) = compare_docs(base, doc, rules, "point")
    assert (p95.metric, p95.status, p95.note) == ("ttft_ms.p95", SKIPPED, "only in new (the base predates it)")
    assert (p99.metric, p99.status) == ("ttft_ms.p99", "same")
    (lost, _) = compare_docs(doc, base, rules, "point")
    assert (lost.metric, lost.status, lost.note) == ("ttft_ms.p95", CHANGED, "only in base")
