"""Sweeps on a real SLURM cluster: the single-node cluster of scripts/slurm-local.sh.

The tests marked ``slurm`` need that cluster up (`bash scripts/slurm-local.sh start`; `.ci/run`
starts it, runs `make test-slurm`, and stops it); without it they skip and say why. Every sweep
goes through the real path: `cgbench sweep --executor slurm` in a subprocess, one job array per
submission (submitit's ``AutoExecutor.map_array``), its states read back from accounting (sacct).
How an array's tasks are reported without a cluster: tests/analysis/test_executors.py.
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
from pathlib import Path

import pytest

from cgbench.analysis.sweep.run import DONE, FAILED, INDEX_NAME, PENDING

pytestmark = pytest.mark.slow  # launchers and processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
# 12 points of about a second each
AXES = ["workload=small", "model=transformer,hybrid", "policy=budget,megatron,defer", "cg=dense,sparse"]
# submitit signals a job 90-120 s before its limit: 5 minutes leaves the points ample time
SLURM = ["--executor", "slurm", "--slurm", "timeout_min=5"]
ONE_A_TASK = ["--slurm", "points_per_task=1"]  # for the tests that cancel single points' tasks
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED")


def _state_dir() -> Path:
    return Path(os.environ.get("CGBENCH_SLURM_DIR") or Path(tempfile.gettempdir()) / "cgbench-slurm")


@pytest.fixture(scope="module")
def cluster():
    """The local cluster's slurm.conf, exported as SLURM_CONF for the clients and the sweeps."""
    pytest.importorskip("submitit", reason="submitit not installed (pip install 'cgbench[slurm]')")
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


def _launches(sweep_dir: Path) -> list[Path]:
    """The folders of a sweep's submissions (one job array each), oldest first."""
    return sorted((sweep_dir / "slurm").iterdir())


def _arrays(sweep_dir: Path) -> list[str]:
    """The SLURM array ids of a sweep's submissions, oldest first."""
    out = []
    for launch in _launches(sweep_dir):
        ids = {d.name.split("_")[0] for d in launch.iterdir() if re.fullmatch(r"\d+_\d+", d.name)}
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
    """Each submission's task results (submitit's result files), oldest submission first."""
    return [sorted(launch.glob("*/*_result.pkl")) for launch in _launches(sweep_dir)] \
        if (sweep_dir / "slurm").is_dir() else []


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
    assert index["executor"] == "slurm"
    _same_metrics_as_local(out, local_sweep)
    [array] = _arrays(out)
    assert sacct_states(array, 12) == {f"{array}_{i}": "COMPLETED" for i in range(12)}
    assert len(_results_by_launch(out)[0]) == 12


@pytest.mark.slurm
def test_scancel_of_the_array_then_resume_on_slurm_runs_no_point_twice(cluster, local_sweep, tmp_path):
    out = tmp_path / "cancelled"
    # --jobs 1: one task at a time, so the array is cancelled with most points not yet run; one point a task
    proc = subprocess.Popen(_cgbench_cmd("sweep", *AXES, *SLURM, *ONE_A_TASK, "--jobs", "1", "--out", out),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: sum(map(len, _results_by_launch(out))) >= 3, 120, "three points to finish")
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
    assert all(states.get(f"{array}_{p['index']}", "CANCELLED").startswith("CANCELLED") for p in missing)
    kept = {p["file"]: ((out / p["file"]).read_bytes(), (out / p["file"]).stat().st_mtime_ns) for p in done}
    assert not any((out / p["file"]).exists() for p in missing)

    r = cgbench("sweep", *AXES, *SLURM, *ONE_A_TASK, "--resume", "--out", out)
    assert r.returncode == 0, r.stderr
    _same_metrics_as_local(out, local_sweep)
    index = _index(out)
    assert {p["file"] for p in index["points"] if p["reused"]} == set(kept)
    for name, (content, mtime) in kept.items():  # finished points are not rewritten
        assert (out / name).read_bytes() == content and (out / name).stat().st_mtime_ns == mtime
    # no point ran twice: the second array holds exactly the missing points
    first, second = _results_by_launch(out)
    assert len(first) == len(done) and len(second) == len(missing)
    _, array2 = _arrays(out)
    assert set(sacct_states(array2, len(missing)).values()) == {"COMPLETED"}


@pytest.mark.slurm
def test_scancel_of_one_task_then_local_resume(cluster, local_sweep, tmp_path):
    out = tmp_path / "one-task"
    proc = subprocess.Popen(_cgbench_cmd("sweep", *AXES, *SLURM, "--out", out),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (out / "slurm").is_dir() and any((out / "slurm").glob("*/*_11")), 60,
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
def test_a_killed_slurm_sweep_resumes_on_slurm(cluster, local_sweep, tmp_path):
    """SIGKILL of the submitting process: the folder holds complete files only, the index reads
    interrupted, and --resume submits an array of the points without a file."""
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cgbench_cmd("sweep", *AXES, *SLURM, *ONE_A_TASK, "--jobs", "1", "--out", out),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: sum(map(len, _results_by_launch(out))) >= 2, 120, "two points to finish")
    finally:
        proc.kill()
    proc.wait(timeout=30)
    [array] = _arrays(out)
    subprocess.run(["scancel", array], check=True)  # the tasks outlive their submitter: stop them
    _wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True).stdout.strip(),
              60, "the array to leave the queue")
    for f in out.glob("*.json"):  # atomic writes: every file there is complete
        json.loads(f.read_text())
    from cgbench.analysis.sweep.run import load_index

    assert load_index(out)["status"] == "interrupted"
    finished = {f.name for f in out.glob("workload-*.json")}
    r = cgbench("sweep", *AXES, *SLURM, "--resume", "--out", out)
    assert r.returncode == 0, r.stderr
    _same_metrics_as_local(out, local_sweep)
    assert {p["file"] for p in _index(out)["points"] if p["reused"]} == finished
    # the new submission holds exactly the points without a file (in tasks of several points each)
    resubmitted = {f for _, files in _index(out)["slurm"]["submissions"][-1]["tasks"] for f in files}
    assert len(resubmitted) == 12 - len(finished) and not resubmitted & finished


@pytest.mark.slurm
def test_a_failed_task_is_reported_with_its_log(cluster, tmp_path):
    out = tmp_path / "failing"
    # the batch script ends before the job starts: the task FAILS and writes nothing but its log
    r = cgbench("sweep", "workload=small", "model=transformer", "policy=budget,megatron", "cg=dense", *SLURM,
                "--slurm", 'setup=["echo no venv on this node >&2","exit 3"]', "--out", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    index = _index(out)
    assert index["status"] == "failed" and [p["status"] for p in index["points"]] == [FAILED, FAILED]
    [array] = _arrays(out)
    for p in index["points"]:
        m = re.search(rf"array task {array}_{p['index']} ended FAILED without a result \(log: (\S+)\)", p["error"])
        assert m, p["error"]
        assert "no venv on this node" in Path(m.group(1)).read_text()
    assert "2 of 2 points failed" in r.stderr and "log:" in r.stderr


@pytest.mark.slurm
def test_a_bad_slurm_setting_is_one_line(cluster, tmp_path):
    r = cgbench("sweep", "workload=small", *SLURM, "--slurm", "no_such_option=1", "--out", tmp_path / "s")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no_such_option" in r.stderr
    assert not (tmp_path / "s").exists(), "a refused setting leaves no folder behind"


# ---------------------------------------------------------------------------------------------- scale, detach

BIG = 2_000  # tiny points: two requests each
BIG_AXES = ["workload=small", "workload.num_requests=2", f"seed=range(0,{BIG})"]


def _max_array_size() -> int:
    r = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True)
    from cgbench.analysis.sweep.slurm_arrays import parse_max_array_size

    value = parse_max_array_size(r.stdout)
    assert value is not None, "scontrol show config names no MaxArraySize"
    return value


def _tasks_by_array(sweep_dir: Path) -> dict[str, int]:
    """Array id -> its tasks, from the submissions sweep.json records, each checked in accounting."""
    counts: dict[str, int] = {}
    for submission in _index(sweep_dir)["slurm"]["submissions"]:
        for job_id, _ in submission["tasks"]:
            array = job_id.split("_")[0]
            counts[array] = counts.get(array, 0) + 1
    for array, n in counts.items():
        assert set(sacct_states(array, n).values()) == {"COMPLETED"}, array
    return counts


@pytest.mark.slurm
def test_a_2000_point_sweep_is_split_at_max_array_size_and_equals_the_local_one(cluster, tmp_path):
    """Above the cluster's MaxArraySize (scripts/slurm-local.sh lowers it to 50): the array tasks, of
    many points each, go into several arrays, none past the limit, and every point's metrics are the
    local executor's byte for byte."""
    limit = _max_array_size()
    if limit >= BIG:
        pytest.skip(f"MaxArraySize {limit} holds a {BIG}-point sweep in one array (CGBENCH_SLURM_MAX_ARRAY_SIZE)")
    local = tmp_path / "local"
    r = cgbench("sweep", *BIG_AXES, "--jobs", "2", "--out", local, timeout=600)
    assert r.returncode == 0, r.stderr
    per_task = -(-BIG // (limit + limit // 4 + 1))  # a few more tasks than one array holds
    out = tmp_path / "slurm"
    t0 = time.monotonic()
    r = cgbench("sweep", *BIG_AXES, *SLURM, "--slurm", f"points_per_task={per_task}", "--out", out, timeout=1200)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    tasks = -(-BIG // per_task)
    by_array = _tasks_by_array(out)
    assert sum(by_array.values()) == tasks and len(by_array) == -(-tasks // limit) >= 2, by_array
    assert max(by_array.values()) <= limit
    m = re.search(rf"SLURM: {BIG} points in {tasks} array tasks of up to {per_task} points, {len(by_array)} arrays "
                  rf".*MaxArraySize {limit} from scontrol show config\), submitted in ([\d.]+) s", r.stderr)
    assert m, r.stderr
    index = _index(out)
    assert index["status"] == "complete" and index["counts"][DONE] == BIG
    assert len(index["slurm"]["submissions"][0]["tasks"]) == tasks
    for p in index["points"]:
        assert _metrics_text(out / p["file"]) == _metrics_text(local / p["file"]), p["file"]
    print(f"\n{BIG} points, {tasks} tasks in {len(by_array)} arrays: submitted in {m.group(1)} s, "
          f"{wall:.1f} s in all ({BIG / wall:.0f} points/s)")


@pytest.mark.slurm
def test_detach_submits_and_exits_and_resume_of_the_folder_collects(cluster, local_sweep, tmp_path):
    out = tmp_path / "detached"
    t0 = time.monotonic()
    # --jobs 1: one task at a time, so most of the sweep is still on the cluster when the command has exited
    r = cgbench("sweep", *AXES, *SLURM, "--slurm", "points_per_task=3", "--jobs", "1", "--detach", "--out", out)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 60 and "submitted:" in r.stderr and f"--resume {out}" in r.stderr
    index = _index(out)
    assert index["status"] == "submitted" and index["counts"][PENDING] + index["counts"][DONE] == 12
    [submission] = index["slurm"]["submissions"]
    assert [len(files) for _, files in submission["tasks"]] == [3, 3, 3, 3]
    # the folder alone: its sweep, on SLURM with the settings it was submitted with
    r = cgbench("sweep", "--resume", out, timeout=300)
    assert r.returncode == 0, r.stderr
    _same_metrics_as_local(out, local_sweep)
    assert _index(out)["executor"] == "slurm"
    assert len(_launches(out)) == 1, "collected, not submitted again"
    assert [len(x) for x in _results_by_launch(out)] == [4]


@pytest.mark.slurm
def test_resume_of_a_detached_sweep_resubmits_only_the_points_of_a_cancelled_task(cluster, local_sweep, tmp_path):
    out = tmp_path / "detached-cancelled"
    r = cgbench("sweep", *AXES, *SLURM, "--slurm", "points_per_task=3", "--jobs", "1", "--detach", "--out", out)
    assert r.returncode == 0, r.stderr
    [submission] = _index(out)["slurm"]["submissions"]
    last, files = submission["tasks"][-1]
    subprocess.run(["scancel", last], check=True)  # the last task: still pending behind --jobs 1
    _wait_for(lambda: last not in subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True,
                                                 text=True).stdout.split(), 60, f"{last} to leave the queue")
    r = cgbench("sweep", "--resume", out, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "3 points of array tasks that ended without writing them run again" in r.stderr
    _same_metrics_as_local(out, local_sweep)
    first, second = _results_by_launch(out)
    assert len(first) == 3 and len(second) == 1  # three tasks collected, one new task of the three points
    assert {f for _, fs in _index(out)["slurm"]["submissions"][-1]["tasks"] for f in fs} == set(files)


@pytest.mark.slurm
def test_advise_on_slurm_ranks_the_same_candidates_as_locally(cluster, tmp_path):
    args = ["advise", "model=hybrid", "policy=megatron", "workload.num_requests=64", "--budget-graphs", "20", "-n", "4",
            "--format", "json"]
    local = cgbench(*args, "--out", tmp_path / "local")
    assert local.returncode == 0, local.stderr
    r = cgbench(*args, "--out", tmp_path / "slurm", *SLURM)
    assert r.returncode == 0, r.stderr
    assert re.search(r"SLURM: \d+ candidates? in \d+ array tasks? ", r.stderr), r.stderr
    a, b = json.loads(local.stdout), json.loads(r.stdout)
    assert b["recommended"]["name"] == a["recommended"]["name"]
    assert [(c["name"], c["metrics"]) for c in b["candidates"]] == [(c["name"], c["metrics"]) for c in a["candidates"]]
    assert list((tmp_path / "slurm" / "slurm").iterdir()), "the tasks' files go under <out>/slurm/"


@pytest.mark.slurm
def test_the_readmes_slurm_lines_run_on_the_cluster(cluster, tmp_path):
    """The README's usage lines that submit to SLURM (the README test runs the rest), as printed, from
    a fresh folder; a detached sweep is then collected with the --resume its comment names."""
    from tests.cli.test_readme import usage_commands

    lines = usage_commands(cluster=True)
    assert lines, "the README shows a SLURM sweep"
    for argv in lines:
        r = subprocess.run(_cgbench_cmd(*argv[1:]), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (argv, r.stderr[-2000:])
        if "--detach" in argv:
            out = tmp_path / argv[argv.index("--out") + 1]
            r = subprocess.run(_cgbench_cmd("sweep", "--resume", out), cwd=tmp_path, capture_output=True,
                               text=True, timeout=900)
            assert r.returncode == 0, (argv, r.stderr[-2000:])
            counts = _index(out)["counts"]
            assert counts[FAILED] == 0 and counts[PENDING] == 0 and counts[DONE] > 0, counts
