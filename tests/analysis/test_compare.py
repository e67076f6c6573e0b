"""`cgbench compare`: the gate's classes and exit codes (0 / 1 / 2), --fail-on, output formats, rules,
point matching."""

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
    CHANGED,
    FAILED,
    IMPROVED,
    MISSING,
    REGRESSED,
    SAME,
    SKIPPED,
    WITHIN,
    Point,
    Rule,
    compare_paths,
    comparison_from_dict,
    judge,
    load_rules,
    match_key,
    to_dict,
)
from cgbench.analysis.sweep.run import INDEX_NAME, plan_sweep, run_sweep
from cgbench.cli.render_compare import markdown

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


@pytest.mark.slow
def test_identical_sweeps_pass(base, new, tmp_path):
    r = compare(base, new, "--markdown", tmp_path / "summary.md")
    assert r.exit_code == 0, r.output
    assert "OK: 4 points (4 same;" in r.stdout
    md = (tmp_path / "summary.md").read_text()
    assert md.startswith("## cgbench compare") and "**OK**" in md and "No metric changed." in md


@pytest.mark.slow
def test_a_rerun_of_the_same_sweep_passes(base, tmp_path):
    """Same config on the sim: every exact rule holds on an independent re-run."""
    run_sweep(plan_sweep(AXES, out_dir=tmp_path / "again"))
    r = compare(base, tmp_path / "again")
    assert r.exit_code == 0, r.output


@pytest.mark.slow
@pytest.mark.parametrize("metric,delta", [("eager_step_fraction", 0.01), ("max_cg_wait_iters", 1)])
def test_a_worse_metric_is_regressed(base, new, tmp_path, metric, delta):
    target = _hybrid_megatron(new)
    _edit(target, lambda d: d["metrics"].__setitem__(metric, d["metrics"][metric] + delta))
    md = tmp_path / "summary.md"
    r = compare(base, new, "--markdown", md)
    assert r.exit_code == 1, r.output
    line = next(line for line in r.stdout.splitlines() if line.startswith("REGRESSED: "))
    assert line.startswith("REGRESSED: model=hybrid policy=megatron: ") and metric in line
    assert "FAIL: 1 of 4 points (1 regressed, 3 same;" in r.stdout
    text = md.read_text()
    assert "**FAIL**" in text and "| **regressed** | model=hybrid policy=megatron |" in text


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_exact_metric_that_differs_is_changed_whichever_way(base, new, delta):
    """deferral_events is exact: fewer is not an improvement and more not a regression, but a change
    (the simulator must reproduce it); the registry's direction is reported alongside."""
    _edit(_hybrid_megatron(new), lambda d: d["metrics"].__setitem__("deferral_events",
                                                                      d["metrics"]["deferral_events"] + delta))
    r = compare(base, new)
    assert r.exit_code == 1, r.output
    line = next(line for line in r.stdout.splitlines() if line.startswith("changed: "))
    assert "deferral_events" in line and ("better" if delta < 0 else "worse") in line
    assert "REGRESSED" not in r.stdout
    assert compare(base, new, "--fail-on", "regressed,missing,failed").exit_code == 0


def test_a_pure_improvement_passes_with_fail_on_regressed(base, new, tmp_path):
    worse = tmp_path / "worse"  # the same runs with a longer wait recorded: new is an improvement on it
    shutil.copytree(base, worse)
    _edit(_hybrid_megatron(worse), lambda d: d["metrics"].__setitem__("max_cg_wait_iters",
                                                                        d["metrics"]["max_cg_wait_iters"] + 2))
    r = compare(worse, new, "--fail-on", "regressed")
    assert r.exit_code == 0, r.output
    assert "improved: model=hybrid policy=megatron: max_cg_wait_iters" in r.stdout
    assert "OK: 4 points (1 improved, 3 same;" in r.stdout
    assert compare(worse, new).exit_code == 0  # not in the default --fail-on either
    assert compare(worse, new, "--fail-on", "improved").exit_code == 1


def test_a_missing_point_fails_and_is_named(base, new):
    index = json.loads((new / INDEX_NAME).read_text())
    gone = index["points"].pop(2)
    (new / gone["file"]).unlink()
    (new / INDEX_NAME).write_text(json.dumps(index))
    r = compare(base, new)
    assert r.exit_code == 1, r.output
    assert f"MISSING: {' '.join(f'{k}={v}' for k, v in gone['params'].items())}" in r.stdout
    comp = compare_paths(base, new, load_rules())
    assert [p.status for p in comp.points].count(MISSING) == 1
    assert compare(base, new, "--fail-on", "missing").exit_code == 1
    # only a --fail-on that leaves `missing` out lets it pass, and the point is still named
    r = compare(base, new, "--fail-on", "regressed")
    assert r.exit_code == 0 and "MISSING: " in r.stdout


def test_a_failed_point_in_new_fails(base, new):
    index = json.loads((new / INDEX_NAME).read_text())
    index["points"][1].update(status="failed", error="RuntimeError: boom")
    (new / INDEX_NAME).write_text(json.dumps(index))
    r = compare(base, new)
    assert r.exit_code == 1 and "FAILED: " in r.stdout and "boom" in r.stdout
    assert compare_paths(base, new, load_rules()).points[1].status == FAILED


def test_within_tolerance_is_its_own_class(base, new):
    target = _hybrid_megatron(new)
    _edit(target, lambda d: d["metrics"]["ttft_ms"].__setitem__("p99", d["metrics"]["ttft_ms"]["p99"] * 1.01))
    comp = compare_paths(base, new, load_rules())
    assert [p.status for p in comp.points].count(WITHIN) == 1
    assert compare(base, new).exit_code == 0
    assert compare(base, new, "--fail-on", "within").exit_code == 1


def test_json_round_trips_and_holds_every_check(base, new):
    _edit(_hybrid_megatron(new), lambda d: d["metrics"].__setitem__("steps", d["metrics"]["steps"] + 3))
    r = compare(base, new, "--format", "json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    comp = compare_paths(base, new, load_rules())
    assert data == json.loads(json.dumps(to_dict(comp)))
    again = comparison_from_dict(data)
    assert again == comp
    assert to_dict(again) == data
    assert data["failed"] is True and sum(len(p["deltas"]) for p in data["points"]) == len(comp.deltas)
    assert {p["status"] for p in data["points"]} == {CHANGED, SAME}


def test_csv_has_a_row_per_check(base, new):
    import csv
    import io

    r = compare(base, new, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == len(compare_paths(base, new, load_rules()).deltas)
    assert {row["class"] for row in rows} == {SAME}


def test_an_uncommitted_change_is_warned_about(base, new):
    for f in _files(new):
        _edit(f, lambda d: d.update(git_dirty=True, git_diff_hash="0123456789abcdef"))
    for f in _files(base):
        _edit(f, lambda d: d.update(git_sha="a" * 40, git_dirty=False, git_diff_hash=None))
    for f in _files(new):
        _edit(f, lambda d: d.update(git_sha="a" * 40))
    r = compare(base, new)
    assert r.exit_code == 0
    assert "warning:" in r.stderr and "differ only by uncommitted changes" in r.stderr
    assert "0123456789abcdef" in r.stderr
    for f in _files(new):  # another commit: the commit ids already tell them apart, no warning
        _edit(f, lambda d: d.update(git_sha="b" * 40))
    assert "warning" not in compare(base, new).stderr


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
    r = compare(base, new)
    assert r.exit_code == 1 and "changed: model=hybrid policy=megatron: steps" in r.stdout
    # a different config: the step count may differ legitimately, the exact rule is skipped
    _edit(target, lambda d: d["config"]["engine"].__setitem__("token_rounder", 128))
    r = compare(base, new)
    assert r.exit_code == 0, r.output
    assert "exact checks skipped" in r.stderr


def test_two_files_are_compared_directly(base, new):
    b, n = _hybrid_megatron(base), _hybrid_megatron(new)
    assert compare(b, n).exit_code == 0
    _edit(n, lambda d: d["metrics"].__setitem__("outcome", "stalled"))
    r = compare(b, n)
    assert r.exit_code == 1 and "outcome" in r.stdout


def test_a_file_is_matched_to_its_point_in_a_sweep(base, new):
    r = compare(base, _hybrid_megatron(new))
    assert r.exit_code == 0, r.output
    assert "OK: 1 point (1 same;" in r.stdout


# ---------------------------------------------------------------------------------------------- bad input


def _broken(kind: str, new: Path) -> Path:
    target = _hybrid_megatron(new)
    if kind == "missing":
        return new / "nope.json"
    if kind == "unreadable":
        target.write_text('{"schema_version": 2, "metrics": {')
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


@pytest.mark.parametrize("args,needle", [(["--fail-on", "regresed"], "--fail-on: 'regresed'"),
                                         (["--fail-on", ","], "--fail-on"),
                                         (["--format", "yaml"], "yaml")])
def test_bad_options_exit_2(base, new, args, needle):
    r = compare(base, new, *args)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_repeated_base_matches_a_single_run_on_its_seed(tmp_path):
    axes = ["model=hybrid", "policy=megatron", "cg=sparse", "workload=small"]
    run_sweep(plan_sweep(axes, repeat=2, out_dir=tmp_path / "rep"))
    run_sweep(plan_sweep(axes, out_dir=tmp_path / "one"))
    comp = compare_paths(tmp_path / "rep", tmp_path / "one", load_rules())
    assert [(p.label, p.status) for p in comp.points] == [("seed=0", SAME), ("seed=1", MISSING)]
    assert all(d.status != SKIPPED for d in comp.deltas), "seed=0 and the default seed are the same config"
    # the other way round the single run matches seed=0; the extra repeat is only noted
    comp = compare_paths(tmp_path / "one", tmp_path / "rep", load_rules())
    assert [p.status for p in comp.points] == [SAME] and len(comp.only_new) == 1


# ---------------------------------------------------------------------------------------------- judge

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
tol = st.floats(min_value=0, max_value=10, allow_nan=False)


@given(finite, finite, tol, tol)
def test_judge_matches_the_rule_definition(b, n, abs_tol, rel_tol):
    allowed = max(abs_tol, rel_tol * abs(b))
    lower = judge(Rule("m", "lower", abs_tol, rel_tol), b, n)
    higher = judge(Rule("m", "higher", abs_tol, rel_tol), b, n)
    exact = judge(Rule("m", None, abs_tol, rel_tol, exact=True), b, n)
    assert (lower == REGRESSED) == (n > b + allowed)
    assert (lower == IMPROVED) == (n < b - allowed)
    assert (higher == REGRESSED) == (n < b - allowed)
    assert (higher == IMPROVED) == (n > b + allowed)
    assert (lower == WITHIN) == (n != b and not (n > b + allowed or n < b - allowed))
    assert (lower == SAME) == (n == b)
    assert exact == (SAME if n == b else CHANGED), "exact: any difference, whatever the tolerance"


@given(finite, finite, finite, tol, tol)
def test_judge_is_monotone_in_the_new_value(b, n1, n2, abs_tol, rel_tol):
    """Moving the new value further the wrong way never makes the verdict better."""
    lo, hi = sorted((n1, n2))
    rank = {IMPROVED: 0, WITHIN: 1, SAME: 1, REGRESSED: 2}
    lower, higher = Rule("m", "lower", abs_tol, rel_tol), Rule("m", "higher", abs_tol, rel_tol)
    assert rank[judge(lower, b, lo)] <= rank[judge(lower, b, hi)]
    assert rank[judge(higher, b, hi)] <= rank[judge(higher, b, lo)]


@given(finite, tol)
def test_no_change_is_same(x, t):
    for rule in (Rule("m", "lower", t, t), Rule("m", "higher", t, t), Rule("m", None, t, t, exact=True)):
        assert judge(rule, x, x) == SAME


def test_judge_on_strings_and_nan():
    assert judge(Rule("outcome", exact=True), "completed", "stalled") == CHANGED
    assert judge(Rule("outcome", exact=True), "completed", "completed") == SAME
    assert judge(Rule("m", "lower"), 1.0, math.nan) == REGRESSED
    assert judge(Rule("m", "lower"), math.nan, math.nan) == SAME


def test_default_rules_take_their_direction_from_the_registry():
    rules = {r.pattern: r for r in load_rules()}
    assert rules["eager_step_fraction"].better == "lower" and not rules["eager_step_fraction"].deterministic
    assert rules["max_cg_wait_iters"].better == "lower" and rules["max_cg_wait_iters"].abs_tol == 0
    for name in ("steps", "eager_steps", "deferral_events", "deferred_requests", "snap_splits"):
        assert rules[name].exact and rules[name].better is None and rules[name].deterministic, name
    for name in ("ttft_ms.p99", "tpot_ms.p50", "output_throughput_tok_s"):
        assert rules[name].rel_tol > 0, name
    assert rules["output_throughput_tok_s"].better == "higher"


@pytest.mark.parametrize("text,needle", [
    ("rules:\n  ttft_ms.p99: {better: higher}\n", "contradicts the metric registry (lower is better)"),
    ("rules:\n  steps: {rel_tol: 0.1}\n", "no direction for steps"),
    ("rules:\n  steps: {better: exact}\n", "exact: true"),
    ("rules:\n  steps: {exact: true, better: lower}\n", "exclude each other"),
])
def test_rules_that_contradict_the_registry_are_refused(tmp_path, text, needle):
    from cgbench.config.schema import ConfigError

    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_rules(path)


# ---------------------------------------------------------------------------------------------- the CI gate

BASELINE = Path(__file__).resolve().parents[2] / "results" / "baseline"


@pytest.mark.slow
def test_the_ci_gate_fails_when_a_point_of_the_baseline_is_missing(tmp_path):
    """`make ci-gate` compares results/baseline with a fresh sweep: a copy of the baseline passes,
    the same copy with one point removed (file and index entry) fails, naming the point."""
    new = tmp_path / "ci-check"
    shutil.copytree(BASELINE, new)
    assert compare(BASELINE, new).exit_code == 0
    index = json.loads((new / INDEX_NAME).read_text())
    gone = index["points"].pop(17)
    (new / gone["file"]).unlink()
    (new / INDEX_NAME).write_text(json.dumps(index))
    r = compare(BASELINE, new)
    assert r.exit_code == 1, r.output
    missing = [line for line in r.stdout.splitlines() if line.startswith("MISSING: ")]
    assert len(missing) == 1
    for k, v in gone["params"].items():
        assert f"{k.rsplit('.', 1)[-1]}={v}" in missing[0]
    assert "FAIL: 1 of 48 points (1 missing, 47 same;" in r.stdout


def test_the_ci_gate_runs_compare_on_the_baseline():
    make = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    gate = make[make.index("ci-gate:"):].split("\n\n")[0]
    assert "cgbench compare results/baseline results/sweeps/ci-check" in gate
    assert "--fail-on" not in gate, "the gate fails on the default classes (regressed, missing, failed, changed)"


# ---------------------------------------------------------------------------------------------- markdown


@pytest.mark.slow
def test_markdown_of_a_48_point_sweep_with_every_metric_changed_stays_bounded(tmp_path):
    """The CI baseline with every compared metric moved: the summary stays under 20 KB, worst first,
    each point's overrides once as a short label."""
    root = BASELINE
    new = tmp_path / "new"
    shutil.copytree(root, new)
    for i, f in enumerate(_files(new)):
        def bump(d, i=i):
            m = d["metrics"]
            for k in ("steps", "eager_steps", "deferral_events", "max_cg_wait_iters", "tokens_computed"):
                m[k] += 1 + i
            m["ttft_ms"]["p99"] *= 1.5 if i % 2 else 0.5
            m["eager_step_fraction"] += 0.01
            for k in m.get("step_kinds", {}):
                m["step_kinds"][k] += 1
        _edit(f, bump)
    comp = compare_paths(root, new, load_rules())
    assert len(comp.points) == 48 and all(p.status == REGRESSED for p in comp.points)
    assert sum(d.status not in (SAME, SKIPPED) for d in comp.deltas) > 48 * 8
    text = markdown(comp)
    assert len(text.encode()) < 20_000, len(text.encode())
    rows = [line for line in text.splitlines() if line.startswith("| **")]
    assert len(rows) == 40 and "8 more points not shown" in text
    for row in rows:
        label = row.split(" | ")[1]
        assert "workload.num_requests" not in label and "num_requests" not in label, "fixed keys left out"
        assert row.count(label) == 1
