"""The hostile-input corpus: special files, hangs, memory blow-ups, non-finite numbers, markup in
paths, full disks, path escapes, huge integers and deep nesting. Every case goes through the real
CLI and must exit 2 with one line naming the key or file, no traceback, no file left behind, within
a time bound (an alarm, or a subprocess timeout) and a memory bound (peak RSS growth in process, or
an address-space limit on a child)."""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.backends.sim.calibrated import CALIBRATION_SCHEMA
from cgbench.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SMALL = "workload.num_requests=8"
TIME_LIMIT_S = 60  # a generous bound: every case takes about a second; a hang takes forever
RSS_GROWTH_LIMIT_KB = 300 * 1024
CHILD_ADDRESS_SPACE = 3 * 2**30  # numpy and Hydra alone reserve ~1 GiB of address space
IS_ROOT = os.geteuid() == 0
LONG_NAME = "n" * 300


def _files(d: Path) -> set[Path]:
    return {p for p in d.rglob("*") if p.is_file() or p.is_symlink()} if d.exists() else set()


def _calibration(**point) -> dict:
    row = {"T": 64, "P": 1, "D": 0, "ctx": 0, "ms": 1.0}
    return {"schema": CALIBRATION_SCHEMA, "model": {"name": "m", "kind": "hybrid"}, "device": "cpu",
            "graphed": [{**row, **point}], "eager": [row]}


def _result(**keys) -> dict:
    return {"schema_version": 1, "metrics": {"throughput_tok_s": 1.0}, **keys}


DEEP = 100_000


@pytest.fixture()
def hostile(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Input files, each hostile in one way. Deliberately invalid JSON lives under
    ``hostile_inputs/`` (the strict-JSON check of conftest skips that folder)."""
    d = tmp_path / "hostile_inputs"
    d.mkdir()
    f: dict[str, Path] = {}

    def text(name: str, body: str) -> None:
        f[name.replace(".", "_").replace("-", "_")] = d / name
        (d / name).write_text(body)

    for ext in ("jsonl", "json", "yaml", "csv"):
        os.mkfifo(d / f"pipe.{ext}")
        f[f"fifo_{ext}"] = d / f"pipe.{ext}"
    for ext in ("json", "jsonl"):
        (d / f"dir.{ext}").mkdir()
        f[f"dir_{ext}"] = d / f"dir.{ext}"
    f["zero_json"] = d / "zero.json"
    f["zero_json"].symlink_to("/dev/zero")
    f["zero_csv"] = d / "zero.csv"
    f["zero_csv"].symlink_to("/dev/zero")
    f["chardev"] = d / "chardev.json"
    if IS_ROOT:
        os.mknod(f["chardev"], stat.S_IFCHR | 0o666, os.makedev(1, 5))  # a private /dev/zero
    else:
        f["chardev"].symlink_to("/dev/zero")
    f["blockdev"] = d / "block.jsonl"
    if IS_ROOT:
        os.mknod(f["blockdev"], stat.S_IFBLK | 0o600, os.makedev(7, 0))  # a loop device node, never opened
    else:
        os.mkfifo(f["blockdev"])
    f["dev_link"] = d / "dev_link.json"  # never the system /dev/null: a broken writer would replace it
    f["dev_link"].symlink_to(f["chardev"])
    f["fifo_link"] = d / "fifo_link.json"
    f["fifo_link"].symlink_to(f["fifo_json"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    f["sock"] = d / "s.json"
    sock.bind(str(f["sock"]))
    f["big_jsonl"] = d / "big.jsonl"
    with open(f["big_jsonl"], "wb") as big:
        big.truncate(9 * 2**30)  # sparse: 9 GiB that take no disk (a trace streams: its limit is 8 GiB)
    f["a_file"] = d / "a_file"
    f["a_file"].write_text("x")

    text("deep.json", "[" * DEEP + "]" * DEEP)
    text("deep_result.json", '{"schema_version": 1, "metrics": {"x": ' + "[" * DEEP + "]" * DEEP + "}}")
    text("deep_state.json", '{"model": ' + "[" * DEEP + "]" * DEEP + "}")
    text("deep_rules.yaml", "rules: " + "[" * 20_000 + "]" * 20_000 + "\n")
    text("deep_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "x": '
         + "[" * DEEP + "]" * DEEP + "}\n")
    text("deep_calib.json", json.dumps(_calibration())[:-1] + ', "notes": ' + "[" * DEEP + "]" * DEEP + "}")
    big_int = "9" * 5000
    text("int_result.json", '{"schema_version": 1, "metrics": {"x": ' + big_int + "}}")
    text("int65_result.json", '{"schema_version": 1, "metrics": {"x": 36893488147419103232}}')
    text("int_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": ' + big_int + ', "output_tokens": 1}\n')
    text("int65_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": 36893488147419103232, "output_tokens": 1}\n')
    text("int_trace.csv", "arrival_s,prompt_tokens,output_tokens\n0," + big_int + ",1\n")
    text("int_rules.yaml", "rules:\n  throughput_tok_s: {better: higher, abs_tol: " + big_int + "}\n")
    text("int_calib.json", json.dumps(_calibration(T=2**70)))
    text("int_state.json", (ROOT / "tests/states/11_1_step1.json").read_text()
         .replace('"max_tokens": 16384', '"max_tokens": ' + big_int))
    state = json.loads((ROOT / "tests/states/11_1_step1.json").read_text())
    state["cg"].update(kind="sglang", padding=False, max_capture_size=10**9)
    text("big_grid_state.json", json.dumps(state))
    text("nan_result.json", '{"schema_version": 1, "metrics": {"x": NaN}}')
    text("inf_result.json", '{"schema_version": 1, "metrics": {"x": 1e400}}')
    text("inf_calib.json", json.dumps(_calibration())[:-1] + ', "tp_size": Infinity}')
    text("inf_rules.yaml", "rules:\n  throughput_tok_s: {better: higher, abs_tol: .inf}\n")
    text("late_trace.jsonl", '{"arrival_s": 1e308, "prompt_tokens": 5, "output_tokens": 1}\n')
    text("inf_trace.jsonl", '{"arrival_s": 1e400, "prompt_tokens": 5, "output_tokens": 1}\n')
    text("ok_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n'
         '{"arrival_s": 1.5, "prompt_tokens": 7, "output_tokens": 2}\n')
    text("wide_trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,5," + "1" * 200_000 + "\n")
    text("long_line.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "pad": "'
         + "x" * (2 * 2**20) + '"}\n')
    text("dup_rules.yaml", "rules:\n  throughput_tok_s: {better: higher}\n  throughput_tok_s: {better: lower}\n")
    text("bomb_rules.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))
         + "rules: {}\n")
    for name, doc in {
        "ovr_str": _result(overrides="model=hybrid"), "ovr_int": _result(overrides=[1, 2]),
        "config_list": _result(config=[1]), "env_int": _result(environment=5),
        "metrics_empty": {"schema_version": 1, "metrics": {}}, "config_model_str": _result(config={"model": "x"}),
        "steps_str": _result(steps="x"), "steps_bad": _result(steps=[{"step": 0}]),
        "usage_ints": _result(graph_usage=[1, 2]), "env_backend_list": _result(environment={"backend": [1]}),
    }.items():
        text(f"{name}.json", json.dumps(doc))
    f["markup"] = d
    (d / "m[").write_text("a file, so m[/]... has no folder")
    yield f
    sock.close()


# (command line, needle in the error line); {name} is a fixture path; paths never contain spaces
CASES: list[tuple[str, str]] = [
    # special files as output
    ("run " + SMALL + " --out {fifo_json}", "FIFO"),
    ("run " + SMALL + " --out {chardev}", "character device"),
    ("run " + SMALL + " --out {dev_link}", "character device"),
    ("run " + SMALL + " --out {sock}", "socket"),
    ("run " + SMALL + " --out {fifo_link}", "FIFO"),
    ("run " + SMALL + " --out {blockdev}", "block device" if IS_ROOT else "FIFO"),
    ("run " + SMALL + " --out {dir_json}", "directory"),
    ("run " + SMALL + " --out {a_file}/r.json", "a_file"),
    # special files as input
    ("run workload=trace workload.trace={fifo_jsonl}", "FIFO"),
    ("run workload=trace workload.trace={fifo_csv}", "FIFO"),
    ("run workload=trace workload.trace={dir_jsonl}", "is a directory"),
    ("run workload=trace workload.trace={zero_csv}", "character device"),
    ("run workload=trace workload.trace={blockdev}", "block device" if IS_ROOT else "FIFO"),
    ("run workload=trace workload.trace={big_jsonl}", "byte limit"),
    # (compare and plot decide file-or-folder themselves and call a FIFO "no such file or directory")
    ("compare {fifo_json} {fifo_json}", "pipe.json"),
    ("compare {zero_json} {zero_json}", "zero.json"),
    ("compare {sock} {sock}", "s.json"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {fifo_yaml}", "FIFO"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {zero_json}", "character device"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {dir_json}", "is a directory"),
    ("schedule {fifo_json}", "FIFO"),
    ("schedule {zero_json}", "character device"),
    ("plot {fifo_json}", "pipe.json"),
    ("run backend.cost_model=calibrated backend.calibration={fifo_json}", "FIFO"),
    ("run backend.cost_model=calibrated backend.calibration={chardev}", "character device"),
    # hangs: arrivals that never come
    ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=inf", "workload.time_scale"),
    ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=nan", "workload.time_scale"),
    ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=1e300", "workload.time_scale"),
    ("run workload=trace workload.trace={late_trace_jsonl}", "arrival_s"),
    ("run workload=trace workload.trace={inf_trace_jsonl}", "arrival_s"),
    ("run workload.arrival.process=poisson workload.arrival.rate=1e-300", "workload.arrival.rate"),
    ("sweep seed=range(0,10,0) --dry-run", "step"),
    ("sweep seed=range(0,1000000) --dry-run", "10,000"),
    # memory: sizes refused before anything is built
    ("run workload.num_requests=10000000", "workload.num_requests"),
    ("run model.pattern_repeat=100000000", "model.pattern_repeat"),
    ("run cg=sglang cg.piecewise_max_tokens=10000000000000", "cg.piecewise_max_tokens"),
    ("grid cg=sglang cg.padding=false engine.max_requests=100000000 engine.max_tokens=100000000", "graphs"),
    ("grid engine.max_requests=100000 engine.max_tokens=100000", "engine.max_requests"),
    ("run cg=megatron cg.sizes_per_octave=1000000", "cg.sizes_per_octave"),
    ("schedule {big_grid_state_json}", "cg.max_capture_size"),
    ("run cg=sglang cg.padding=false cg.max_capture_size=1000000000", "cg.max_capture_size"),
    # non-finite numbers
    ("run hardware.peak_flops=inf", "hardware.peak_flops"),
    ("run hardware.peak_flops=nan", "hardware.peak_flops"),
    ("run hardware.hbm_bandwidth=1e-300", "hardware.hbm_bandwidth"),
    ("run hardware.peak_flops=1e300", "hardware.peak_flops"),
    ("run workload.arrival.process=poisson workload.arrival.rate=inf", "workload.arrival.rate"),
    ("run workload.prompt_len.dist=lognormal workload.prompt_len.mean=100 workload.prompt_len.sigma=inf",
     "workload.prompt_len.sigma"),
    ("run policy=pad_guard policy.pad_guard.max_ratio=inf", "policy.pad_guard.max_ratio"),
    ("run cg.gpu_memory_gb=-inf", "cg.gpu_memory_gb"),
    ("compare {nan_result_json} {nan_result_json}", "metrics.x: nan is not a finite number"),
    ("compare {inf_result_json} {inf_result_json}", "metrics.x: inf is not a finite number"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {inf_rules_yaml}", "abs_tol"),
    ("run backend.cost_model=calibrated backend.calibration={inf_calib_json}", "tp_size: inf"),
    # markup in paths is printed verbatim
    ("compare {markup}/m[/]a.json {markup}/m[/]a.json", "m[/]a.json"),
    ("compare {markup}/[bold]a[/bold].json {markup}/[bold]a[/bold].json", "[bold]a[/bold].json"),
    ("run workload=trace \"workload.trace='{markup}/m[/].jsonl'\"", "m[/].jsonl"),
    ("run workload=trace \"workload.trace='{markup}/[red]t[/red].csv'\"", "[red]t[/red].csv"),
    ("run " + SMALL + " --out {markup}/m[/]r.json", "m[/]r.json"),
    # path escapes and impossible names
    ("run model.name=../../../escaped", "model.name"),
    ("run sweep.name=..", "sweep.name"),
    ("run workload.name=a/b", "workload.name"),
    ("run hardware.name=.hidden", "hardware.name"),
    ("run model.name=" + LONG_NAME, "model.name"),
    ("run " + SMALL + " --out {a_file}_dir/" + LONG_NAME + ".json", "file name too long"),
    # integers beyond 64 bits
    ("run seed=99999999999999999999999", "seed"),
    ("run engine.max_requests=99999999999999999999", "engine.max_requests"),
    ("run cg=explicit cg.graphs=[[99999999999999999999,1,0]]", "cg.graphs[0][0]"),
    ("run workload=trace workload.trace={int_trace_jsonl}", "64 bits"),
    ("run workload=trace workload.trace={int65_trace_jsonl}", "64 bits"),
    ("run workload=trace workload.trace={int_trace_csv}", "prompt_tokens"),
    ("compare {int_result_json} {int_result_json}", "64 bits"),
    ("compare {int65_result_json} {int65_result_json}", "64 bits"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {int_rules_yaml}", "int_rules.yaml"),
    ("run backend.cost_model=calibrated backend.calibration={int_calib_json}", "64 bits"),
    ("schedule {int_state_json}", "64 bits"),
    # deep nesting
    ("compare {deep_result_json} {deep_result_json}", "nested"),
    ("plot {deep_result_json}", "nested"),
    ("schedule {deep_state_json}", "nested"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {deep_rules_yaml}", "nested"),
    ("run workload=trace workload.trace={deep_trace_jsonl}", "deep_trace.jsonl:1"),
    ("run backend.cost_model=calibrated backend.calibration={deep_calib_json}", "nested"),
    # oversized CSV cells and lines
    ("run workload=trace workload.trace={wide_trace_csv}", "wide_trace.csv:2"),
    ("run workload=trace workload.trace={long_line_jsonl}", "long_line.jsonl:1"),
    # YAML surprises in a rules file
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {dup_rules_yaml}", "duplicate key"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {bomb_rules_yaml}", "rules"),
    # malformed result documents
    ("compare {ovr_str_json} {ovr_str_json}", "'overrides'"),
    ("compare {ovr_int_json} {ovr_int_json}", "'overrides[0]'"),
    ("compare {config_list_json} {config_list_json}", "'config'"),
    ("compare {env_int_json} {env_int_json}", "'environment'"),
    ("compare {metrics_empty_json} {metrics_empty_json}", "'metrics' is empty"),
    ("compare {config_model_str_json} {config_model_str_json}", "'config.model'"),
    ("plot {steps_str_json}", "'steps'"),
    ("plot {steps_bad_json}", "'steps[0]'"),
    ("plot {usage_ints_json}", "'graph_usage[0]'"),
    ("compare {env_backend_list_json} {env_backend_list_json}", "'environment.backend'"),
]


def _alarm(signum, frame):
    raise TimeoutError(f"no answer within {TIME_LIMIT_S} s")


@pytest.mark.parametrize("line,needle", CASES, ids=[c[0][:70] for c in CASES])
def test_hostile_input_exits_2_with_one_line(line, needle, hostile, tmp_path):
    argv = shlex.split(line.format(**{k: str(v) for k, v in hostile.items()}))
    if argv[0] in ("run", "sweep"):
        argv.insert(1, f"out_dir={tmp_path / 'results'}")
    before = _files(tmp_path)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        r = runner.invoke(app, argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not isinstance(r.exception, TimeoutError), "hung"
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and needle in err, err
    assert _files(tmp_path) - before == set(), "a file was left behind"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < RSS_GROWTH_LIMIT_KB


def test_corpus_is_large_enough():
    assert len(CASES) + len(CHILD_CASES) >= 60


# ------------------------------------------------------------------ children: real limits, real signals


def _cli(argv: list[str], *, cwd: Path, timeout: float = TIME_LIMIT_S, fsize: int | None = None,
         address_space: int = CHILD_ADDRESS_SPACE) -> subprocess.CompletedProcess:
    """The CLI in a child process with an address-space limit (a blow-up dies, not the machine)."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf"), "OPENBLAS_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", "from cgbench.cli.app import main; main()", *argv],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limits, stdin=subprocess.DEVNULL)


CHILD_CASES: list[tuple[str, str]] = [
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules /dev/zero", "character device"),
    ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {fifo_yaml}", "FIFO"),
    ("run workload=trace workload.trace={fifo_jsonl}", "FIFO"),
    ("run " + SMALL + " --out /proc/self/fd/1", "not a regular file"),
    ("run workload.num_requests=10000000", "workload.num_requests"),
    ("grid cg=sglang cg.padding=false engine.max_requests=100000000 engine.max_tokens=100000000", "graphs"),
    ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=inf", "workload.time_scale"),
    ("compare {deep_result_json} {deep_result_json}", "nested"),
]


@pytest.mark.parametrize("line,needle", CHILD_CASES, ids=[c[0][:70] for c in CHILD_CASES])
def test_hostile_input_in_a_limited_child(line, needle, hostile, tmp_path):
    argv = shlex.split(line.format(**{k: str(v) for k, v in hostile.items()}))
    if argv[0] in ("run", "sweep"):
        argv.insert(1, f"out_dir={tmp_path / 'results'}")
    before = _files(tmp_path)
    r = _cli(argv, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert _files(tmp_path) - before == set()


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
    r = _cli(["run", SMALL, "--trace", "--out", str(out)], cwd=tmp_path, fsize=4096)
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
        write_json_atomic(tmp_path / "r.json", _result(metrics={"ttft_ms": {"p50": 1.0, "p99": float("inf")}}))
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
