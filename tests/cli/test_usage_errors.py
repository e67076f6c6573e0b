"""A command line Click refuses (an unknown option, a bad ``--format``, ``--jobs 0``, a missing
argument) is one ``error:`` line on stderr and exit code 2 for every command, never Click's
boxed usage message; ``--format`` is checked by one function (``cgbench.cli.formats``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.cli.formats import FORMATS, TABLE_OR_JSON, check_format
from cgbench.config.schema import ConfigError
from tests.helpers import one_error_line

runner = CliRunner()
COMMANDS = ("run", "grid", "sweep", "compare", "plot", "schedule", "calibrate", "cost", "advise", "schema",
            "explain", "export", "report", "docs")
BOX = ("╭", "╰", "│", "Usage:", "Try ")
# every command with its positional arguments, so the --format check is what refuses the line
FORMAT_LINES = {
    "run": ["run"], "grid": ["grid"], "sweep": ["sweep"], "compare": ["compare", "a.json", "b.json"],
    "schedule": ["schedule", "state.json"], "cost": ["cost", "--shape", "1,0,1"],
    "advise": ["advise", "--budget-graphs", "4"], "plot": ["plot", "x"], "report": ["report", "x", "-o", "y.html"],
    "calibrate": ["calibrate"], "export": ["export", "x", "-o", "y"], "docs": ["docs"],
}


def _one_line(r, *needles: str) -> str:
    line = one_error_line(r, *needles)
    assert not any(mark in r.stderr for mark in BOX), r.stderr  # no Rich box around the error
    return line


def test_the_app_is_every_command():
    from typer.main import get_command

    assert set(get_command(app).commands) == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_option_is_one_line(command):
    r = runner.invoke(app, [command, "--no-such-option"])
    _one_line(r, "No such option: --no-such-option", f" {command} --help)")


@pytest.mark.parametrize("command", sorted(FORMAT_LINES))
def test_a_bad_format_is_the_same_one_line_everywhere(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # results/ (the default out_dir) would appear here
    r = runner.invoke(app, [*FORMAT_LINES[command], "--format", "xml"])
    allowed = FORMATS if command in ("run", "grid", "sweep", "compare", "schedule") else TABLE_OR_JSON
    _one_line(r, f"--format: 'xml' is not one of {', '.join(allowed)}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("line,needle", [
    (["sweep", "--jobs", "0"], "--jobs: "),
    (["sweep", "--repeat", "0"], "--repeat: "),
    (["cost", "--shape", "1,0,1", "--context", "many"], "--context: "),
    (["compare"], "Missing argument"),
    (["schedule"], "Missing argument 'STATE.json'"),
    (["schema"], "Missing argument 'KIND'"),
    (["explain"], "name a result (RUN.json) or a log (--megatron-log LOG)"),  # RUN.json is optional with a log
    (["export", "r.json"], "Missing option '--out'"),
    (["run", "--out"], "requires an argument"),
    (["no-such-command"], "No such command 'no-such-command'"),
])
def test_values_click_refuses_are_one_line(line, needle):
    _one_line(runner.invoke(app, line), needle)


def test_help_version_and_the_bare_command_are_unchanged():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.startswith("cgbench ")
    r = runner.invoke(app, ["sweep", "--help"])
    assert r.exit_code == 0 and "Usage: " in r.stdout and " sweep [OPTIONS]" in r.stdout
    r = runner.invoke(app, [])
    assert r.exit_code == 2 and "Usage: " in r.output and "Commands" in r.output


def test_check_format_is_the_one_check():
    assert check_format("csv") == "csv"
    assert check_format("json", TABLE_OR_JSON) == "json"
    with pytest.raises(ConfigError, match=r"^--format: 'csv' is not one of table, json$"):
        check_format("csv", TABLE_OR_JSON)
