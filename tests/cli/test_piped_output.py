"""Piped output (CI logs, ``| less``, ``| tee``) is never cut: help is not truncated to ``…``, and
paths and commands meant for copying are printed on one line, however long."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.cli.console import PIPED_WIDTH, help_width, make_console, print_line

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("run", "grid", "sweep", "compare", "plot", "schedule", "calibrate", "cost", "advise")
# the longest unbreakable words of the help pages: each must come out whole
RUN_OUT_DEFAULT = "<out_dir>/runs/<time>_<model>_<cg>_<policy>_<workload>[_<engine>][_<backend>][_<hardware>]"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_never_truncated_when_not_a_terminal(command, monkeypatch):
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    r = runner.invoke(app, [*([command] if command else []), "--help"])
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout, r.stdout
    if command == "run":
        assert RUN_OUT_DEFAULT in r.stdout


@pytest.mark.e2e
def test_help_through_a_pipe_is_whole():
    p = subprocess.run([sys.executable, "-m", "cgbench", "run", "--help"], capture_output=True,
                       text=True, env=_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "…" not in p.stdout and RUN_OUT_DEFAULT in p.stdout


def test_the_help_width_follows_terminal_width_else_the_piped_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TERMINAL_WIDTH", "100")
    assert help_width() == 100
    monkeypatch.delenv("TERMINAL_WIDTH")
    assert help_width() == PIPED_WIDTH  # pytest's stdout is not a terminal


def test_a_long_path_line_is_not_wrapped_on_a_narrow_console(capsys):
    console = make_console()
    console.width = 40
    path = "/very/" + "long-folder-name/" * 8 + "host.json"
    print_line(console, "use hardware.host_calibration=", path)
    assert capsys.readouterr().out == f"use hardware.host_calibration={path}\n"


@pytest.mark.e2e
def test_calibrate_host_prints_its_hint_on_one_line_through_a_pipe(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / ("d" * 120) / "host_calibration.json"
    out.parent.mkdir()
    p = subprocess.run([sys.executable, "-m", "cgbench", "calibrate", "--host", "model=tiny_transformer",
                        "--repeat", "1", "--warmup", "0", "--out", str(out)],
                       capture_output=True, text=True, env=_env(COLUMNS="80"),
                       timeout=300)
    assert p.returncode == 0, p.stderr
    hint = [line for line in p.stdout.splitlines() if "hardware.host_calibration=" in line]
    assert len(hint) == 1 and hint[0].endswith(f"use hardware.host_calibration={out}"), p.stdout
    assert f"host calibration: {out}\n" in p.stderr and out.is_file()
