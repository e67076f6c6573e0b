"""`cgbench sweep`: expansion, validation before running, the sweep folder, --resume after a killed
sweep, --jobs 2 == --jobs 1, a sweep point == the same point run alone, the old launcher spellings."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cgbench.analysis.sweep.run import INDEX_NAME, headline, plan_sweep, point_file_name
from cgbench.config.compose import load_config
from cgbench.config.overrides import override_key
from cgbench.pipeline import run_point

pytestmark = pytest.mark.e2e  # end-to-end sweeps

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["workload=small"]
runner = CliRunner()


def _app() -> typer.Typer:
    from cgbench.cli.app import app

    return app


def sweep(*args: str):
    return runner.invoke(_app(), ["sweep", *args])


def _index(d: Path) -> dict:
    return json.loads((d / INDEX_NAME).read_text())


def _canon(doc: dict) -> tuple[str, str]:
    return json.dumps(doc["metrics"]), json.dumps(doc["graph_usage"])


# ---------------------------------------------------------------------------------------------- planning


def test_default_sweep_is_the_product_of_its_axes_first_key_slowest(monkeypatch):
    """conf/sweep/default.yaml: model x policy x cg = 18 points in Hydra BasicSweeper order."""
    import yaml

    import cgbench.config.compose
    from cgbench.config.schema import BenchConfig

    composed = []  # every point is composed (here by a fast stand-in: other tests compose for real)
    monkeypatch.setattr(cgbench.config.compose.Composer, "load",
                        lambda self, o: composed.append(tuple(o)) or BenchConfig())
    plan = plan_sweep([])
    assert composed == [p.overrides for p in plan.points]

    params = yaml.safe_load((ROOT / "conf/sweep/default.yaml").read_text())["params"]
    axes = [[f"{k}={v}" for v in str(vals).split(",")] for k, vals in params.items()]
    expected = [tuple(p) for p in itertools.product(*axes)]
    assert [p.overrides for p in plan.points] == expected
    assert len(plan.points) == 18 and plan.name == "default"
    # a new folder per sweep: <out_dir>/sweeps/<time>_<name>
    assert plan.out_dir.parent == Path("results/sweeps") and plan.out_dir.name.endswith("_default")
    assert plan.axis_sources == {"model": "sweep default", "policy": "sweep default", "cg": "sweep default"}


def test_command_line_axes_are_the_whole_sweep():
    """No sweep=NAME: exactly the product of the axes given, over the base config (the default
    sweep's cg axis does not come along)."""
    plan = plan_sweep(["seed=range(0,3)", "policy=budget,megatron", "model=hybrid", *SMALL])
    expected = [(f"seed={s}", f"policy={p}", "model=hybrid", "workload=small")
                for s, p in itertools.product(range(3), ["budget", "megatron"])]
    assert [p.overrides for p in plan.points] == expected
    assert plan.varying == ["seed", "policy"] and plan.name == "seed-policy"
    assert set(plan.axis_sources.values()) == {"command line"}
    assert all(p.cfg.cg.kind == load_config([]).cg.kind for p in plan.points), "the base config's grid"


def test_command_line_replaces_an_axis_of_a_named_sweep_in_place_and_adds_fixed_values():
    plan = plan_sweep(["sweep=default", "cg=dense", "model=hybrid", *SMALL, "policy=budget,defer"])
    # config order (model, policy, cg) is kept; the new key is appended
    assert [p.overrides for p in plan.points] == [
        ("model=hybrid", "policy=budget", "cg=dense", "workload=small"),
        ("model=hybrid", "policy=defer", "cg=dense", "workload=small"),
    ]
    assert plan.varying == ["policy"]
    assert [p.params for p in plan.points] == [{"policy": "budget"}, {"policy": "defer"}]
    assert plan.axis_sources["cg"] == "command line (replaces sweep default's megatron,sparse,dense)"
    assert plan.axis_sources["workload"] == "command line"
    assert plan.name == "default"


def test_repeat_adds_trailing_seeds_from_the_configured_seed():
    plan = plan_sweep(["model=transformer,hybrid", "policy=budget", "cg=sparse", "seed=5", *SMALL], repeat=2)
    seeds = [p.overrides[-1] for p in plan.points]
    assert seeds == ["seed=5", "seed=6"] * 2
    assert [p.cfg.seed for p in plan.points] == [5, 6] * 2
    assert plan.sweep_args[-1] == "seed=5,6"
    assert all(sum(override_key(o) == "seed" for o in p.overrides) == 1 for p in plan.points)


def test_sweep_option_picks_another_sweep_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "sweep" / "tiny.yaml").write_text("name: tiny\nparams:\n  policy: budget,megatron\n"
                                             "  workload: small\nrepeat: 2\njobs: 1\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    plan = plan_sweep(["sweep=tiny"])
    assert plan.name == "tiny" and plan.repeat == 2 and len(plan.points) == 4
    assert plan.out_dir.parent == Path("results/sweeps") and plan.out_dir.name.endswith("_tiny")
    assert plan.axis_sources["seed"] == "--repeat"
    assert all("sweep=tiny" not in p.overrides for p in plan.points)


def test_file_names_are_deterministic_readable_and_distinct():
    a = point_file_name(["model=hybrid", "policy=budget"])
    assert a == point_file_name(["model=hybrid", "policy=budget"])
    assert a.startswith("model-hybrid_policy-budget__") and a.endswith(".json")
    # values that sanitise to the same readable text still get different names (the hash)
    assert point_file_name(["cg.graphs=[[8,1,0]]"]) != point_file_name(["cg.graphs=[[8,1,0],]"])
    long = point_file_name([f"workload.prompt_len.value={i}" for i in range(40)])
    assert len(long) < 110


# ---------------------------------------------------------------------------------------------- errors


def test_a_bad_point_fails_before_anything_runs(tmp_path):
    out = tmp_path / "s"
    r = sweep("model=transformer,hybrid", "workload.num_requests=16,0", "--out", str(out))
    assert r.exit_code == 2
    assert "point 2/" in r.stderr and "workload.num_requests" in r.stderr
    assert "Traceback" not in r.output
    assert not out.exists(), "nothing may run or be written before every point is valid"


@pytest.mark.parametrize("args,needle", [
    (["policy=budget,nope"], "policy"),
    (["hydra.launcher.n_jobs=2"], "--jobs 2"),
    (["--launcher", "no_such_launcher", *SMALL], "no_such_launcher"),
    (["--executor", "joblib", *SMALL], "local, slurm"),
    (["--slurm", "partition=cpu", *SMALL], "--executor slurm"),
    (["seed=0,1", "--repeat", "2", *SMALL], "seed"),
    (["--jobs", "2", "workload.num_requests=0,1"], "workload.num_requests"),  # the pool was starting meanwhile
])
def test_bad_sweeps_exit_2_with_one_line(args, needle):
    r = sweep(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


def test_dry_run_shows_exactly_the_command_line_product_and_where_each_axis_came_from(tmp_path):
    r = sweep("seed=range(0,3)", "policy=budget,megatron", "model=hybrid", *SMALL, "--dry-run")
    assert r.exit_code == 0, r.output
    assert "axes: 3 x 2 = 6 points" in r.stdout
    lines = [" ".join(line.split()) for line in r.stdout.splitlines()]
    assert "seed 0,1,2 command line" in lines and "policy budget,megatron command line" in lines
    assert "model hybrid command line" in lines
    assert not any(line.startswith("cg ") for line in lines), "no axis of the default sweep comes along"
    planned = [line.split()[1:4] for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    assert planned == [[f"seed={s}", f"policy={p}", "model=hybrid"]
                       for s, p in itertools.product(range(3), ["budget", "megatron"])]
    r = sweep("sweep=ci", "policy=megatron", "--dry-run")
    assert r.exit_code == 0, r.output
    lines = [" ".join(line.split()) for line in r.stdout.splitlines()]
    assert "policy megatron command line (replaces sweep ci's budget,megatron,defer)" in lines
    assert "model transformer,hybrid sweep ci" in lines
    assert "axes: 2 x 2 x 2 x 2 = 16 points" in r.stdout


def test_dry_run_lists_points_and_writes_nothing(tmp_path):
    r = sweep("model=transformer,hybrid", "policy=budget,megatron,defer", "cg=sparse", *SMALL, "--dry-run",
              "--out", str(tmp_path / "s"))
    assert r.exit_code == 0, r.output
    assert "6 points" in r.stdout
    for m, p in itertools.product(["transformer", "hybrid"], ["budget", "megatron", "defer"]):
        assert point_file_name([f"model={m}", f"policy={p}", "cg=sparse", *SMALL]) in r.stdout
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------------------------- folders


def test_two_sweeps_without_out_land_in_different_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # out_dir=results is relative: both sweeps go under tmp_path/results
    args = ["model=hybrid", "policy=budget,megatron", "cg=sparse", *SMALL]
    first, second, third = sweep(*args), sweep(*args), sweep("model=hybrid", "policy=defer", "cg=sparse", *SMALL)
    assert first.exit_code == second.exit_code == third.exit_code == 0, first.output + second.output
    dirs = [tmp_path / "results/sweeps" / Path(r.stderr.splitlines()[-1].split("index: ")[1]).parent.name
            for r in (first, second, third)]
    assert len(set(dirs)) == 3
    assert sorted(dirs) == sorted((tmp_path / "results/sweeps").iterdir())
    assert all(d.name.endswith(("_policy", "_policy-2", "_point")) for d in dirs), dirs
    # each index lists exactly its own sweep's points, each folder holds exactly those files
    for d, n in zip(dirs, (2, 2, 1), strict=True):
        index = _index(d)
        assert len(index["points"]) == n
        assert sorted(f.name for f in d.glob("*.json")) == sorted([INDEX_NAME] + [p["file"] for p in index["points"]])
        assert (d / "summary.csv").read_text().count("\n") == n + 1


def test_same_second_default_folders_get_a_suffix(tmp_path):
    from cgbench.analysis.sweep.run import claim_out_dir

    plans = [plan_sweep(["model=hybrid", "policy=budget", *SMALL, f"out_dir={tmp_path}"]) for _ in range(2)]
    plans[1].out_dir = plans[0].out_dir  # as if both started in the same second
    a, b = claim_out_dir(plans[0]), claim_out_dir(plans[1])
    assert a != b and b.name == a.name + "-2" and a.is_dir() and b.is_dir()


def test_out_into_an_existing_sweep_is_refused_unless_resume(serial_sweep, tmp_path):
    src, _ = serial_sweep
    out = tmp_path / "s"
    shutil.copytree(src, out)
    before = sorted(f.name for f in out.iterdir())
    r = sweep("model=hybrid", "policy=defer", "cg=sparse", *SMALL, "--out", str(out))
    assert r.exit_code == 2 and "--resume" in r.stderr and "Traceback" not in r.output
    assert sorted(f.name for f in out.iterdir()) == before
    # --resume of another sweep would mix two sweeps in one index: refused too
    r = sweep("model=hybrid", "policy=defer", "cg=sparse", *SMALL, "--out", str(out), "--resume")
    assert r.exit_code == 2 and "another sweep" in r.stderr
    r = sweep(*AXES, "--out", str(out), "--resume")
    assert r.exit_code == 0, r.output
    assert [p["reused"] for p in _index(out)["points"]] == [True] * 4


def test_resume_needs_the_folder(tmp_path):
    r = sweep(*AXES, "--resume")
    assert r.exit_code == 2 and "--out" in r.stderr


def test_summary_formats_and_csv(serial_sweep):
    import csv
    import io

    out, _ = serial_sweep
    index = _index(out)
    rows = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    assert [(r["model"], r["policy"], r["status"]) for r in rows] == \
        [(p["params"]["model"], p["params"]["policy"], "done") for p in index["points"]]
    for r, p in zip(rows, index["points"], strict=True):
        assert float(r["eager_step_fraction"]) == p["metrics"]["eager_step_fraction"]
        assert r["file"] == p["file"]
    r = sweep(*AXES, "--out", str(out), "--resume", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [p["file"] for p in doc["points"]] == [p["file"] for p in index["points"]]
    r = sweep(*AXES, "--out", str(out), "--resume", "--format", "csv")
    assert r.stdout.splitlines()[0].startswith("model,policy,status,health,file,outcome,steps")
    r = sweep(*AXES, "--out", str(out), "--resume", "--format", "markdown")
    assert r.stdout.count("\n| ") == 4 + 1 and "| model | policy | status | health |" in r.stdout
    assert sweep(*AXES, "--format", "yaml", "--dry-run").exit_code == 2


# ---------------------------------------------------------------------------------------------- health, --columns

# defer on a sparse grid serialises a chat workload (long graph waits, a queue); budget does not gate
SERIALISED = ["policy=defer,budget", "cg=sparse", "engine=chunked", "workload=chat", "workload.num_requests=8"]


@pytest.fixture(scope="module")
def flagged_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("flagged") / "s"
    r = sweep(*SERIALISED, "--columns", "tpot_ms.p99,load.served_fraction,goodput_fraction", "--out", str(out))
    assert r.exit_code == 0, r.output
    return out, r


def test_the_summary_shows_each_points_health_and_the_chosen_columns(flagged_sweep):
    out, r = flagged_sweep
    index = _index(out)
    by_policy = {p["params"]["policy"]: p for p in index["points"]}
    for entry in index["points"]:  # the index carries every point's flag codes, as its result has them
        doc = json.loads((out / entry["file"]).read_text())
        assert entry["health"] == [w["code"] for w in doc["warnings"]]
    defer = by_policy["defer"]["health"]
    assert {"long_graph_wait", "overload"} <= set(defer) and by_policy["budget"]["health"] == []
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.split()[:1] in (["defer"], ["budget"])}
    assert rows["budget"].split()[1:3] == ["done", "ok"]
    assert "long_graph_wait," in rows["defer"]  # the codes, compactly
    head = r.stdout[:r.stdout.index("━")]
    assert "TPOT p99" in head and "served share" in head and "output throughput" not in head
    assert rows["budget"].rstrip().endswith("n/a")  # goodput without an SLO
    md = sweep(*SERIALISED, "--columns", "tpot_ms.p99", "--out", str(out), "--resume", "--format", "markdown")
    assert "| policy | status | health | TPOT p99 ms |" in md.stdout
    assert "| budget | kept | ok |" in md.stdout and "| defer | kept | long_graph_wait, " in md.stdout
    js = json.loads(sweep(*SERIALISED, "--columns", "tpot_ms.p99", "--out", str(out), "--resume",
                          "--format", "json").stdout)
    point = next(p for p in js["points"] if p["policy"] == "defer")
    assert point["health"] == defer and set(point) == {"policy", "status", "health", "file", "tpot_ms.p99"}
    doc = json.loads((out / by_policy["defer"]["file"]).read_text())
    assert point["tpot_ms.p99"] == doc["metrics"]["tpot_ms"]["p99"]
    csv_text = sweep(*SERIALISED, "--columns", "tpot_ms.p99", "--out", str(out), "--resume", "--format", "csv").stdout
    assert csv_text.splitlines()[0] == "policy,status,health,file,tpot_ms.p99"
    assert ",kept," + ";".join(defer) + "," in csv_text and ",kept,ok," in csv_text


@pytest.mark.parametrize("columns, words", [
    ("tpot_p99", "'tpot_p99' is not a metric; did you mean tpot_ms.p99?"),
    ("ttft_ms", "ttft_ms is a summary; name one of its fields"),
    ("eager_steps_by_reason", "eager_steps_by_reason is keyed by name"),
    ("ep.rank_requests", "ep.rank_requests is a list, one value per rank"),
    ("", "name at least one metric"),
])
def test_a_bad_column_is_one_error_line_before_anything_runs(tmp_path, columns, words):
    r = sweep("policy=budget,megatron", *SMALL, "--columns", columns, "--out", str(tmp_path / "s"))
    assert r.exit_code == 2 and r.stderr.startswith(f"error: --columns: {words}") and r.stderr.count("\n") == 1
    assert not (tmp_path / "s").exists()


def test_columns_with_dry_run_is_refused():
    r = sweep("policy=budget,megatron", *SMALL, "--columns", "tpot_ms.p99", "--dry-run")
    assert r.exit_code == 2 and "--dry-run prints no summary" in r.stderr


# ---------------------------------------------------------------------------------------------- running

AXES = ["model=transformer,hybrid", "policy=budget,megatron", "cg=sparse", *SMALL]


@pytest.fixture(scope="module")
def serial_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "s"
    r = sweep(*AXES, "--out", str(out))
    assert r.exit_code == 0, r.output
    return out, r


def test_sweep_writes_one_json_per_point_and_an_index(serial_sweep):
    out, r = serial_sweep
    plan = plan_sweep(AXES)
    index = _index(out)
    assert index["status"] == "complete" and index["counts"] == {"done": 4, "failed": 0, "pending": 0}
    assert [p["overrides"] for p in index["points"]] == [list(p.overrides) for p in plan.points]
    for p, entry in zip(plan.points, index["points"], strict=True):
        doc = json.loads((out / p.file).read_text())
        assert entry["file"] == p.file and entry["status"] == "done"
        assert doc["overrides"] == list(p.overrides)
        assert entry["metrics"] == headline(doc["metrics"])
    assert sorted(f.name for f in out.glob("*.json")) == sorted([INDEX_NAME] + [p.file for p in plan.points])
    assert (out / "summary.csv").is_file()
    # the summary table has one row per point
    assert sum(line.lstrip().startswith(("transformer", "hybrid")) for line in r.stdout.splitlines()) == 4


def test_a_sweep_point_equals_the_same_point_run_alone(serial_sweep):
    out, _ = serial_sweep
    p = plan_sweep(AXES).points[3]
    alone = run_point(load_config(list(p.overrides)), list(p.overrides))
    assert _canon(json.loads((out / p.file).read_text())) == _canon(alone)


def test_jobs_2_gives_byte_identical_metrics(serial_sweep, tmp_path):
    out, _ = serial_sweep
    r = sweep(*AXES, "--jobs", "2", "--out", str(tmp_path / "p"))
    assert r.exit_code == 0, r.output
    assert _index(tmp_path / "p")["jobs"] == 2
    for p in plan_sweep(AXES).points:
        one = json.loads((out / p.file).read_text())
        two = json.loads((tmp_path / "p" / p.file).read_text())
        assert _canon(one) == _canon(two), p.overrides


def test_resume_runs_only_missing_or_unreadable_points(serial_sweep, tmp_path):
    src, _ = serial_sweep
    out = tmp_path / "s"
    shutil.copytree(src, out)
    files = [p.file for p in plan_sweep(AXES).points]
    (out / files[0]).unlink()
    (out / files[2]).write_text('{"schema_version": 2, "metr')  # unreadable
    kept = {f: (out / f).stat().st_mtime_ns for f in (files[1], files[3])}
    r = sweep(*AXES, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    index = _index(out)
    assert [p["reused"] for p in index["points"]] == [False, True, False, True]
    assert index["status"] == "complete"
    assert {f: (out / f).stat().st_mtime_ns for f in kept} == kept
    for f in (files[0], files[2]):
        assert _canon(json.loads((out / f).read_text())) == _canon(json.loads((src / f).read_text()))


_SLOW_SWEEP = """
import sys, time
sys.path.insert(0, {root!r})
import typer
import cgbench.analysis.sweep.run as sw
from cgbench.cli.sweep import sweep_cmd

_run = sw.execute_point
def slow(*args):  # a deterministic pace so the test can stop the sweep half-way
    time.sleep(0.2)
    return _run(*args)
sw.execute_point = slow
app = typer.Typer()
app.command("sweep")(sweep_cmd)
app.command("other")(lambda: None)
app()
"""


STOP_AXES = ["model=hybrid", "policy=budget,megatron", "cg=sparse,dense,megatron", *SMALL]


def test_ctrl_c_keeps_finished_points_records_them_and_exits_130(tmp_path, monkeypatch):
    import cgbench.analysis.sweep.run as sw

    real, calls = sw.execute_point, []

    def interrupted_third(*args):  # Ctrl-C lands while the third point runs
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(sw, "execute_point", interrupted_third)
    out = tmp_path / "s"
    r = sweep(*STOP_AXES, "--out", str(out))
    assert r.exit_code == 130
    assert "interrupted: 2 of 6 points finished" in r.stderr and "--resume" in r.stderr
    index = _index(out)
    assert index["status"] == "interrupted"
    assert [p["status"] for p in index["points"]] == ["done", "done"] + ["pending"] * 4
    assert sorted(f.name for f in out.glob("model-*.json")) == sorted(p["file"] for p in index["points"][:2])
    monkeypatch.setattr(sw, "execute_point", real)
    r = sweep(*STOP_AXES, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert [p["reused"] for p in _index(out)["points"]] == [True, True] + [False] * 4


def test_a_killed_sweep_leaves_complete_files_and_resume_finishes_it(tmp_path):
    out = tmp_path / "s"
    script = tmp_path / "slow.py"
    script.write_text(_SLOW_SWEEP.format(root=str(ROOT)))
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script), "sweep", *STOP_AXES, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list(out.glob("model-*.json"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before it could be killed"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    finished = sorted(f.name for f in out.glob("model-*.json"))
    assert 2 <= len(finished) < 6
    for f in out.glob("*.json"):  # atomic writes: every file there is complete
        json.loads(f.read_text())
    r = sweep(*STOP_AXES, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    index = _index(out)
    assert index["status"] == "complete"
    assert sorted(p["file"] for p in index["points"] if p["reused"]) == finished


def test_a_failing_point_is_recorded_and_the_rest_still_run(tmp_path, monkeypatch):
    import cgbench.pipeline as runner_mod

    real = runner_mod.run_point

    def flaky(cfg, overrides=None, **kw):
        if cfg.policy.name == "megatron":
            raise RuntimeError("boom")
        return real(cfg, overrides, **kw)

    monkeypatch.setattr(runner_mod, "run_point", flaky)
    r = sweep("model=hybrid", "policy=budget,megatron", "cg=sparse", *SMALL, "--out", str(tmp_path / "s"))
    assert r.exit_code == 1
    index = _index(tmp_path / "s")
    assert [p["status"] for p in index["points"]] == ["done", "failed"]
    assert "RuntimeError: boom" in index["points"][1]["error"] and index["status"] == "failed"


# ---------------------------------------------------------------------------------------------- old Hydra spellings


@pytest.mark.parametrize("args,new", [
    (["--launcher", "joblib"], "--jobs N"),
    (["--launcher", "submitit_local"], "--jobs N"),
    (["--launcher", "submitit_slurm"], "--executor slurm"),
    (["--launcher", "basic"], "--jobs 1"),
    (["hydra/launcher=joblib"], "--jobs N"),
    (["hydra.launcher.partition=gpu"], "--executor slurm --slurm partition=gpu"),
    (["hydra.launcher.n_jobs=4"], "cgbench sweep --jobs 4"),
    (["hydra.sweep.dir=/tmp/x"], "--out DIR"),
])
def test_the_old_hydra_spellings_exit_2_naming_the_new_one(tmp_path, args, new):
    out = tmp_path / "s"
    r = sweep(*args, *SMALL, "--out", str(out))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and new in lines[0] and "Traceback" not in r.output, r.stderr
    assert not out.exists()


def test_executor_slurm_without_slurm_is_one_clear_error(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import cgbench.analysis.sweep.executor_slurm as slurm

    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)  # as on a machine without SLURM's clients
    r = sweep("--executor", "slurm", *SMALL, "--out", str(tmp_path / "s"))
    assert r.exit_code == 2 and "sbatch" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "s").exists()
