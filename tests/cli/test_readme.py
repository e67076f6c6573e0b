"""The README's commands work as printed: every line of its usage block runs (exit 0), and every
error it shows is the error the command prints. They run from a folder holding the repository's
state files and CI baseline, so no result lands in the checkout."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
runner = CliRunner()
pytestmark = pytest.mark.e2e  # runs the README's commands


def _block_after(heading: str) -> list[str]:
    section = README[README.index(heading):]
    body = section.split("```", 2)[1]
    return [line for line in body.splitlines() if line.strip()]


def usage_commands() -> list[list[str]]:
    return [shlex.split(line.split("  #", 1)[0]) for line in _block_after("## Usage")]


def shown_errors() -> list[tuple[list[str], str]]:
    lines = _block_after("## Errors")
    pairs = []
    for cmd, err in zip(lines, lines[1:], strict=False):
        if cmd.startswith("$ cgbench ") and err.startswith("error: ") and "#" not in cmd:
            pairs.append((shlex.split(cmd[2:]), err))
    return pairs


@pytest.fixture()
def repo_like(tmp_path, monkeypatch) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "states").symlink_to(ROOT / "tests" / "states")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "baseline").symlink_to(ROOT / "results" / "baseline")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_usage_block_is_what_the_test_runs():
    cmds = usage_commands()
    assert len(cmds) >= 12 and all(c[0] == "cgbench" for c in cmds)
    assert {c[1] for c in cmds} >= {"run", "grid", "schedule", "sweep", "compare", "plot"}


def _chained(argv: list[str]) -> bool:
    """Commands that write or read the sweep folders and run files the block names run in order, in one test."""
    return any("results/sweeps/" in a or "results/runs/" in a for a in argv)


def test_the_sweep_commands_run_in_order(repo_like):
    chain = [argv for argv in usage_commands() if _chained(argv)]
    assert {a[1] for a in chain} >= {"sweep", "compare", "plot"}
    for argv in chain:
        r = runner.invoke(app, argv[1:])
        assert r.exit_code == 0, (argv, r.output[-2000:])
    assert (repo_like / "results" / "sweeps" / "default" / "plots").is_dir()


@pytest.mark.parametrize("argv", [a for a in usage_commands() if not _chained(a)], ids=lambda a: " ".join(a)[:60])
def test_every_other_usage_command_runs(repo_like, argv):
    r = runner.invoke(app, argv[1:])
    assert r.exit_code == 0, (argv, r.output[-2000:])


def test_every_error_shown_is_the_error_printed(repo_like):
    pairs = shown_errors()
    assert len(pairs) >= 4
    for argv, expected in pairs:
        r = runner.invoke(app, argv[1:])
        assert r.exit_code == 2, argv
        assert r.stderr.strip() == re.sub(r"\s+", " ", expected), argv
