"""The latency summaries peers report (min, mean, std, p50, p90, p95, p99, max): worked examples, the
weighted (histogram) form against the expanded values, every run's summaries carrying exactly the
registry's fields, and a compare gate whose BASE predates the new fields."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.metrics import summary, weighted_summary
from cgbench.results.names import METRICS, SUMMARY_FIELDS, lookup, metric

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
    from cgbench.analysis.plots_data import metric_label
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
