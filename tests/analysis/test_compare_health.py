"""`cgbench compare`: each point's health flags (a flag NEW raises is regressed, one it clears
improved, one both raise same: a regenerated baseline that carries flags passes), and --pair-by
(two sweeps that differ on purpose in a config key pair by their swept axes, the difference shown;
without it they share no point)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cgbench.analysis.compare import (
    IMPROVED,
    REGRESSED,
    SAME,
    compare_paths,
    comparison_from_dict,
    load_rules,
    to_dict,
)
from cgbench.analysis.sweep.run import INDEX_NAME, plan_sweep, run_sweep

pytestmark = pytest.mark.slow  # each test runs compare over sweep folders

runner = CliRunner()
AXES = ["model=transformer,hybrid", "policy=budget,megatron", "workload=small", "engine.kv_blocks=600"]
FLAG = {"code": "overload", "message": "the workload offers more than the engine serves"}


def compare(*args) -> object:
    from cgbench.cli.app import app

    assert isinstance(app, typer.Typer)
    return runner.invoke(app, ["compare", *map(str, args)])


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("health") / "base"
    assert run_sweep(plan_sweep([*AXES, "cg.num_cuda_graphs=16"], out_dir=out)).count("done") == 4
    return out


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("health") / "eight"
    assert run_sweep(plan_sweep([*AXES, "cg.num_cuda_graphs=8"], out_dir=out)).count("done") == 4
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _point_file(d: Path, model: str, policy: str) -> Path:
    index = json.loads((d / INDEX_NAME).read_text())
    return d / next(p["file"] for p in index["points"]
                    if p["params"].get("model") == model and p["params"].get("policy") == policy)


def _flag(path: Path, *flags: dict) -> None:
    doc = json.loads(path.read_text())
    doc["warnings"] = [*doc["warnings"], *flags]
    path.write_text(json.dumps(doc))


def test_a_flag_raised_in_new_regresses_and_says_so(base, tmp_path):
    new = _copy(base, tmp_path / "new")
    _flag(_point_file(new, "hybrid", "megatron"), FLAG)
    r = compare(base, new)
    assert r.exit_code == 1, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("REGRESSED: "))
    assert line == ("REGRESSED: model=hybrid policy=megatron: health.overload raised in new (regressed) "
                    "[health overload (base ok)]")
    assert "health: base 0 of 4 points flagged; new 1 of 4 points flagged (overload 1)" in r.stdout
    comp = compare_paths(base, new, load_rules())
    (point,) = comp.failing()
    assert point.health == {"base": [], "new": ["overload"]}
    (check,) = [d for d in point.deltas if d.metric == "health.overload"]
    assert (check.base, check.new, check.status, check.trend) == (False, True, REGRESSED, "worse")
    again = comparison_from_dict(json.loads(json.dumps(to_dict(comp))))  # the JSON keeps the health
    assert again.points[0].health == comp.points[0].health and again.failing() != []
    md = compare(base, new, "--format", "markdown").stdout
    assert "| **regressed** | model=hybrid policy=megatron | health.overload raised in new (regressed) | " \
           "overload (base ok) |" in md
    csv_text = compare(base, new, "--format", "csv").stdout
    assert "model=hybrid policy=megatron,regressed,health.overload,-,raised,,,regressed,worse," in csv_text


def test_a_flag_cleared_in_new_improves(base, tmp_path):
    flagged = _copy(base, tmp_path / "flagged")
    _flag(_point_file(flagged, "transformer", "budget"), FLAG)
    r = compare(flagged, base)
    assert r.exit_code == 0, r.output
    assert "improved: model=transformer policy=budget: health.overload cleared in new (improved) " \
           "[health ok (base overload)]" in r.stdout
    (point,) = [p for p in compare_paths(flagged, base, load_rules()).points if p.status == IMPROVED]
    assert point.label == "model=transformer policy=budget"


def test_a_regenerated_baseline_that_carries_flags_passes(base, tmp_path):
    """A baseline regenerated under new health rules holds their flags; a NEW raising the same
    flags compares same, and the summary still says how many points are flagged."""
    regenerated, new = _copy(base, tmp_path / "regen"), _copy(base, tmp_path / "new")
    for d in (regenerated, new):
        for model in ("transformer", "hybrid"):
            _flag(_point_file(d, model, "megatron"), FLAG, {"code": "long_graph_wait", "message": "waited"})
    r = compare(regenerated, new)
    assert r.exit_code == 0, r.output
    assert "OK: 4 points (4 same;" in r.stdout
    assert "health: base 2 of 4 points flagged (overload 2, long_graph_wait 2); new 2 of 4 points flagged " \
           "(overload 2, long_graph_wait 2)" in r.stdout
    comp = compare_paths(regenerated, new, load_rules())
    assert {d.status for d in comp.deltas if d.metric.startswith("health.")} == {SAME}


def test_sweeps_that_differ_on_purpose_share_no_point_unless_paired_by_their_axes(base, candidate):
    r = compare(base, candidate)
    assert r.exit_code == 2 and r.stderr.startswith("error: no common points between ")
    assert "--pair-by KEYS pairs them by the swept axes alone" in r.stderr
    r = compare(base, candidate, "--pair-by", "model,policy", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["pair_by"] == ["model", "policy"] and len(data["points"]) == 4
    for p in data["points"]:
        assert p["differs"] == ["cg.num_cuda_graphs 16 -> 8"]
        # the deterministic checks need equal configs: here they are skipped, never compared
        steps = next(d for d in p["deltas"] if d["metric"] == "steps")
        assert steps["status"] == "skipped" and steps["note"] == "not sim with equal configs"
        ttft = next(d for d in p["deltas"] if d["metric"] == "ttft_ms.p99")
        assert ttft["status"] != "skipped"  # the time metrics are compared
    table = compare(base, candidate, "--pair-by", "model,policy")
    assert "warning: paired by model, policy: the configs differ: cg.num_cuda_graphs 16 -> 8 (4 of 4 pairs)" \
        in table.stderr


@pytest.mark.parametrize("keys, words", [
    ("modle,policy", "--pair-by modle: no point of BASE"),
    ("model", "--pair-by model: "),  # two points of BASE with model=transformer (below)
    ("model,model", "--pair-by: 'model,model' names a key twice"),
    ("seed", "--pair-by seed: the seed pairs points by itself"),
    ("model,", "--pair-by: 'model,': name override keys"),
])
def test_a_bad_pair_by_is_one_error_line(base, candidate, keys, words):
    r = compare(base, candidate, "--pair-by", keys)
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {words}") and r.stderr.count("\n") == 1, r.output
    if keys.startswith("modle"):
        assert "did you mean model?" in r.stderr
    if keys == "model":
        assert "has two points with model=transformer" in r.stderr and "add the key that tells them apart" in r.stderr


def test_two_files_pair_as_they_are_and_show_how_their_configs_differ(base, candidate):
    b, n = _point_file(base, "hybrid", "megatron"), _point_file(candidate, "hybrid", "megatron")
    r = compare(b, n)
    assert "warning: the configs differ: cg.num_cuda_graphs 16 -> 8 (1 of 1 pair)" in r.stderr
    r = compare(b, n, "--pair-by", "model")
    assert r.exit_code == 2 and "--pair-by: pairs the points of sweep folders" in r.stderr


def test_a_baseline_from_before_goodput_needed_an_slo_still_passes(base, tmp_path):
    """Such a baseline counted every completed request as goodput (1.0 here); NEW, without an SLO, has
    none: nothing to compare, so the check is skipped, and a note says why."""
    old = _copy(base, tmp_path / "old")
    for f in old.glob("model-*.json"):
        doc = json.loads(f.read_text())
        m = doc["metrics"]
        del m["goodput_slo"]
        m["goodput_req_s"], m["goodput_fraction"] = m["request_throughput_req_s"], 1.0
        f.write_text(json.dumps(doc))
    r = compare(old, base)
    assert r.exit_code == 0, r.output
    assert "note: 4 goodput checks skipped: no slo.* bound set, so no goodput in new" in r.stderr
    assert "exact checks skipped" not in r.stderr
