"""Export sets all-or-nothing (issue 44 class 8): an export into a new folder is staged in a temporary
sibling folder and renamed into place (``safeio.write_files_atomic``), so a full disk, Ctrl-C or SIGTERM
(handled as Ctrl-C while the set is written) at any file leaves no new folder, and the next export works."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import default_sigint

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("run")
    r = runner.invoke(app, ["run", "workload.num_requests=12", "--trace", "--requests", "--out", str(d / "r.json")])
    assert r.exit_code == 0, r.output
    return d / "r.json"


def _only(folder: Path, *names: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(names), list(folder.iterdir())


@pytest.mark.parametrize("fault", ["full", "interrupt"])
@pytest.mark.parametrize("at", [0, 3])
def test_a_fault_at_any_file_leaves_no_new_folder(result, tmp_path, monkeypatch, fault, at) -> None:
    import cgbench.safeio as safeio

    real, count = safeio.write_text_atomic, [0]

    def failing(*args, **kwargs):
        count[0] += 1
        if count[0] > at:
            if fault == "full":
                raise safeio.ConfigError(f"cannot write: {os.strerror(errno.ENOSPC)}")
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    out = tmp_path / "exports" / "new"
    with monkeypatch.context() as m:
        m.setattr(safeio, "write_text_atomic", failing)
        r = runner.invoke(app, ["export", str(result), "--out", str(out)])
    assert r.exit_code == (2 if fault == "full" else 130), r.output
    assert not out.exists() and not (tmp_path / "exports").exists()  # nor the parent it made
    _only(tmp_path)
    r = runner.invoke(app, ["export", str(result), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert len(list(out.iterdir())) >= 5
    _only(tmp_path / "exports", "new")


_SLOW_EXPORT = """
import sys, time
import cgbench.safeio as s
real = s.write_text_atomic
def slow(*a, **k):
    time.sleep(0.15)
    return real(*a, **k)
s.write_text_atomic = slow
from cgbench.cli.app import main
sys.argv = ["cgbench", *sys.argv[1:]]
main()
"""


@pytest.mark.e2e  # starts and signals a process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_export_leaves_no_partial_set_and_a_later_export_works(result, tmp_path, sig) -> None:
    rng = random.Random(f"export-{sig}")
    out = tmp_path / "new"
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_EXPORT, "export", str(result), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".new.") for p in tmp_path.iterdir()):  # the set is being staged
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.5))  # somewhere among the files
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    if proc.returncode == 0:  # the signal came after the rename: the whole set
        assert len(list(out.iterdir())) >= 5
    else:
        assert proc.returncode == 130, (proc.returncode, err)
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".new.")]
    r = runner.invoke(app, ["export", str(result), "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
