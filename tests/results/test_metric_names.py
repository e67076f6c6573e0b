"""The metric registry agrees with what a run computes and with the compare rules."""

from __future__ import annotations

import fnmatch

import pytest

from cgbench.analysis.compare import load_rules
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.formatting import compact, metric_value, number, percent
from cgbench.results.names import HIGHER, LOWER, METRICS, REGISTRY, flatten, label, lookup, metric, number_at


@pytest.fixture(scope="module")
def metrics() -> dict:
    # a tight pool so that pauses, evictions and eager steps all occur
    cfg = load_config(["workload.num_requests=60", "policy=budget", "engine.kv_blocks=200"])
    return run_point(cfg, [])["metrics"]


@pytest.fixture(scope="module")
def ep_metrics() -> dict:
    cfg = load_config(["model=hybrid", "workload.num_requests=24", "engine.ep_size=4"])
    return run_point(cfg, [])["metrics"]


@pytest.fixture(scope="module")
def spec_metrics() -> dict:
    cfg = load_config(["workload.num_requests=24", "engine.num_speculative_tokens=2",
                       "engine.spec_acceptance.per_position=[0.8,0.6]"])
    return run_point(cfg, [])["metrics"]


@pytest.fixture(scope="module")
def dp_metrics() -> dict:
    cfg = load_config(["workload.num_requests=24", "engine.dp_size=3"])
    return run_point(cfg, [])["metrics"]


def test_every_computed_metric_is_registered(metrics: dict, ep_metrics: dict, spec_metrics: dict,
                                             dp_metrics: dict) -> None:
    optional = ("needs_ep", "needs_prefix", "needs_spec", "needs_dp", "needs_open_loop")

    def without(*kinds: str) -> set[str]:
        return {m.name.split(".", 1)[0] for m in METRICS if not any(getattr(m, k) for k in kinds)}
    assert set(metrics) == without(*optional)  # all at once: no offered load
    assert set(ep_metrics) == without("needs_prefix", "needs_spec", "needs_dp", "needs_open_loop")
    assert set(spec_metrics) == without("needs_ep", "needs_prefix", "needs_dp", "needs_open_loop")
    assert set(dp_metrics) == without("needs_ep", "needs_prefix", "needs_spec", "needs_open_loop")
    for name, _ in [*flatten(metrics), *flatten(ep_metrics), *flatten(spec_metrics), *flatten(dp_metrics)]:
        assert metric(name) is not None, name


def test_every_registered_spec_metric_is_computed_with_spec_only(spec_metrics: dict) -> None:
    for m in METRICS:
        if m.needs_spec:
            assert m.name.startswith("spec.") and lookup(spec_metrics, m.name) is not None, m.name


def test_every_registered_dp_metric_is_computed_with_dp_only(dp_metrics: dict) -> None:
    for m in METRICS:
        if m.needs_dp:
            assert m.name.startswith("dp.") and lookup(dp_metrics, m.name) is not None, m.name
    assert set(dp_metrics["dp"]) == {m.name.split(".", 1)[1] for m in METRICS if m.needs_dp}


def test_every_registered_ep_metric_is_computed_with_ep_only(ep_metrics: dict) -> None:
    for m in METRICS:
        if m.needs_ep:
            assert m.name.startswith("ep.") and lookup(ep_metrics, m.name) is not None, m.name


def test_every_registered_prefix_metric_is_computed_with_prefix_caching_only(metrics: dict) -> None:
    cfg = load_config(["model=transformer", "workload.num_requests=24", "engine.prefix_caching=true",
                       "workload.prefix.system_prompts=2", "workload.prefix.system_prompt_tokens=600"])
    with_prefix = run_point(cfg, [])["metrics"]
    assert set(with_prefix) == set(metrics) | {"prefix_cache"}
    for m in METRICS:
        if m.needs_prefix:
            assert m.name.startswith("prefix_cache.") and lookup(with_prefix, m.name) is not None, m.name
    assert with_prefix["prefix_cache"]["saved_prefill_tokens"] > 0


def test_every_registered_load_metric_is_computed_with_open_loop_arrivals_only(metrics: dict) -> None:
    cfg = load_config(["workload.num_requests=24", "workload.arrival.process=poisson", "workload.arrival.rate=20"])
    open_loop = run_point(cfg, [])["metrics"]
    assert set(open_loop) == set(metrics) | {"load"}
    assert set(open_loop["load"]) == {m.name.split(".", 1)[1] for m in METRICS if m.needs_open_loop}
    closed = load_config(["workload.num_requests=24", "workload.arrival.process=closed_loop",
                          "workload.arrival.concurrency=4"])
    assert "load" not in run_point(closed, [])["metrics"]  # a closed loop offers what it is served


def test_every_registered_metric_is_computed(metrics: dict) -> None:
    for m in METRICS:
        if m.needs_ep or m.needs_prefix or m.needs_spec or m.needs_dp or m.needs_open_loop:
            continue
        assert m.name.split(".", 1)[0] in metrics, m.name
        if not m.keyed:
            assert lookup(metrics, m.name) is not None or m.name in NULL_WITHOUT_CAUSE, m.name


# metrics that are null when their cause is absent: no request waited; no slo.* bound set
NULL_WITHOUT_CAUSE = ("max_cg_wait_request", "goodput_req_s", "goodput_fraction")


def test_goodput_is_null_without_an_slo_and_a_number_with_one(metrics: dict) -> None:
    assert metrics["goodput_slo"] == "none"
    assert metrics["goodput_req_s"] is None and metrics["goodput_fraction"] is None
    cfg = load_config(["workload.num_requests=24", "slo.ttft_ms=1e9", "slo.tpot_ms=1e9"])
    m = run_point(cfg, [])["metrics"]
    assert m["goodput_slo"] == "ttft_ms<=1e+09 tpot_ms<=1e+09"
    # bounds no request misses: goodput is every completed request, as vLLM bench counts it
    assert m["goodput_fraction"] == 1.0 and m["goodput_req_s"] == m["request_throughput_req_s"]


def test_summary_children_inherit_unit_and_direction() -> None:
    p99 = metric("ttft_ms.p99")
    assert p99 is not None and p99.unit == "ms" and p99.better == LOWER and p99.needs_clock
    assert metric("ttft_ms.count").better not in (LOWER, HIGHER)
    assert metric("eager_steps_by_reason.shape").deterministic
    assert metric("ttft_ms.p42") is None and metric("no_such_metric") is None
    assert label("ttft_ms.p99") == "TTFT p99 (ms)"
    assert label("eager_step_fraction") == "eager steps (%)"


def test_compare_rules_name_registered_metrics_in_their_direction() -> None:
    names = [m.name for m in METRICS]
    for rule in load_rules():
        hits = [n for n in names if fnmatch.fnmatchcase(n, rule.pattern)] or (
            [rule.pattern] if metric(rule.pattern) else [])
        assert hits, f"rule {rule.pattern} names no registered metric"
        if rule.better in (LOWER, HIGHER):
            assert metric(hits[0]).better == rule.better, rule.pattern


def test_formatting() -> None:
    assert percent(0.017143) == "1.71%" and percent(None) == "-"
    assert number(13) == "13" and number(6766) == "6,766" and number(1.5, 1) == "1.5"
    assert number(None) == "-" and number(True) == "True"
    assert metric_value("eager_step_fraction", 0.5) == "50.00%"
    assert metric_value("steps", 472) == "472"
    assert REGISTRY["max_cg_wait_iters"].unit == "iterations"
    assert [compact(x) for x in (1234, 9999.25, 12_345, -4_600_000, None, True)] == \
        ["1,234", "9,999.2", "12.3k", "-4.6M", "-", "-"]


def test_number_at_reads_a_number_and_nothing_else() -> None:
    record = {"ttft_ms": {"p99": 12}, "outcome": "completed", "gating_active": True}
    assert number_at(record, "ttft_ms.p99") == 12.0 and isinstance(number_at(record, "ttft_ms.p99"), float)
    assert [number_at(record, k) for k in ("outcome", "gating_active", "ttft_ms", "ttft_ms.p50", "x.y")] == \
        [None] * 5


def test_glossary_is_generated_from_the_registry() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "metric_glossary.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
