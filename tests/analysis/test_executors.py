"""The three executors behind ``cgbench sweep`` and ``cgbench advise``: the same outcomes in this
process and in the pool, pool workers that die with their parent, chunking, and how a SLURM array's
tasks are reported (with stand-in job handles here; on the local cluster where it is up)."""

from __future__ import annotations

import json
import operator
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cgbench.analysis.sweep import executor_slurm
from cgbench.analysis.sweep.executors import MAX_CHUNK, InProcess, LocalPool, Outcome, Task, chunk_size, local_executor
from cgbench.analysis.sweep.run import execute_point, plan_sweep

ROOT = Path(__file__).resolve().parents[2]
POINTS = ["workload=small", "model=transformer,hybrid", "policy=budget,megatron,defer"]


def _collect(executor, fn, tasks) -> dict[int, Outcome]:
    got: dict[int, Outcome] = {}
    try:
        executor.run(fn, tasks, lambda o: got.__setitem__(o.key, o))
    finally:
        executor.close()
    return got


def _point_tasks(folder: Path) -> list[Task]:
    plan = plan_sweep(POINTS)
    tasks = [Task(p.index, (p.cfg, p.overrides, folder / p.file)) for p in plan.points]
    folder.mkdir()
    (folder / "blocked").mkdir()  # a point whose file is a folder: its task fails, the others run
    return [*tasks, Task(99, (plan.points[0].cfg, plan.points[0].overrides, folder / "blocked"))]


@pytest.mark.slow
def test_in_process_and_pool_report_the_same_outcomes_and_write_the_same_points(tmp_path):
    serial = _collect(InProcess(), execute_point, _point_tasks(tmp_path / "one"))
    pooled = _collect(LocalPool(2), execute_point, _point_tasks(tmp_path / "two"))
    assert sorted(serial) == sorted(pooled) == [0, 1, 2, 3, 4, 5, 99]
    for key in serial:
        same_error = (serial[key].error or "").replace("/one/", "/two/")
        assert (serial[key].value, same_error) == (pooled[key].value, pooled[key].error or ""), key
    assert serial[0].ok and serial[0].value["metrics"]["steps"] > 0
    first = json.loads((tmp_path / "one" / plan_sweep(POINTS).points[0].file).read_text())
    assert serial[0].value["health"] == [w["code"] for w in first["warnings"]]  # the document's flags, in order
    assert not serial[99].ok and "cannot write" in serial[99].error and "directory" in serial[99].error
    for f in sorted((tmp_path / "one").glob("*.json")):
        one, two = json.loads(f.read_text()), json.loads((tmp_path / "two" / f.name).read_text())
        assert one["metrics"] == two["metrics"] and one["config"] == two["config"], f.name


@pytest.mark.slow
def test_an_exception_of_any_type_is_the_tasks_error_in_one_line():
    got = _collect(LocalPool(2), operator.truediv, [Task(0, (6, 3)), Task(1, (1, 0))])
    assert got[0] == Outcome(0, 2.0, wall_s=got[0].wall_s)
    assert got[1].error == "ZeroDivisionError: division by zero" and not got[1].missing


@pytest.mark.slow
def test_a_worker_that_dies_fails_its_tasks_and_the_rest_without_stopping_the_caller():
    pool = LocalPool(2)
    got: dict[int, Outcome] = {}
    pool.run(os._exit, [Task(i, (3,)) for i in range(6)], lambda o: got.__setitem__(o.key, o))  # each kills its worker
    assert sorted(got) == list(range(6))
    assert all(not o.ok and ("worker process died" in o.error or "pool broke" in o.error) for o in got.values())
    assert _collect(pool, operator.truediv, [Task(0, (6, 3))])[0].value == 2.0, "the next run gets a new pool"


def test_local_executor_is_in_process_for_one_job():
    assert isinstance(local_executor(1), InProcess) and isinstance(local_executor(3), LocalPool)


@pytest.mark.parametrize("task_s,remaining,workers,size", [
    (None, 1000, 2, 1),  # nothing measured yet: one task
    (0.001, 1000, 2, MAX_CHUNK),  # quick tasks: bounded chunks
    (0.01, 1000, 2, 5),  # about CHUNK_TARGET_S of work
    (0.5, 1000, 2, 1),  # slow tasks go one by one
    (0.001, 7, 2, 4),  # the end of the queue: an even share for each worker
])
def test_chunks_hold_about_a_target_of_work_and_balance_at_the_end(task_s, remaining, workers, size):
    assert chunk_size(task_s, remaining, workers) == size


_PARENT = """
import sys, time
from cgbench.analysis.sweep.executors import LocalPool, Task
pool = LocalPool(2)
pool.run(time.sleep, [Task(0, (120,)), Task(1, (120,))], print)
"""


def _children(pid: int) -> set[int]:
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.add(int(d.name))
            except (OSError, ValueError):
                continue
    return kids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.slow
def test_pool_workers_die_with_their_parent(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while len(_children(parent.pid)) < 2:  # the pool's two workers
        assert parent.poll() is None and time.monotonic() < deadline, "the pool did not start"
        time.sleep(0.05)
    time.sleep(0.5)
    workers = _children(parent.pid)  # the workers (and any helper process multiprocessing started)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    while {p for p in workers if _alive(p)} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {p for p in workers if _alive(p)}, "workers outlived their killed parent"


_FORKED = """
import sys, threading
from cgbench.analysis.sweep.executors import LocalPool, Task
Task._mark_of_the_caller = 7  # set in this process only: a worker that re-imported the class lacks it
stop = threading.Event()
if sys.argv[1] == "thread":  # another thread running: forking could copy a lock it holds
    threading.Thread(target=stop.wait, daemon=True).start()
pool = LocalPool(2)
pool.warm(["cgbench.analysis.sweep.run"])
got = {}
tasks = [Task(i, (Task, "_mark_of_the_caller", None)) for i in range(4)]
pool.run(getattr, tasks, lambda o: got.update({o.key: o.value}))
pool.close()
stop.set()
print(pool.start_method, sorted(got.values(), key=str))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers fork on Linux only")
def test_warm_workers_are_forked_from_the_caller_unless_another_thread_runs():
    """Forked, the workers start with what the caller imported and set (no import of their own);
    with another thread running the caller they are spawned, fresh interpreters."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    alone = subprocess.run([sys.executable, "-c", _FORKED, "alone"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.split(None, 1) == ["fork", "[7, 7, 7, 7]\n"]
    threaded = subprocess.run([sys.executable, "-c", _FORKED, "thread"], capture_output=True, text=True,
                              env=env, timeout=120)
    assert threaded.returncode == 0, threaded.stderr
    assert threaded.stdout.split(None, 1) == ["spawn", "[None, None, None, None]\n"]


# ---------------------------------------------------------------------------------------------- SLURM


@dataclass
class _Paths:
    folder: Path

    @property
    def result_pickle(self) -> Path:
        return self.folder / "result.pkl"

    @property
    def stdout(self) -> Path:
        return self.folder / "log.out"

    @property
    def stderr(self) -> Path:
        return self.folder / "log.err"


@dataclass(eq=False)
class _Job:
    """What the watch reads of a submitit job handle: job_id, paths, state, get_info, result."""

    job_id: str
    paths: _Paths
    state: str = "PENDING"
    outcome: Outcome | None = None
    calls: list = field(default_factory=list)

    def get_info(self, mode: str = "force") -> dict:
        self.calls.append(mode)
        return {}

    def result(self):
        return self.outcome


def test_an_arrays_tasks_are_reported_from_their_results_and_states(tmp_path, monkeypatch):
    monkeypatch.setattr(executor_slurm, "STATE_POLL_S", 0.0)
    monkeypatch.setattr(executor_slurm, "UNRECORDED_GRACE_S", 0.0)
    monkeypatch.setattr(executor_slurm, "RESULT_GRACE_S", 0.0)
    monkeypatch.setattr(executor_slurm, "queued_tasks", lambda arrays: set())  # nothing left in the queue
    jobs = []
    for i, state in enumerate(["COMPLETED", "COMPLETED", "CANCELLED by 0", "CANCELLED by 0", "UNKNOWN", "TIMEOUT"]):
        folder = tmp_path / f"7_{i}"
        folder.mkdir()
        jobs.append(_Job(f"7_{i}", _Paths(folder), state))
    jobs[0].paths.result_pickle.write_text("x")
    jobs[0].outcome = Outcome(0, {"steps": 3})
    jobs[1].paths.result_pickle.write_text("x")
    jobs[1].outcome = Outcome(1, error="RuntimeError: boom")
    jobs[2].paths.stderr.write_text("started")  # cancelled while it ran (it wrote its log)
    got: dict[int, Outcome] = {}
    watch = executor_slurm._Watch([executor_slurm.ArrayTask(j, (i,)) for i, j in enumerate(jobs)], ["7"],
                                  lambda o: got.__setitem__(o.key, o), poll_s=0.0)
    watch.until_done()
    assert got[0].value == {"steps": 3}
    assert got[1].error == f"RuntimeError: boom (log: {jobs[1].paths.stderr})"
    assert got[2].missing and got[2].error == "not run: array task 7_2 was cancelled while it ran"
    assert got[3].missing and got[3].error == "not run: array task 7_3 was cancelled before it started"
    # in neither sacct nor squeue: SLURM dropped it from the array (cancelled while pending)
    assert got[4].missing and got[4].error == "not run: array task 7_4 was cancelled before it started"
    assert not got[5].missing and got[5].error == \
        f"array task 7_5 ended TIMEOUT without a result (log: {jobs[5].paths.stderr})"


def test_slurm_settings_are_submitits_names_or_slurm_options():
    assert executor_slurm.parse_settings(["partition=cpu", "timeout_min=10", "setup=[a, b]", "gpus-per-task=1",
                                          "additional_parameters={mail-type: END}"]) == {
        "slurm_partition": "cpu", "timeout_min": 10, "slurm_setup": ["a", "b"], "slurm_gpus_per_task": 1,
        "slurm_additional_parameters": {"mail-type": "END"}}
    from cgbench.config.schema import ConfigError

    for bad in (["partition"], ["timeout_min=1", "timeout_min=2"], ["setup=[a"]):
        with pytest.raises(ConfigError, match="--slurm"):
            executor_slurm.parse_settings(bad)


def _cluster_up() -> str | None:
    state = Path(os.environ.get("CGBENCH_SLURM_DIR") or "/tmp/cgbench-slurm")
    if shutil.which("sbatch") is None or not (state / "etc" / "slurm.conf").is_file():
        return None
    env = {**os.environ, "CGBENCH_SLURM_DIR": str(state)}
    up = subprocess.run(["bash", str(ROOT / "scripts" / "slurm-local.sh"), "status"], capture_output=True, env=env)
    return str(state / "etc" / "slurm.conf") if up.returncode == 0 else None


@pytest.mark.slurm
def test_slurm_executor_on_the_local_cluster_reports_results_errors_and_a_cancelled_task(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    conf = _cluster_up()
    if conf is None:
        pytest.skip("no local SLURM cluster is up (bash scripts/slurm-local.sh start)")
    monkeypatch.setenv("SLURM_CONF", conf)
    ex = executor_slurm.SlurmExecutor(tmp_path / "jobs", {"timeout_min": 5}, say=lambda line: None)
    got = _collect(ex, operator.truediv, [Task(0, (6, 3)), Task(1, (1, 0))])
    assert got[0].value == 2.0 and got[1].error.startswith("ZeroDivisionError: division by zero (log: ")

    ex = executor_slurm.SlurmExecutor(tmp_path / "jobs2", {"timeout_min": 5}, say=lambda line: None)

    def cancel_when_running() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ex.arrays and subprocess.run(["squeue", "-h", "-t", "R", "-j", ex.arrays[0]], capture_output=True,
                                            text=True).stdout.strip():
                time.sleep(1)
                subprocess.run(["scancel", ex.arrays[0]])
                return
            time.sleep(0.2)

    canceller = threading.Thread(target=cancel_when_running)
    canceller.start()
    got = _collect(ex, time.sleep, [Task(5, (120,))])
    canceller.join()
    assert got[5].missing and got[5].error.startswith(f"not run: array task {ex.arrays[0]}")  # one task: a plain job
