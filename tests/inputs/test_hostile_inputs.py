"""Hostile conditions beyond a command line (the command lines are the corpus, tests/inputs/corpus.py):
full disks, file size limits, a deleted working directory, killed and concurrent writers, the bounded
readers, safe names and paths, a full standard output. Every refusal is one line, exit 2, no traceback,
no file left behind."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.inputs.corpus import IS_ROOT, SMALL, TIME_LIMIT_S, result_doc, run_in_child

pytestmark = pytest.mark.e2e  # processes, limits, full disks

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ full disks, deleted folders


@pytest.fixture()
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (root only; the caller falls back to RLIMIT_FSIZE)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    ok = IS_ROOT and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                    capture_output=True).returncode == 0
    if not ok:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_disk_full_is_one_line_and_leaves_no_file(tiny_tmpfs):
    (tiny_tmpfs / "filler").write_bytes(b"\0" * 60_000)
    r = runner.invoke(app, ["run", SMALL, "--trace", "--out", str(tiny_tmpfs / "r.json")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [f"error: cannot write {tiny_tmpfs / 'r.json'}: "
                                             "no space left on the device"]
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == ["filler"]


def test_file_size_limit_is_one_line_and_leaves_no_file(tmp_path):
    out = tmp_path / "r.json"
    r = run_in_child(["run", SMALL, "--trace", "--out", str(out)], cwd=tmp_path, fsize=4096)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [f"error: cannot write {out}: "
                                             "file too large (a file size limit was reached)"]
    assert list(tmp_path.iterdir()) == []


def test_deleted_working_directory_is_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
         "from cgbench.cli.app import main; sys.argv[1:] = ['run', 'workload.num_requests=8', '--out', 'r.json']; "
         "main()", str(gone)],
        env={**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=TIME_LIMIT_S)
    assert proc.returncode == 2, err[-2000:]
    assert err.strip().splitlines() == ["error: the working directory no longer exists: cd to an existing folder"]


# ------------------------------------------------------------------ the write rule, end to end


def test_result_file_mode_follows_the_umask(tmp_path):
    out = tmp_path / "r.json"
    old = os.umask(0o022)
    try:
        r = runner.invoke(app, ["run", SMALL, "--out", str(out)])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_stale_temporary_files_of_a_killed_writer_are_removed(tmp_path):
    out = tmp_path / "r.json"
    stale = tmp_path / ".r.json.abcd1234.tmp"
    stale.write_text('{"half": ')
    os.utime(stale, (time.time() - 60, time.time() - 60))
    other = tmp_path / ".other.json.abcd1234.tmp"  # another file's temporary: not ours to remove
    other.write_text("{")
    os.utime(other, (time.time() - 60, time.time() - 60))
    r = runner.invoke(app, ["run", SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert not stale.exists() and other.exists()
    assert json.loads(out.read_text())["metrics"]


def test_sigkill_during_the_write_leaves_the_old_file_and_a_temp_the_next_write_removes(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"old": 1}\n')
    # a child that stops between writing its temporary file and renaming it, then is killed
    code = ("import os, signal, sys\n"
            "from cgbench import safeio\n"
            "real = os.replace\n"
            "def stop(a, b):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "os.replace = stop\n"
            "safeio.write_text_atomic(sys.argv[1], '{\"new\": 1}\\n')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, timeout=TIME_LIMIT_S)
    assert proc.returncode == -signal.SIGKILL
    temps = [p for p in tmp_path.iterdir() if p.name.startswith(".r.json.")]
    assert len(temps) == 1 and out.read_text() == '{"old": 1}\n'
    os.utime(temps[0], (time.time() - 60, time.time() - 60))
    r = runner.invoke(app, ["run", SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_out_through_a_symlink_to_a_regular_file_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    r = runner.invoke(app, ["run", SMALL, "--out", str(link)])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and json.loads(target.read_text())["metrics"]


def test_a_non_finite_metric_fails_the_write_naming_the_metric(tmp_path):
    from cgbench.config.schema import ConfigError
    from cgbench.results.document import write_json_atomic

    with pytest.raises(ConfigError, match=r"metrics\.ttft_ms\.p99: not a finite number"):
        write_json_atomic(tmp_path / "r.json", result_doc(metrics={"ttft_ms": {"p50": 1.0, "p99": float("inf")}}))
    assert list(tmp_path.iterdir()) == []


def test_concurrent_writers_leave_one_complete_file_and_no_temporaries(tmp_path):
    """Eight processes write the same path at once: the file is exactly one writer's document."""
    out = tmp_path / "r.json"
    code = ("import sys\n"
            "from cgbench import safeio\n"
            "for _ in range(20):\n"
            "    safeio.write_json_atomic(sys.argv[1], {'writer': int(sys.argv[2]), 'pad': 'x' * 200000})\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(out), str(i)]) for i in range(8)]
    assert [p.wait(timeout=TIME_LIMIT_S) for p in procs] == [0] * 8
    doc = json.loads(out.read_text())
    assert doc["writer"] in range(8) and len(doc["pad"]) == 200000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_live_writers_temporary_file_is_not_removed(tmp_path):
    import fcntl

    from cgbench import safeio

    live = tmp_path / ".r.json.live1234.tmp"
    with open(live, "w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        os.utime(live, (time.time() - 60, time.time() - 60))
        safeio.write_text_atomic(tmp_path / "r.json", "{}\n")
        assert live.exists()
    assert safeio.clean_stale_temps(tmp_path / "r.json") == 1 and not live.exists()


@pytest.mark.parametrize("make,words", [
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
    (lambda p: p.mkdir(), "is a directory, not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    (lambda p: None, "no such file"),
])
def test_bounded_reader_says_what_the_path_is(tmp_path, make, words):
    from cgbench.config.schema import ConfigError
    from cgbench.safeio import read_text

    path = tmp_path / "x.json"
    make(path)
    with pytest.raises(ConfigError) as e:
        read_text(path, "key")
    assert str(e.value) == f"key: {path}: {words}"


def test_bounded_reader_stops_at_the_limit_even_when_the_size_lies(tmp_path):
    from cgbench.config.schema import ConfigError
    from cgbench.safeio import read_text

    with pytest.raises(ConfigError, match="more than the 1,000-byte limit"):
        read_text("/proc/self/maps" if os.path.getsize("/proc/self/maps") == 0 else tmp_path, max_bytes=1000)


def test_a_line_break_in_a_file_name_stays_one_escaped_line(tmp_path):
    bad = tmp_path / "a\nb\u2028c.json"
    r = runner.invoke(app, ["compare", str(bad), str(bad)])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: {tmp_path}/a\\nb\\u2028c.json: no such file or directory"]


def test_a_trace_too_long_for_the_memory_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n' * 2000)
    monkeypatch.setenv("CGBENCH_MEMORY_LIMIT_GB", "0.001")  # 1 MiB: 700 requests
    r = runner.invoke(app, ["run", "workload=trace", f"workload.trace={trace}", "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        f"error: workload.trace: {trace}: up to 2,001 requests need about 2.9 MiB (1,500 bytes each), more than "
        "the 1.0 MiB limit; use a shorter trace (or raise CGBENCH_MEMORY_LIMIT_GB)"]
    monkeypatch.setenv("CGBENCH_MEMORY_LIMIT_GB", "lots")
    r = runner.invoke(app, ["run", SMALL, "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: CGBENCH_MEMORY_LIMIT_GB: must be a positive number of GiB, got 'lots'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize("name,ok", [("hybrid", True), ("llama-3.1_8B+spec", True), ("a=b,c@d", True),
                                     ("..", False), (".hidden", False), ("a/b", False), ("-x", False),
                                     ("", False), ("a b", False), ("x" * 101, False), ("a\x00b", False)])
def test_safe_name(name, ok):
    from cgbench.config.schema import ConfigError
    from cgbench.safeio import safe_name

    if ok:
        assert safe_name(name, "model.name") == name
    else:
        with pytest.raises(ConfigError, match="model.name: .* cannot be used in a file name"):
            safe_name(name, "model.name")


@pytest.mark.parametrize("rel,ok", [("a.json", True), ("sub/a.json", True), ("../x.json", False),
                                    ("a/../../x.json", False), ("/etc/passwd", False), ("", False)])
def test_inside_keeps_a_relative_path_under_its_root(tmp_path, rel, ok):
    from cgbench.config.schema import ConfigError
    from cgbench.safeio import inside

    if ok:
        assert inside(tmp_path, rel, "points[0].file") == tmp_path / rel
    else:
        with pytest.raises(ConfigError, match=r"points\[0\]\.file: .* must be a plain path inside"):
            inside(tmp_path, rel, "points[0].file")


# ---------------------------------------------------------------------------------------------- round two


@pytest.mark.parametrize("command", ["compare {p} {p}", "plot {p}"])
def test_compare_and_plot_say_what_a_special_path_is(tmp_path, command):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = runner.invoke(app, shlex.split(command.format(p=fifo)))
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: {fifo}: is a FIFO (named pipe), not a regular file or folder"


@pytest.mark.parametrize("body,needle", [("name: a\nname: b\n", "found duplicate key name"),
                                         ("name: [\n", "invalid YAML")])
def test_a_broken_yaml_file_in_a_users_config_tree_is_named_with_its_line(tmp_path, body, needle):
    (tmp_path / "mine" / "model").mkdir(parents=True)
    bad = tmp_path / "mine" / "model" / "broken.yaml"
    bad.write_text(body)
    r = runner.invoke(app, ["run", "--config-dir", str(tmp_path / "mine"), "model=broken", SMALL,
                            f"out_dir={tmp_path / 'results'}"])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {bad}:") and needle in err, err
    assert not (tmp_path / "results").exists()


def test_a_full_disk_on_standard_output_is_one_line(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
        r = subprocess.run([sys.executable, "-c", "from cgbench.cli.app import main; main()", "run", SMALL,
                            "--format", "json", "--out", str(tmp_path / "r.json")],
                           stdout=full, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: cannot write the output: No space left on device "
                                             "(any result file was written whole first)"]
    json.loads((tmp_path / "r.json").read_text())  # the result itself was written whole


def test_plot_into_a_path_that_is_a_file_is_one_line(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "s"
    r = runner.invoke(app, ["sweep", "policy=budget,megatron", SMALL, "--out", str(sweep)])
    assert r.exit_code == 0, r.output
    target = tmp_path / "taken"
    target.write_text("mine\n")
    r = runner.invoke(app, ["plot", str(sweep), "--out", str(target)])
    assert r.exit_code == 2 and r.stderr.strip() == f"error: --out {target}: exists and is a regular file, not a folder"
    assert target.read_text() == "mine\n"


def test_a_group_set_to_null_names_the_group_and_its_options():
    r = runner.invoke(app, ["run", "engine=null"])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: engine=null: a config group needs one of its options "
                                "(engine: azure_conv, chunked, default, kv_tight, mooncake_conv, small)")


def test_sweep_jobs_zero_blames_sweep_jobs(tmp_path):
    r = runner.invoke(app, ["sweep", "sweep.jobs=0", "policy=budget,megatron", SMALL, "--out", str(tmp_path / "s")])
    assert r.exit_code == 2 and r.stderr.strip() == "error: sweep.jobs: must be >= 1, got 0"
    assert not (tmp_path / "s").exists()


def test_a_folder_given_as_a_trace_says_it_is_a_folder(tmp_path):
    (tmp_path / "traces").mkdir()
    r = runner.invoke(app, ["run", "workload=trace", f"workload.trace={tmp_path / 'traces'}"])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: workload.trace: {tmp_path / 'traces'}: is a directory, not a regular file"


# ------------------------------------------------------------------ issue 32: outputs, stale results, leftovers


TRACE = ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n'
         '{"arrival_s": 1.5, "prompt_tokens": 7, "output_tokens": 2}\n')


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_an_output_onto_the_runs_own_trace_is_refused_and_the_trace_is_kept(tmp_path, how):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = {"same path": trace, "symlink": tmp_path / "link.json", "hard link": tmp_path / "hard.json"}[how]
    if how == "symlink":
        out.symlink_to(trace)
    elif how == "hard link":
        os.link(trace, out)
    r = runner.invoke(app, ["run", "workload=trace", f"workload.trace={trace}", "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().splitlines() == [f"error: cannot write --out {out}: it is this command's input "
                                             f"(workload.trace {trace}); writing would replace it: choose another "
                                             "output path"]
    assert trace.read_text() == TRACE
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"t.jsonl", out.name})


def test_compare_markdown_onto_its_baseline_is_refused_before_comparing(tmp_path):
    result = next((ROOT / "results" / "baseline").glob("model-*.json")).read_text()  # a valid result
    base, new = tmp_path / "a.json", tmp_path / "b.json"
    for p in (base, new):
        p.write_text(result)
    before = base.read_bytes()
    r = runner.invoke(app, ["compare", str(base), str(new), "--markdown", str(base)])
    assert r.exit_code == 2 and r.stdout == ""  # refused before the comparison printed anything
    assert "this command's input (BASE" in r.stderr and base.read_bytes() == before
    r = runner.invoke(app, ["compare", str(base), str(new), "--markdown", str(tmp_path / "m.md")])
    assert r.exit_code == 0 and (tmp_path / "m.md").read_text().startswith("## cgbench compare")


def test_inputs_are_forgotten_between_commands(tmp_path):
    """The declared inputs belong to one command: the next may write where the last one read."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "r.json"
    assert runner.invoke(app, ["run", "workload=trace", f"workload.trace={trace}", "--out", str(out)]).exit_code == 0
    r = runner.invoke(app, ["compare", str(out), str(out), "--markdown", str(trace)])  # the trace is no input here
    assert r.exit_code == 0, r.output
    assert trace.read_text().startswith("## cgbench compare")


def _advise(trace: Path, out: Path, *extra: str) -> dict:
    r = runner.invoke(app, ["advise", "workload=trace", f"workload.trace={trace}", "--budget-graphs", "4",
                            "--out", str(out), "--format", "json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_advise_resume_reruns_every_candidate_after_the_workload_changed(tmp_path):
    trace, out = tmp_path / "t.jsonl", tmp_path / "adv"
    trace.write_text(TRACE)
    first = _advise(trace, out)
    assert first["runs"]["reused"] == 0 and first["runs"]["ran"] > 0
    assert _advise(trace, out, "--resume")["runs"] == {"ran": 0, "reused": first["runs"]["ran"]}
    trace.write_text(TRACE + '{"arrival_s": 2, "prompt_tokens": 50, "output_tokens": 20}\n')
    again = _advise(trace, out, "--resume")
    assert again["runs"] == {"ran": first["runs"]["ran"], "reused": 0}


def test_a_killed_runs_temporary_file_is_removed_by_a_later_run_of_another_name(tmp_path):
    stale = tmp_path / ".20260101-000000-000000_x.json.cgbench-abcd1234.tmp"  # a time-stamped result's
    stale.write_text('{"half": ')
    os.utime(stale, (time.time() - 60, time.time() - 60))
    r = runner.invoke(app, ["run", SMALL, "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_run_refused_after_composing_leaves_no_results_folder(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    r = runner.invoke(app, ["run", f"out_dir={tmp_path / 'results'}", "workload=trace", f"workload.trace={bad}"])
    assert r.exit_code == 2 and "bad.jsonl" in r.stderr
    assert not (tmp_path / "results").exists()


def test_calibrate_report_onto_a_folder_is_refused_before_measuring(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "cal.report.json").mkdir()
    r = runner.invoke(app, ["calibrate", "model=tiny_transformer", "backend=torch", "backend.device=cpu",
                            "--out", str(tmp_path / "cal.json")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == f"error: --out (its report) {tmp_path / 'cal.report.json'}: is a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.report.json"]


def test_a_long_sweep_plan_says_how_far_it_got_in_a_log(monkeypatch):
    from cgbench.cli import sweep as sweep_cli

    monkeypatch.setattr(sweep_cli, "PLAN_NOTE_EVERY_S", 0.0)
    r = runner.invoke(app, ["sweep", "seed=range(0,5)", SMALL, "--dry-run"])
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("planning: composed")]
    assert [n.split(" points")[0] for n in notes] == [f"planning: composed {i} of 5" for i in range(1, 5)]


def test_advise_pool_workers_die_with_a_killed_parent(tmp_path):
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
    proc = subprocess.Popen([sys.executable, "-c", "from cgbench.cli.app import main; main()", "advise",
                             "workload=chat", "workload.num_requests=3000", "--budget-graphs", "16", "--jobs", "2",
                             "--out", str(tmp_path / "adv")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIME_LIMIT_S
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.2)
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "spawn_main"],
                                                  capture_output=True, text=True).stdout.split()]
    assert len(workers) >= 2 and proc.poll() is None, "the pool did not start"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [w for w in workers if _alive(w)]
    assert alive == [], "pool workers outlived their killed parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False
