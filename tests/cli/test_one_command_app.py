"""``cgbench CMD ...`` runs through an app that holds only CMD (``cgbench.cli.app.app_for``: Typer builds
every command an app holds on each call): for every command its help, its refusals and its output are
the whole app's, byte for byte; anything not naming a command first runs the whole app."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import COMMANDS, app, app_for
from tests.cli.test_usage_errors import FORMAT_LINES

runner = CliRunner()


def _same(argv: list[str]) -> None:
    whole, one = runner.invoke(app, argv), runner.invoke(app_for(argv), argv)
    assert (one.exit_code, one.stdout, one.stderr) == (whole.exit_code, whole.stdout, whole.stderr), argv


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_commands_help_and_refusals_are_the_whole_apps(command):
    assert app_for([command]) is not app
    for argv in ([command, "-h"], [command, "--help"], [command, "--no-such-option"], [command, "--version"],
                 [*FORMAT_LINES.get(command, [command]), "--format", "nope"]):
        _same(argv)


def test_a_run_is_the_whole_apps(tmp_path):
    # the table, which holds no time stamp
    argv = ["run", "workload=small", "workload.num_requests=8", "-o", str(tmp_path / "a.json")]
    _same(argv)


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["--version"], ["rn"], ["--no-such-option", "run"]])
def test_anything_else_is_the_whole_app(argv):
    assert app_for(argv) is app


def test_completion_lists_every_command(monkeypatch):
    monkeypatch.setenv("_CGBENCH_COMPLETE", "complete_bash")
    assert app_for(["run"]) is app
