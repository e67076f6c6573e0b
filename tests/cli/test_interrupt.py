"""Ctrl-C during `cgbench run` exits 130 and leaves no result file, partial or whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import default_sigint

pytestmark = pytest.mark.e2e  # starts and signals a process

ROOT = Path(__file__).resolve().parents[2]


def test_sigint_during_run_leaves_nothing(tmp_path):
    out_dir = tmp_path / "res"
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
    cmd = [sys.executable, "-m", "cgbench.cli.app", "run", "workload=chat", "workload.num_requests=400000",
           "engine.oracle=true", f"out_dir={out_dir}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            preexec_fn=default_sigint)
    # the result's folder is made only when the result is written, so nothing on disk says the run
    # started: the config is checked within a few seconds, the 400,000-request run takes minutes
    time.sleep(6)
    assert proc.poll() is None, "the run ended before it could be stopped"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not out_dir.exists(), list(out_dir.rglob("*"))
