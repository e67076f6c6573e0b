"""Sweeps under stress: resume after a config change (fingerprints), two sweeps into one folder
(a lock), killed sweeps (workers die with their parent, the index never stays ``running``), index
entries that point outside the folder, unsafe sweep names, list axes in a sweep file, and planning
progress. Like the hostile-input corpus, every
refusal is checked for exit code 2, one line naming the key or file, no traceback, no file left
behind and a bounded time; processes are real (signals, locks) where the behaviour needs them."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.analysis.sweep.fingerprint import config_fingerprint, fingerprint_of
from cgbench.analysis.sweep.lock import LOCK_NAME
from cgbench.analysis.sweep.run import load_index, plan_sweep
from cgbench.cli.app import app
from cgbench.config.schema import ConfigError
from tests.helpers import default_sigint, one_error_line

pytestmark = pytest.mark.e2e  # sweeps that start and kill processes

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
SMALL = "workload.num_requests=8"
TIME_LIMIT_S = 60
# points slow enough (seconds each) to be killed while the workers compute them
SLOW = ["workload=chat", "workload.num_requests=200000", "engine.oracle=true", "seed=1,2,3,4"]


def _files(d: Path) -> set[Path]:
    return {p for p in d.rglob("*") if p.is_file() or p.is_symlink()} if d.exists() else set()



def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf"), "PYTHONPATH": str(ROOT),
            "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", **extra}


def _cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cgbench.cli.app import main; main()", *args]


# ------------------------------------------------------------------ fingerprints and --resume


@pytest.fixture()
def user_model(tmp_path, monkeypatch) -> Path:
    """A user config folder with model/mine.yaml (the shipped hybrid under another name)."""
    conf = tmp_path / "userconf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "mine.yaml").write_text("defaults: [hybrid]\nname: mine\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", os.pathsep.join([str(ROOT / "conf"), str(conf)]))
    return conf / "model" / "mine.yaml"


def _sweep(*args: str):
    return runner.invoke(app, ["sweep", *args])


def test_resume_reruns_exactly_the_points_whose_config_changed_and_says_so(tmp_path, user_model):
    out = tmp_path / "s"
    axes = ["model=transformer,mine", SMALL]
    assert _sweep(*axes, "--out", str(out)).exit_code == 0
    before = json.loads((out / "sweep.json").read_text())
    kept_file = out / before["points"][0]["file"]
    kept_bytes = kept_file.read_bytes()

    # a default changes in the config tree; the overrides stay the same
    user_model.write_text("defaults: [hybrid]\nname: mine\nhidden_size: 4608\n")
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    changed = [line for line in r.stderr.splitlines() if "config changed" in line]
    assert changed == [line for line in changed if line.startswith("point 2/2 (model=mine workload.num_requests=8): ")]
    assert len(changed) == 1, r.stderr
    after = json.loads((out / "sweep.json").read_text())
    assert [p["reused"] for p in after["points"]] == [True, False]
    assert kept_file.read_bytes() == kept_bytes
    rerun = json.loads((out / after["points"][1]["file"]).read_text())
    assert rerun["config"]["model"]["hidden_size"] == 4608
    assert after["points"][0]["fingerprint"] == before["points"][0]["fingerprint"]
    assert after["points"][1]["fingerprint"] != before["points"][1]["fingerprint"]
    assert after["points"][1]["fingerprint"] == fingerprint_of(rerun["config"])

    # unchanged since: nothing runs again
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0 and "config changed" not in r.stderr, r.output
    assert [p["reused"] for p in json.loads((out / "sweep.json").read_text())["points"]] == [True, True]


def test_resume_dry_run_shows_which_points_run_again(tmp_path, user_model):
    out = tmp_path / "s"
    axes = ["model=transformer,mine", SMALL]
    assert _sweep(*axes, "--out", str(out)).exit_code == 0
    user_model.write_text("defaults: [hybrid]\nname: mine\nhidden_size: 4608\n")
    before = _files(out)
    r = _sweep(*axes, "--resume", "--out", str(out), "--dry-run")
    assert r.exit_code == 0, r.output
    rows = [line for line in r.stdout.splitlines() if "model=" in line]
    assert "kept" in rows[0] and "run again: config changed" in rows[1], r.stdout
    assert _files(out) == before


def test_resume_without_an_index_reads_the_fingerprint_from_the_result(tmp_path, user_model):
    """A sweep killed between a point's file and its index entry: the result's own config decides."""
    out = tmp_path / "s"
    axes = ["model=transformer,mine", SMALL]
    assert _sweep(*axes, "--out", str(out)).exit_code == 0
    (out / "sweep.json").unlink()
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0 and "config changed" not in r.stderr, r.output
    user_model.write_text("defaults: [hybrid]\nname: mine\nnum_kv_heads: 4\n")
    (out / "sweep.json").unlink()
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert [p["reused"] for p in json.loads((out / "sweep.json").read_text())["points"]] == [True, False]


def test_a_changed_trace_file_changes_the_fingerprint(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n')
    out = tmp_path / "s"
    axes = ["workload=trace", f"workload.trace={trace}", "policy=budget,megatron"]
    assert _sweep(*axes, "--out", str(out)).exit_code == 0
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 2}\n')
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert sum("config changed" in line for line in r.stderr.splitlines()) == 2, r.stderr


def test_resume_in_the_pool_reruns_the_points_whose_input_changed(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n')
    out = tmp_path / "s"
    axes = ["--jobs", "2", "workload=trace", f"workload.trace={trace}", "policy=budget,megatron"]
    assert _sweep(*axes, "--out", str(out)).exit_code == 0
    first = json.loads((out / "sweep.json").read_text())
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 2}\n')
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert sum("config changed" in line for line in r.stderr.splitlines()) == 2, r.stderr
    index = json.loads((out / "sweep.json").read_text())
    assert [p["reused"] for p in index["points"]] == [False, False]
    for old, new in zip(first["points"], index["points"], strict=True):
        assert old["fingerprint"] != new["fingerprint"]
        assert old["metrics"]["ttft_ms.p99"] < new["metrics"]["ttft_ms.p99"]  # 50 prompt tokens, not 5
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0 and "config changed" not in r.stderr, r.output
    assert [p["reused"] for p in json.loads((out / "sweep.json").read_text())["points"]] == [True, True]


def test_the_fingerprint_is_the_resolved_config_and_ignores_only_where_results_go():
    plan = plan_sweep(["model=transformer,hybrid", "policy=budget", SMALL])
    a, b = plan.points
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == config_fingerprint(a.cfg)
    # the same config read back from a result document (JSON) has the same fingerprint
    from dataclasses import asdict, replace

    assert fingerprint_of(json.loads(json.dumps(asdict(a.cfg)))) == a.fingerprint
    assert config_fingerprint(replace(a.cfg, out_dir="elsewhere")) == a.fingerprint
    assert config_fingerprint(replace(a.cfg, seed=a.cfg.seed + 1)) != a.fingerprint


# ------------------------------------------------------------------ processes: lock, signals, orphans


def _children_of(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited (PID 1 of a container may not reap it)


def _start_slow_sweep(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(_cli_argv("sweep", *SLOW, *extra, "--out", str(out)), env=_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=out.parent, preexec_fn=default_sigint)


def _wait_running(proc: subprocess.Popen, out: Path, workers: int = 0) -> set[int]:
    """Wait until the sweep's index says running (and ``workers`` worker processes exist)."""
    deadline = time.monotonic() + TIME_LIMIT_S
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the sweep did not start"
        kids = _children_of(proc.pid)
        if (out / "sweep.json").is_file() and len(kids) >= workers:
            return kids
        time.sleep(0.05)


def _wait_gone(pids: set[int], limit_s: float = 10.0) -> set[int]:
    deadline = time.monotonic() + limit_s
    while (alive := {p for p in pids if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


@pytest.mark.slow
def test_a_second_sweep_into_a_locked_folder_exits_2_naming_the_holder(tmp_path):
    out = tmp_path / "s"
    first = _start_slow_sweep(out)
    try:
        _wait_running(first, out)
        before = _files(out)
        for extra in ([], ["--resume"]):
            t0 = time.monotonic()
            second = subprocess.run(_cli_argv("sweep", *SLOW, *extra, "--out", str(out)), env=_env(),
                                    capture_output=True, text=True, timeout=TIME_LIMIT_S, cwd=tmp_path)
            assert time.monotonic() - t0 < TIME_LIMIT_S
            assert second.returncode == 2, second.stderr
            assert "Traceback" not in second.stderr + second.stdout
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and f"PID {first.pid}" in lines[0] and str(out) in lines[0], lines
            assert _files(out) - before == set()
            assert first.poll() is None, "the refused sweep stopped the first one"
    finally:
        first.kill()
        first.communicate(timeout=TIME_LIMIT_S)


@pytest.mark.slow
@pytest.mark.parametrize("jobs,sig,code", [(2, signal.SIGTERM, 143), (2, signal.SIGINT, 130), (1, signal.SIGTERM, 143)])
def test_a_signalled_sweep_stops_its_workers_and_says_interrupted(tmp_path, jobs, sig, code):
    out = tmp_path / "s"
    proc = _start_slow_sweep(out, "--jobs", str(jobs))
    kids = _wait_running(proc, out, workers=2 if jobs > 1 else 0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIME_LIMIT_S)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "interrupted" in err
    assert _wait_gone(kids | _children_of(proc.pid)) == set()
    index = load_index(out)
    assert index["status"] == "interrupted" and "stale" not in index
    assert json.loads((out / "sweep.json").read_text())["status"] == "interrupted"


@pytest.mark.slow
def test_a_killed_parallel_sweep_leaves_no_worker_and_its_index_reads_interrupted(tmp_path):
    out = tmp_path / "s"
    proc = _start_slow_sweep(out, "--jobs", "2")
    kids = _wait_running(proc, out, workers=2)
    assert len(kids) >= 2
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=TIME_LIMIT_S)
    assert _wait_gone(kids) == set(), "workers outlived their killed parent"
    assert json.loads((out / "sweep.json").read_text())["status"] == "running"  # nobody was left to write it
    index = load_index(out)
    assert index["status"] == "interrupted"
    assert f"PID {proc.pid}" in index["stale"] and "killed" in index["stale"]


@pytest.mark.slow
def test_without_the_parent_death_signal_the_watchdog_ends_an_orphaned_worker(tmp_path):
    """The fallback where prctl is unavailable: a worker whose parent dies exits within a second or two."""
    pid_file = tmp_path / "worker.pid"
    worker = ("import os, sys, time\n"
              "from cgbench.analysis.sweep import workers\n"
              "workers._request_parent_death_signal = lambda: False\n"
              "workers.worker_init(os.getppid())\n"
              f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
              "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               f"subprocess.Popen([sys.executable, '-c', {worker!r}])\ntime.sleep(120)\n"],
                              env=_env())
    deadline = time.monotonic() + TIME_LIMIT_S
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    worker_pid = int(pid_file.read_text())
    assert _alive(worker_pid)
    parent.kill()
    parent.wait(timeout=TIME_LIMIT_S)
    assert _wait_gone({worker_pid}) == set()


def test_resume_of_a_killed_sweep_says_it_was_interrupted_and_finishes_it(tmp_path):
    """The state SIGKILL leaves (an index saying running, a dead writer, no lock held)."""
    out = tmp_path / "s"
    axes = ["model=transformer,hybrid", SMALL]
    assert _sweep(*axes, "--out", str(out)).exit_code == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    index = json.loads((out / "sweep.json").read_text())
    index.update(status="running", pid=dead.pid)
    (out / "sweep.json").write_text(json.dumps(index))
    (out / index["points"][1]["file"]).unlink()
    assert load_index(out)["status"] == "interrupted"
    r = _sweep(*axes, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output
    stale = [line for line in r.stderr.splitlines() if "said 'running'" in line]
    assert len(stale) == 1 and f"PID {dead.pid}" in stale[0] and "resuming it" in stale[0], r.stderr
    assert load_index(out)["status"] == "complete"


def test_a_running_index_whose_lock_is_held_is_running(tmp_path):
    from cgbench.analysis.sweep.lock import SweepLock

    out = tmp_path / "s"
    assert _sweep("model=transformer", SMALL, "--out", str(out)).exit_code == 0
    index = json.loads((out / "sweep.json").read_text())
    index["status"] = "running"
    (out / "sweep.json").write_text(json.dumps(index))
    lock = SweepLock(out).acquire()
    try:
        assert load_index(out)["status"] == "running"
        r = _sweep("model=transformer", SMALL, "--resume", "--out", str(out))
        one_error_line(r, f"PID {os.getpid()}")
    finally:
        lock.release()
    assert load_index(out)["status"] == "interrupted"


def test_the_lock_is_released_when_the_sweep_ends(tmp_path):
    out = tmp_path / "s"
    assert _sweep("model=transformer", SMALL, "--out", str(out)).exit_code == 0
    assert (out / LOCK_NAME).is_file()
    r = _sweep("model=transformer", SMALL, "--resume", "--out", str(out))
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------ refusals: paths, names, limits


def _sweep_with_point_file(tmp_path: Path, file: str) -> Path:
    out = tmp_path / "s"
    assert _sweep("model=transformer,hybrid", SMALL, "--out", str(out)).exit_code == 0
    index = json.loads((out / "sweep.json").read_text())
    shutil.copy(out / index["points"][0]["file"], tmp_path / "x.json")
    index["points"][0]["file"] = file
    (out / "sweep.json").write_text(json.dumps(index))
    return out


@pytest.mark.parametrize("file", ["../x.json", "{tmp}/x.json", "", "a/../../x.json"])
@pytest.mark.parametrize("command", ["compare", "plot"])
def test_an_index_entry_outside_the_sweep_folder_is_refused(tmp_path, file, command):
    out = _sweep_with_point_file(tmp_path, file.format(tmp=tmp_path))
    before = _files(tmp_path)
    argv = [command, str(out), str(out)] if command == "compare" else [command, str(out)]
    r = runner.invoke(app, argv)
    one_error_line(r, "points[0].file")
    assert _files(tmp_path) == before


@pytest.mark.parametrize("name", ["..", "a/b", ".hidden", "-x", "n" * 300])
def test_an_unsafe_sweep_name_is_refused(tmp_path, name):
    r = _sweep(f"sweep.name={name}", "model=transformer", SMALL, f"out_dir={tmp_path / 'results'}")
    one_error_line(r, "sweep.name")
    assert not (tmp_path / "results").exists()


def test_a_huge_sweep_is_refused_quickly_without_output(tmp_path):
    t0 = time.monotonic()
    r = subprocess.run(_cli_argv("sweep", "seed=range(0,1000000)", "--dry-run"), env=_env(), capture_output=True,
                       text=True, timeout=TIME_LIMIT_S, cwd=tmp_path)
    assert time.monotonic() - t0 < TIME_LIMIT_S
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "1,000,000" in lines[0] and "10,000" in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_planning_shows_progress_on_a_terminal_only(tmp_path):
    argv = _cli_argv("sweep", "model=transformer,hybrid", "policy=budget,megatron", SMALL, "--dry-run")
    # not a terminal: nothing on stderr
    r = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=TIME_LIMIT_S, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # a terminal: the progress line of the planning
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=_env(TERM="xterm", COLUMNS="120"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, cwd=tmp_path)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + TIME_LIMIT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=TIME_LIMIT_S) == 0
    assert b"planning: composing points" in seen, seen[-500:]


# ------------------------------------------------------------------ list axes in a sweep file


@pytest.fixture()
def sweep_file(tmp_path, monkeypatch):
    conf = tmp_path / "userconf"
    (conf / "sweep").mkdir(parents=True)
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", os.pathsep.join([str(ROOT / "conf"), str(conf)]))

    def write(params: str) -> None:
        (conf / "sweep" / "lst.yaml").write_text(f"name: lst\nparams:\n{params}\nrepeat: 1\njobs: 1\n")

    return write


def test_a_list_in_a_sweep_file_is_one_point_per_element(sweep_file):
    sweep_file("  model: [transformer, hybrid]\n  workload.num_requests: [8, 16]")
    listed = plan_sweep(["sweep=lst"])
    sweep_file("  model: transformer,hybrid\n  workload.num_requests: 8,16")
    commas = plan_sweep(["sweep=lst"])
    assert [p.overrides for p in listed.points] == [p.overrides for p in commas.points]
    assert len(listed.points) == 4
    assert [p.cfg.model.name for p in listed.points] == ["transformer", "transformer", "hybrid", "hybrid"]
    assert listed.axes["model"] == ["transformer", "hybrid"]


def test_a_list_element_with_a_comma_stays_one_value(sweep_file):
    sweep_file("  workload.name: ['a,b', c]\n  workload.num_requests: 8")
    plan = plan_sweep(["sweep=lst"])
    assert [p.cfg.workload.name for p in plan.points] == ["a,b", "c"]


@pytest.mark.parametrize("params,needle", [("  model: []", "empty list"),
                                           ("  model: [[transformer], hybrid]", "plain values")])
def test_a_list_that_cannot_be_an_axis_is_refused(sweep_file, tmp_path, params, needle):
    sweep_file(params)
    with pytest.raises(ConfigError, match=needle):
        plan_sweep(["sweep=lst"])
    r = _sweep("sweep=lst", f"out_dir={tmp_path / 'results'}", "--dry-run")
    one_error_line(r, "sweep.params.model")
    assert not (tmp_path / "results").exists()
