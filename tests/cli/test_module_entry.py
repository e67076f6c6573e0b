"""`python -m cgbench` is the console script under another name: same entry, same commands, its
usage line names what the user typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cgbench.__main__
from cgbench.cli import entry

ROOT = Path(__file__).resolve().parents[2]


def test_the_module_calls_the_console_scripts_entry():
    import tomllib

    script = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["cgbench"]
    assert script == "cgbench.cli.entry:main"
    assert cgbench.__main__.main is entry.main


@pytest.mark.slow
def test_python_m_cgbench_prints_its_usage():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "cgbench", "run", "--help"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Usage: python -m cgbench run [OPTIONS]" in p.stdout
    p = subprocess.run([sys.executable, "-m", "cgbench", "no-such-command"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 2 and "No such command" in p.stderr and "Traceback" not in p.stderr
