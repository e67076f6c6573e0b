"""Fault injection in the one writer (``cgbench.safeio.write_bytes_atomic``): a failure at each of
its steps (creating the temporary file, writing it, its fsync, the rename, the folder's fsync),
at the first or a later write of a command, for ``run``, ``sweep``, ``advise``, ``plot``, ``export``
and ``calibrate --host``; and for the sets of files written as one (``safeio.write_files_atomic``:
an export, a device calibration's table and report), a failure or Ctrl-C at each step of each file
puts back the whole earlier set.

What must hold after each: no traceback, an exit code that says so (2: one ``error:`` line; a sweep
whose point could not be written: 1), no temporary file left, every file there complete (it parses,
or is the old file untouched), and the same command again (``--resume`` for a sweep and an advise
search) completes with what a run without faults writes. A failed folder fsync is not a lost file
(the rename is done; the folder's own durability is best effort), so there the command succeeds."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench import safeio
from cgbench.cli.app import app
from cgbench.config.schema import ConfigError
from tests.inputs.corpus import SMALL

pytestmark = pytest.mark.e2e  # fault injection: each case runs a command twice

runner = CliRunner()
STEPS = ("open", "write", "fsync", "rename", "dirfsync")


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _Fault:
    """Fails the ``nth`` time the writer reaches ``step`` (counting every write of the command)."""

    def __init__(self, step: str, nth: int, error: Callable[[], BaseException] = _no_space) -> None:
        self.step, self.nth, self.seen, self.fired, self.error = step, nth, 0, False, error

    def hit(self) -> bool:
        self.seen += 1
        if self.seen == self.nth:
            self.fired = True
            return True
        return False


class _FailingFile:
    def __init__(self, f, fault: _Fault) -> None:
        self._f, self._fault = f, fault

    def write(self, data):
        if self._fault.hit():
            raise self._fault.error()
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        self._f.__enter__()
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


def _inject(monkeypatch: pytest.MonkeyPatch, step: str, nth: int,
            error: Callable[[], BaseException] = _no_space) -> _Fault:
    fault = _Fault(step, nth, error)
    if step == "open":
        real_open_temp = safeio._open_temp

        def open_temp(target):
            if fault.hit():
                raise fault.error()
            return real_open_temp(target)

        monkeypatch.setattr(safeio, "_open_temp", open_temp)
    elif step == "write":
        real_fdopen = os.fdopen
        monkeypatch.setattr(safeio.os, "fdopen", lambda fd, *a, **k: _FailingFile(real_fdopen(fd, *a, **k), fault))
    elif step in ("fsync", "dirfsync"):
        real_fsync = os.fsync

        def fsync(fd):
            is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
            if is_dir == (step == "dirfsync") and fault.hit():
                raise fault.error()
            return real_fsync(fd)

        monkeypatch.setattr(safeio.os, "fsync", fsync)
    elif step == "rename":
        real_replace = os.replace

        def replace(src, dst):
            if str(src).endswith(".tmp") and fault.hit():
                raise fault.error()
            return real_replace(src, dst)

        monkeypatch.setattr(safeio.os, "replace", replace)
    return fault


def _check_folder(folder: Path) -> None:
    """No temporary file, and every JSON document there parses."""
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")], "a temporary file was left"
    for p in folder.rglob("*.json"):
        json.loads(p.read_text())


def _check_refusal(r, fault: _Fault, ok_codes: tuple[int, ...] = (2,)) -> None:
    assert "Traceback" not in r.output and not isinstance(r.exception, (OSError, AssertionError)), r.output
    assert fault.fired or fault.nth > 1, "every command writes at least once: the first write must fail"
    if fault.step == "dirfsync" or not fault.fired:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code in ok_codes, r.output
    if r.exit_code == 2:  # one error line, the last (a sweep has said where it writes before)
        lines = r.stderr.strip().splitlines()
        errors = [ln for ln in lines if ln.startswith("error:")]
        assert errors == lines[-1:], lines
        assert errors[0].startswith("error: cannot write") and "no space left" in errors[0], lines


@pytest.mark.parametrize("nth", [1, 2])
@pytest.mark.parametrize("step", STEPS)
def test_run(step, nth, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text('{"old": 1}\n')
    with monkeypatch.context() as m:
        fault = _inject(m, step, nth)
        r = runner.invoke(app, ["run", SMALL, "--out", str(out)])
    _check_refusal(r, fault)
    _check_folder(tmp_path)
    if r.exit_code != 0:
        assert out.read_text() == '{"old": 1}\n', "the old result was lost"
    again = runner.invoke(app, ["run", SMALL, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert json.loads(out.read_text())["metrics"]


def _points(folder: Path) -> dict[str, dict]:
    index = json.loads((folder / "sweep.json").read_text())
    return {" ".join(p["overrides"]): json.loads((folder / p["file"]).read_text())["metrics"]
            for p in index["points"]}


@pytest.fixture(scope="module")
def clean_sweep(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("clean") / "sweep"
    r = runner.invoke(app, ["sweep", "seed=1,2,3", SMALL, "--jobs", "1", "--out", str(folder)])
    assert r.exit_code == 0, r.output
    return _points(folder)


# the writes of a 3-point sweep: the index, three points, the index again, summary.csv ...
@pytest.mark.parametrize("nth", [1, 2, 4, 6])
@pytest.mark.parametrize("step", STEPS)
def test_sweep_then_resume(step, nth, tmp_path, monkeypatch, clean_sweep):
    folder = tmp_path / "sweep"
    argv = ["sweep", "seed=1,2,3", SMALL, "--jobs", "1", "--out", str(folder)]
    with monkeypatch.context() as m:
        fault = _inject(m, step, nth)
        r = runner.invoke(app, argv)
    _check_refusal(r, fault, ok_codes=(1, 2))
    if folder.exists():
        _check_folder(folder)
    again = runner.invoke(app, [*argv, "--resume"] if folder.exists() else argv)
    assert again.exit_code == 0, again.output
    _check_folder(folder)
    assert _points(folder) == clean_sweep


@pytest.mark.parametrize("nth", [1, 3])
@pytest.mark.parametrize("step", STEPS)
def test_advise_then_resume(step, nth, tmp_path, monkeypatch):
    folder = tmp_path / "adv"
    argv = ["advise", SMALL, "--budget-graphs", "4", "--out", str(folder), "--format", "json"]
    with monkeypatch.context() as m:
        fault = _inject(m, step, nth)
        r = runner.invoke(app, argv)
    _check_refusal(r, fault)
    if folder.exists():
        _check_folder(folder)
    again = runner.invoke(app, [*argv, "--resume"])
    assert again.exit_code == 0, again.output
    _check_folder(folder)
    assert json.loads((folder / "advise.json").read_text()) == json.loads(again.stdout)


@pytest.mark.parametrize("step", STEPS)
def test_plot(step, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    result = tmp_path / "r.json"
    assert runner.invoke(app, ["run", SMALL, "--trace", "--requests", "--out", str(result)]).exit_code == 0
    out = tmp_path / "plots"
    with monkeypatch.context() as m:
        fault = _inject(m, step, 2)
        r = runner.invoke(app, ["plot", str(result), "--out", str(out)])
    _check_refusal(r, fault)
    if out.exists():
        _check_folder(out)
    again = runner.invoke(app, ["plot", str(result), "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert all(Path(line).stat().st_size > 0 for line in again.stdout.split())


# -- export and calibrate: sets of files written as one (safeio.write_files_atomic)

def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run_with_records(tmp_path_factory) -> Path:
    result = tmp_path_factory.mktemp("records") / "r.json"
    r = runner.invoke(app, ["run", SMALL, "--trace", "--requests", "--out", str(result)])
    assert r.exit_code == 0, r.output
    return result


# an export of a run with its records writes 7 files: the first, one in the middle, the last
@pytest.mark.parametrize("nth", [1, 4, 7])
@pytest.mark.parametrize("step", STEPS)
def test_export(step, nth, tmp_path, monkeypatch, run_with_records):
    out = tmp_path / "flat"
    with monkeypatch.context() as m:
        fault = _inject(m, step, nth)
        r = runner.invoke(app, ["export", str(run_with_records), "--out", str(out)])
    _check_refusal(r, fault)
    if r.exit_code != 0:  # nothing of the set is left: the same command again is not refused as "exists"
        assert not out.exists() or _tree(out) == {}, _tree(out).keys()
    again = runner.invoke(app, ["export", str(run_with_records), "--out", str(out), "--force"])
    assert again.exit_code == 0, again.output
    _check_folder(out)
    assert len(_tree(out)) == 7


@pytest.mark.parametrize("nth", [1, 4, 7])
@pytest.mark.parametrize("step", ["write", "rename"])
def test_export_force_puts_the_old_export_back(step, nth, tmp_path, monkeypatch, run_with_records):
    """--force over an earlier export: a failure part-way leaves the earlier export whole, byte for byte."""
    out = tmp_path / "flat"
    assert runner.invoke(app, ["export", str(run_with_records), "--out", str(out)]).exit_code == 0
    (out / "metrics.csv").write_text("an earlier export\n")
    before = _tree(out)
    with monkeypatch.context() as m:
        fault = _inject(m, step, nth)
        r = runner.invoke(app, ["export", str(run_with_records), "--out", str(out), "--force"])
    _check_refusal(r, fault)
    assert _tree(out) == before
    _check_folder(out)


class _Table:
    device = "cpu"

    def __init__(self, value: float) -> None:
        self.value = value

    def to_dict(self) -> dict:
        return {"kind": "stub table", "value": self.value}


class _Result:
    def __init__(self, value: float) -> None:
        self.table, self.report = _Table(value), {"kind": "stub report", "value": value}


@pytest.mark.parametrize("interrupt", [False, True])
@pytest.mark.parametrize("nth", [1, 2])
@pytest.mark.parametrize("step", STEPS)
def test_a_calibration_table_and_its_report_change_together(step, nth, interrupt, tmp_path, monkeypatch):
    """The device calibration's two files (the table the simulator reads and its report): a failure, or
    Ctrl-C, at any step of either write leaves both old files, or (a folder fsync is best effort) both
    new ones; never a new table beside an old report."""
    from cgbench.backends.torch.calibration import report_path, write_outputs

    table = tmp_path / "cal.json"
    write_outputs(_Result(1.0), table)
    old = _tree(tmp_path)
    with monkeypatch.context() as m:
        fault = _inject(m, step, nth, KeyboardInterrupt if interrupt else _no_space)
        try:
            write_outputs(_Result(2.0), table)
            failed = False
        except (ConfigError, KeyboardInterrupt):
            failed = True
    assert failed == (fault.fired and (step != "dirfsync" or interrupt))
    values = {json.loads(p.read_text())["value"] for p in (table, report_path(table))}
    assert values == ({1.0} if failed else {2.0})
    if failed:
        assert _tree(tmp_path) == old
    _check_folder(tmp_path)


@pytest.mark.parametrize("step", STEPS)
def test_calibrate_host(step, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    out = tmp_path / "host.json"
    out.write_text('{"old": 1}\n')
    argv = ["calibrate", "--host", "model=tiny_hybrid", "--repeat", "1", "--warmup", "0", "--out", str(out)]
    with monkeypatch.context() as m:
        fault = _inject(m, step, 1)
        r = runner.invoke(app, argv)
    _check_refusal(r, fault)
    _check_folder(tmp_path)
    if r.exit_code != 0:
        assert out.read_text() == '{"old": 1}\n', "the old calibration was lost"
    again = runner.invoke(app, argv)
    assert again.exit_code == 0, again.output
    assert json.loads(out.read_text())["host_op_us"] > 0


def test_a_set_on_a_file_system_without_hard_links_loses_no_file(tmp_path, monkeypatch):
    """No hard links (os.link refused): a failure at the second file leaves the first one written
    (complete, new) and the second one old; nothing is deleted."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"v": 1}\n')
    b.write_text('{"v": 1}\n')

    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    with monkeypatch.context() as m:
        m.setattr(safeio.os, "link", no_links)
        _inject(m, "rename", 2)
        with pytest.raises(ConfigError):
            safeio.write_files_atomic({a: '{"v": 2}\n', b: '{"v": 2}\n'})
    assert (a.read_text(), b.read_text()) == ('{"v": 2}\n', '{"v": 1}\n')
    _check_folder(tmp_path)
