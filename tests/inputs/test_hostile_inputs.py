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

pytestmark = pytest.mark.slow  # processes, limits, full disks

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
