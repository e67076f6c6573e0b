"""`cgbench compare`: exit 0 (no regression) / 1 (regression) / 2 (bad input), rules, point matching."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.analysis.compare import (
    IMPROVED,
    OK,
    REGRESSED,
    SKIPPED,
    Point,
    Rule,
    compare_paths,
    judge,
    load_rules,
    match_key,
)
from cgbench.analysis.sweep import INDEX_NAME, plan_sweep, run_sweep

runner = CliRunner()
AXES = ["model=transformer,hybrid", "policy=budget,megatron", "cg=sparse", "workload=small"]


def _app() -> typer.Typer:
    from cgbench.cli.app import app

    return app


def compare(*args: str):
    return runner.invoke(_app(), ["compare", *map(str, args)])


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cmp") / "base"
    outcome = run_sweep(plan_sweep(AXES, out_dir=out))
    assert outcome.count("done") == 4
    return out


@pytest.fixture
def new(base, tmp_path) -> Path:
    dst = tmp_path / "new"
    shutil.copytree(base, dst)
    return dst


def _files(d: Path) -> list[Path]:
    return [d / p["file"] for p in json.loads((d / INDEX_NAME).read_text())["points"]]


def _edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def _hybrid_megatron(d: Path) -> Path:
    return next(f for f in _files(d) if "hybrid" in f.name and "megatron" in f.name)


# ---------------------------------------------------------------------------------------------- exit codes


def test_identical_sweeps_pass(base, new, tmp_path):
    r = compare(base, new, "--markdown", tmp_path / "summary.md")
    assert r.exit_code == 0, r.output
    assert "no regression in 4 points" in r.stdout
    md = (tmp_path / "summary.md").read_text()
    assert md.startswith("## cgbench compare") and "**OK**" in md


def test_a_rerun_of_the_same_sweep_passes(base, tmp_path):
    """Same config on the sim: every exact rule holds on an independent re-run."""
    run_sweep(plan_sweep(AXES, out_dir=tmp_path / "again"))
    r = compare(base, tmp_path / "again")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("metric,delta", [("eager_step_fraction", 0.01), ("max_cg_wait_iters", 1),
                                          ("deferral_events", -1)])
def test_an_edited_metric_is_a_regression(base, new, tmp_path, metric, delta):
    target = _hybrid_megatron(new)
    _edit(target, lambda d: d["metrics"].__setitem__(metric, d["metrics"][metric] + delta))
    md = tmp_path / "summary.md"
    r = compare(base, new, "--markdown", md)
    assert r.exit_code == 1, r.output
    assert metric in r.stdout and "REGRESSED" in r.stdout
    assert "1 regression in 1 of 4 points" in r.stdout
    text = md.read_text()
    assert "**REGRESSION**" in text and f"| {metric} |" in text
    assert text.count("REGRESSED") == 1


def test_an_improvement_is_not_a_regression(base, new, tmp_path):
    worse = tmp_path / "worse"  # the same runs with a longer wait recorded: new is an improvement on it
    shutil.copytree(base, worse)
    _edit(_hybrid_megatron(worse), lambda d: d["metrics"].__setitem__("max_cg_wait_iters",
                                                                        d["metrics"]["max_cg_wait_iters"] + 2))
    r = compare(worse, new)
    assert r.exit_code == 0, r.output
    assert "1 improved" in r.stdout and "max_cg_wait_iters" in r.stdout


def test_time_metrics_use_the_relative_tolerance_of_the_rules(base, new):
    rel = next(r.rel_tol for r in load_rules() if r.pattern == "ttft_ms.p99")
    assert rel > 0
    target = _hybrid_megatron(new)
    p99 = json.loads(target.read_text())["metrics"]["ttft_ms"]["p99"]
    _edit(target, lambda d: d["metrics"]["ttft_ms"].__setitem__("p99", p99 * (1 + 0.8 * rel)))
    assert compare(base, new).exit_code == 0
    _edit(target, lambda d: d["metrics"]["ttft_ms"].__setitem__("p99", p99 * (1 + 1.2 * rel)))
    r = compare(base, new)
    assert r.exit_code == 1 and "ttft_ms.p99" in r.stdout


def test_exact_step_metrics_only_when_sim_configs_are_equal(base, new):
    target = _hybrid_megatron(new)
    _edit(target, lambda d: d["metrics"].__setitem__("steps", d["metrics"]["steps"] + 1))
    assert compare(base, new).exit_code == 1
    # a different config: the step count may differ legitimately, the exact rule is skipped
    _edit(target, lambda d: d["config"]["engine"].__setitem__("token_rounder", 128))
    r = compare(base, new)
    assert r.exit_code == 0, r.output
    assert "exact checks skipped" in r.stderr


def test_a_failed_point_in_new_is_a_regression(base, new):
    index = json.loads((new / INDEX_NAME).read_text())
    index["points"][1].update(status="failed", error="RuntimeError: boom")
    (new / INDEX_NAME).write_text(json.dumps(index))
    r = compare(base, new)
    assert r.exit_code == 1 and "boom" in r.stdout


def test_two_files_are_compared_directly(base, new):
    b, n = _hybrid_megatron(base), _hybrid_megatron(new)
    assert compare(b, n).exit_code == 0
    _edit(n, lambda d: d["metrics"].__setitem__("outcome", "stalled"))
    r = compare(b, n)
    assert r.exit_code == 1 and "outcome" in r.stdout


def test_a_file_is_matched_to_its_point_in_a_sweep(base, new):
    r = compare(base, _hybrid_megatron(new))
    assert r.exit_code == 0, r.output
    assert "no regression in 1 point" in r.stdout


# ---------------------------------------------------------------------------------------------- bad input


def _broken(kind: str, new: Path) -> Path:
    target = _hybrid_megatron(new)
    if kind == "missing":
        return new / "nope.json"
    if kind == "unreadable":
        target.write_text('{"schema_version": 1, "metrics": {')
    elif kind == "schema":
        _edit(target, lambda d: d.__setitem__("schema_version", 99))
    elif kind == "not_a_result":
        target.write_text("[1, 2, 3]")
    elif kind == "missing_file_in_sweep":
        target.unlink()
    return new


@pytest.mark.parametrize("kind,needle", [("missing", "no such file"), ("unreadable", "not valid JSON"),
                                         ("schema", "schema_version 99"), ("not_a_result", "not a cgbench result"),
                                         ("missing_file_in_sweep", "no such file")])
def test_bad_input_exits_2(base, new, kind, needle):
    r = compare(base, _broken(kind, new))
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


def test_no_common_points_exits_2(base, tmp_path):
    run_sweep(plan_sweep(["model=hybrid", "policy=defer", "cg=dense", "workload=small"], out_dir=tmp_path / "other"))
    r = compare(base, tmp_path / "other")
    assert r.exit_code == 2 and "no common points" in r.stderr


@pytest.mark.parametrize("text,needle", [
    ("rules:\n  steps: {better: sideways}\n", "rules.steps.better"),
    ("rules:\n  steps: {better: lower, tol: 1}\n", "'tol'"),
    ("rules:\n  steps: {better: lower, rel_tol: -1}\n", "rel_tol"),
    ("rules: [1, 2\n", "rules.yaml:"),
    ("nothing: here\n", "rules:"),
])
def test_a_bad_rules_file_exits_2_naming_the_problem(base, new, tmp_path, text, needle):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    r = compare(base, new, "--rules", path)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and str(path) in r.stderr


def test_a_custom_rules_file_is_used(base, new, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  max_cg_wait_iters: {better: lower, abs_tol: 5}\n")
    _edit(_hybrid_megatron(new), lambda d: d["metrics"].__setitem__("max_cg_wait_iters",
                                                                      d["metrics"]["max_cg_wait_iters"] + 5))
    assert compare(base, new, "--rules", path).exit_code == 0
    assert compare(base, new).exit_code == 1  # the default rules allow no rise at all


# ---------------------------------------------------------------------------------------------- matching


def _pt(overrides: list[str], seed: int | None) -> Point:
    doc = {"config": {"seed": seed}} if seed is not None else None
    return Point(" ".join(overrides), overrides, Path("x.json"), doc)


def test_match_key_ignores_order_and_the_seed_unless_a_side_sets_seeds():
    a = _pt(["model=hybrid", "policy=budget"], 0)
    b = _pt(["policy=budget", "+model=hybrid"], 3)
    assert match_key(a, with_seed=False) == match_key(b, with_seed=False)
    # with seeds in play, the effective seed (from the config) is part of the identity
    assert match_key(a, with_seed=True) != match_key(b, with_seed=True)
    repeat0 = _pt(["model=hybrid", "policy=budget", "seed=0"], 0)
    assert match_key(repeat0, with_seed=True) == match_key(a, with_seed=True)


def test_a_repeated_base_matches_a_single_run_on_its_seed(tmp_path):
    axes = ["model=hybrid", "policy=megatron", "cg=sparse", "workload=small"]
    run_sweep(plan_sweep(axes, repeat=2, out_dir=tmp_path / "rep"))
    run_sweep(plan_sweep(axes, out_dir=tmp_path / "one"))
    comp = compare_paths(tmp_path / "rep", tmp_path / "one", load_rules())
    assert comp.points == 1 and not comp.regressions
    assert comp.only_base == ["model=hybrid policy=megatron cg=sparse workload=small seed=1"]
    assert all(d.status != SKIPPED for d in comp.deltas), "seed=0 and the default seed are the same config"


# ---------------------------------------------------------------------------------------------- judge

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
tol = st.floats(min_value=0, max_value=10, allow_nan=False)


@given(finite, finite, tol, tol)
def test_judge_matches_the_rule_definition(b, n, abs_tol, rel_tol):
    allowed = max(abs_tol, rel_tol * abs(b))
    lower = judge(Rule("m", "lower", abs_tol, rel_tol), b, n)
    higher = judge(Rule("m", "higher", abs_tol, rel_tol), b, n)
    exact = judge(Rule("m", "exact", abs_tol, rel_tol), b, n)
    assert (lower == REGRESSED) == (n > b + allowed)
    assert (lower == IMPROVED) == (n < b - allowed)
    assert (higher == REGRESSED) == (n < b - allowed)
    assert (higher == IMPROVED) == (n > b + allowed)
    assert (exact == REGRESSED) == (n > b + allowed or n < b - allowed)
    assert exact in (OK, REGRESSED)


@given(finite, finite, finite, tol, tol)
def test_judge_is_monotone_in_the_new_value(b, n1, n2, abs_tol, rel_tol):
    """Moving the new value further the wrong way never makes the verdict better."""
    lo, hi = sorted((n1, n2))
    rank = {IMPROVED: 0, OK: 1, REGRESSED: 2}
    lower, higher = Rule("m", "lower", abs_tol, rel_tol), Rule("m", "higher", abs_tol, rel_tol)
    assert rank[judge(lower, b, lo)] <= rank[judge(lower, b, hi)]
    assert rank[judge(higher, b, hi)] <= rank[judge(higher, b, lo)]


@given(finite, tol)
def test_no_change_never_regresses(x, t):
    for better in ("lower", "higher", "exact"):
        assert judge(Rule("m", better, t, t), x, x) == OK


def test_judge_on_strings_and_nan():
    assert judge(Rule("outcome", "exact"), "completed", "stalled") == REGRESSED
    assert judge(Rule("outcome", "exact"), "completed", "completed") == OK
    assert judge(Rule("m", "lower"), 1.0, math.nan) == REGRESSED
    assert judge(Rule("m", "lower"), math.nan, math.nan) == OK


def test_default_rules_cover_the_gate_metrics():
    rules = {r.pattern: r for r in load_rules()}
    assert rules["eager_step_fraction"].better == "lower" and not rules["eager_step_fraction"].deterministic
    assert rules["max_cg_wait_iters"].better == "lower" and rules["max_cg_wait_iters"].abs_tol == 0
    for name in ("steps", "eager_steps", "deferral_events", "deferred_requests", "snap_splits"):
        assert rules[name].better == "exact" and rules[name].deterministic, name
    for name in ("ttft_ms.p99", "tpot_ms.p50", "output_throughput_tok_s"):
        assert rules[name].rel_tol > 0, name
    assert rules["output_throughput_tok_s"].better == "higher"
