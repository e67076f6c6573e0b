"""Sweeps on a real SLURM cluster: the single-node cluster of scripts/slurm-local.sh.

The tests marked ``slurm`` need that cluster up (`bash scripts/slurm-local.sh start`; `.ci/run`
starts it, runs `make test-slurm`, and stops it); without it they skip and say why. Every sweep
goes through the real path: `cgbench sweep --launcher submitit_slurm` in a subprocess, one job
array per sweep, its states read back from accounting (sacct). The last tests need no cluster:
they check how the array's tasks are matched to points and how unfinished ones are reported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from cgbench.analysis.sweep import DONE, FAILED, INDEX_NAME, PENDING

pytestmark = pytest.mark.slow  # launchers and processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
# 12 points of about a second each
AXES = ["workload=small", "model=transformer,hybrid", "policy=budget,megatron,defer", "cg=dense,sparse"]
# submitit signals a job 90-120 s before its limit: 5 minutes leaves the points ample time
SLURM = ["--launcher", "submitit_slurm", "hydra.launcher.timeout_min=5"]
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED")


def _state_dir() -> Path:
    return Path(os.environ.get("CGBENCH_SLURM_DIR") or Path(tempfile.gettempdir()) / "cgbench-slurm")


@pytest.fixture(scope="module")
def cluster():
    """The local cluster's slurm.conf, exported as SLURM_CONF for the clients and the sweeps."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher not installed")
    state = _state_dir()
    reason_file = state / "unavailable"
    if reason_file.is_file():
        pytest.skip(f"SLURM cannot run here: {reason_file.read_text().strip()}")
    up = shutil.which("sinfo") is not None and subprocess.run(
        ["bash", str(SCRIPT), "status"], capture_output=True, env={**os.environ, "CGBENCH_SLURM_DIR": str(state)}
    ).returncode == 0
    if not up:
        pytest.skip("no local SLURM cluster is up (bash scripts/slurm-local.sh start; .ci/run starts one)")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    yield os.environ["SLURM_CONF"]
    if saved is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = saved


def _cgbench_cmd(*args: str | Path) -> list[str]:
    exe = Path(sys.executable).with_name("cgbench")
    head = [str(exe)] if exe.exists() else [sys.executable, "-c", "from cgbench.cli.app import main; main()"]
    return head + [str(a) for a in args]


def cgbench(*args: str | Path, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(_cgbench_cmd(*args), capture_output=True, text=True, timeout=timeout)


def _index(d: Path) -> dict:
    return json.loads((d / INDEX_NAME).read_text())


def _metrics_text(path: Path) -> str:
    """The point's metrics as the result writer serialises them (byte comparison of that section)."""
    return json.dumps(json.loads(path.read_text())["metrics"], indent=2)


def _arrays(sweep_dir: Path) -> list[str]:
    """The SLURM array ids of a sweep's launches, oldest launch first."""
    out = []
    for launch in sorted((sweep_dir / "launcher").iterdir()):
        ids = {d.name.split("_")[0] for d in (launch / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", d.name)}
        out.extend(sorted(ids, key=int))
    return out


def _expand(job_id: str) -> list[str]:
    """``7_3`` -> [7_3]; ``7_[3-5,9%1]`` -> [7_3, 7_4, 7_5, 7_9] (sacct collapses never-started tasks)."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out.extend(f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1))
    return out


def sacct_states(array: str, n: int, wait_s: float = 30) -> dict[str, str]:
    """Task -> final state of an n-task array, from accounting (waits while slurmdbd catches up)."""
    deadline = time.monotonic() + wait_s
    while True:
        r = subprocess.run(["sacct", "-n", "-X", "-P", "-j", array, "-o", "JobID,State"], capture_output=True,
                           text=True)
        states = {t: s for line in r.stdout.splitlines() if "|" in line
                  for jid, s in [line.split("|", 1)] for t in _expand(jid)}
        if (len(states) == n and not any(s.startswith(ACTIVE) for s in states.values())) \
                or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


def _results_by_launch(sweep_dir: Path) -> list[list[Path]]:
    return [sorted(launch.glob("*/result.json")) for launch in sorted((sweep_dir / "launcher").iterdir())]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "sweep"
    r = cgbench("sweep", *AXES, "--out", out)
    assert r.returncode == 0, r.stderr
    return out


def _same_metrics_as_local(sweep_dir: Path, local: Path) -> None:
    index = _index(sweep_dir)
    assert index["status"] == "complete" and index["counts"][DONE] == 12
    for p in index["points"]:
        assert _metrics_text(sweep_dir / p["file"]) == _metrics_text(local / p["file"]), p["file"]


# ---------------------------------------------------------------------------------------------- cluster


@pytest.mark.slurm
def test_slurm_sweep_is_one_completed_array_with_the_local_metrics(cluster, local_sweep, tmp_path):
    out = tmp_path / "slurm"
    r = cgbench("sweep", *AXES, *SLURM, "--out", out)
    assert r.returncode == 0, r.stderr
    index = _index(out)
    assert index["launcher"] == "submitit_slurm"
    _same_metrics_as_local(out, local_sweep)

    [array] = _arrays(out)
    assert sacct_states(array, 12) == {f"{array}_{i}": "COMPLETED" for i in range(12)}
    # array task i ran the sweep's point i: the collector explains unfinished points by that match
    [launch] = sorted((out / "launcher").iterdir())
    for i, p in enumerate(index["points"]):
        started = json.loads((launch / str(i) / "started.json").read_text())
        assert started["overrides"] == p["overrides"] and started["task"] == f"{array}_{i}"


@pytest.mark.slurm
def test_scancel_of_the_array_then_resume_on_slurm_runs_no_point_twice(cluster, local_sweep, tmp_path):
    out = tmp_path / "cancelled"
    # --jobs 1: one task at a time, so the array is cancelled with most points not yet run
    proc = subprocess.Popen(_cgbench_cmd("sweep", *AXES, *SLURM, "--jobs", "1", "--out", out),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (out / "launcher").is_dir() and sum(map(len, _results_by_launch(out))) >= 3, 120,
                  "three points to finish")
        [array] = _arrays(out)
        subprocess.run(["scancel", array], check=True)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "points missing" in err and "--resume" in err

    index = _index(out)
    assert index["status"] == "incomplete"
    done = [p for p in index["points"] if p["status"] == DONE]
    missing = [p for p in index["points"] if p["status"] == PENDING]
    assert 3 <= len(done) < 12 and len(done) + len(missing) == 12
    assert all(f"array task {array}_{p['index']} was cancelled" in p["error"] for p in missing)
    states = sacct_states(array, 12)
    assert all(states[f"{array}_{p['index']}"].startswith("CANCELLED") for p in missing)
    assert all(states[f"{array}_{p['index']}"] in ("COMPLETED", "CANCELLED by 0") for p in done)
    kept = {p["file"]: ((out / p["file"]).read_bytes(), (out / p["file"]).stat().st_mtime_ns) for p in done}
    assert not any((out / p["file"]).exists() for p in missing)

    r = cgbench("sweep", *AXES, *SLURM, "--resume", "--out", out)
    assert r.returncode == 0, r.stderr
    _same_metrics_as_local(out, local_sweep)
    index = _index(out)
    assert {p["file"] for p in index["points"] if p["reused"]} == set(kept)
    for name, (content, mtime) in kept.items():  # finished points are not rewritten
        assert (out / name).read_bytes() == content and (out / name).stat().st_mtime_ns == mtime
    # no point ran twice: every point has exactly one result over both arrays, and the second
    # array's tasks of the kept points returned without starting them
    first, second = _results_by_launch(out)
    ran = Counter(tuple(json.loads(f.read_text())["overrides"]) for f in first + second)
    assert sorted(ran.values()) == [1] * 12 and len(first) == len(done)
    [_, launch2] = sorted((out / "launcher").iterdir())
    assert len(list(launch2.glob("*/started.json"))) == 12 - len(done)
    _, array2 = _arrays(out)
    assert set(sacct_states(array2, 12).values()) == {"COMPLETED"}


@pytest.mark.slurm
def test_scancel_of_one_task_then_local_resume(cluster, local_sweep, tmp_path):
    out = tmp_path / "one-task"
    proc = subprocess.Popen(_cgbench_cmd("sweep", *AXES, *SLURM, "--out", out),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (out / "launcher").is_dir() and any((out / "launcher").glob("*/.submitit/*_11")), 60,
                  "the array to be submitted")
        [array] = _arrays(out)
        subprocess.run(["scancel", f"{array}_11"], check=True)  # the last task: still queued
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    index = _index(out)
    assert [p["status"] for p in index["points"]] == [DONE] * 11 + [PENDING]
    assert f"array task {array}_11 was cancelled before it started" in index["points"][11]["error"]
    assert "1 of 12 points missing" in err
    # SLURM drops a task cancelled while pending from its array: accounting has no record of it
    assert sacct_states(array, 11) == {f"{array}_{i}": "COMPLETED" for i in range(11)}
    mtimes = {p["file"]: (out / p["file"]).stat().st_mtime_ns for p in index["points"][:11]}

    r = cgbench("sweep", *AXES, "--resume", "--out", out)  # in-process: the same sweep folder
    assert r.returncode == 0, r.stderr
    _same_metrics_as_local(out, local_sweep)
    index = _index(out)
    assert [p["reused"] for p in index["points"]] == [True] * 11 + [False]
    assert all((out / f).stat().st_mtime_ns == m for f, m in mtimes.items())


@pytest.mark.slurm
def test_a_failed_task_is_reported_with_its_log(cluster, tmp_path):
    out = tmp_path / "failing"
    # the batch script ends before the job starts: the task FAILS and writes nothing but its log
    r = cgbench("sweep", "workload=small", "model=transformer", "policy=budget,megatron", "cg=dense", *SLURM,
                'hydra.launcher.setup=["echo no venv on this node >&2","exit 3"]', "--out", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    index = _index(out)
    assert index["status"] == "failed" and [p["status"] for p in index["points"]] == [FAILED, FAILED]
    [array] = _arrays(out)
    for p in index["points"]:
        m = re.search(rf"array task {array}_{p['index']} ended FAILED without a result \(log: (\S+)\)", p["error"])
        assert m, p["error"]
        assert "no venv on this node" in Path(m.group(1)).read_text()
    assert "2 of 2 points failed" in r.stderr and "log:" in r.stderr


# ---------------------------------------------------------------------------------------------- no cluster


def test_array_tasks_map_to_hydra_job_numbers_across_batches(tmp_path):
    from cgbench.config.slurm_array import SUBMITIT_FOLDER, array_job_ids

    for name in ["40", "40_0", "40_1", "40_2", "41_1", "41_0", "notes", "9_0"]:
        (tmp_path / SUBMITIT_FOLDER / name).mkdir(parents=True)
    # arrays in id order, each continuing the job numbers of the one before
    assert array_job_ids(tmp_path) == {0: "9_0", 1: "40_0", 2: "40_1", 3: "40_2", 4: "41_0", 5: "41_1"}
    assert array_job_ids(tmp_path / "nothing") == {}


def test_unfinished_tasks_are_missing_when_cancelled_and_failed_with_their_log_otherwise(tmp_path):
    from cgbench.analysis.sweep import plan_sweep
    from cgbench.config.launcher_app import RESULT_NAME, STARTED_NAME, collect
    from cgbench.config.slurm_array import ArrayTask
    from cgbench.results.document import write_json_atomic

    plan = plan_sweep(["workload=small", "model=transformer", "policy=budget,megatron,defer", "cg=dense,sparse"],
                      out_dir=tmp_path / "sweep")
    from cgbench.pipeline import run_point

    root = tmp_path / "sweep" / "launcher" / "t"
    write_json_atomic(root / "0" / RESULT_NAME, run_point(plan.points[0].cfg, list(plan.points[0].overrides)))
    write_json_atomic(root / "1" / STARTED_NAME, {"overrides": list(plan.points[1].overrides)})
    states = ["COMPLETED", "CANCELLED by 0", "CANCELLED by 0", "TIMEOUT", "FAILED", "COMPLETED"]
    tasks = {i: ArrayTask(f"7_{i}", i, s, Path(f"/logs/7_{i}.err")) for i, s in enumerate(states)}
    results = collect(plan, root, resume=False, tasks=tasks)
    assert [r.status for r in results] == [DONE, PENDING, PENDING, FAILED, FAILED, FAILED]
    assert results[1].error == "not run: array task 7_1 was cancelled while it ran"
    assert results[2].error == "not run: array task 7_2 was cancelled before it started"
    assert results[3].error == "array task 7_3 ended TIMEOUT without a result (log: /logs/7_3.err)"
    assert "ended COMPLETED without a result" in results[5].error
    # a job whose number is not its point's index: the tasks cannot explain the points
    write_json_atomic(root / "4" / STARTED_NAME, {"overrides": list(plan.points[2].overrides)})
    results = collect(plan, root, resume=False, tasks=tasks)
    assert all(r.error.startswith("no result in") for r in results[1:])
