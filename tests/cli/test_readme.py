"""The README's commands work as printed: every line of its usage and report blocks runs (exit 0),
and every error it shows is the error the command prints. They run from a folder holding the
repository's state files and CI baseline, so no result lands in the checkout; that folder is a git
repository with the checkout's ``.gitignore``, and after every command ``git status`` is clean:
following the README leaves nothing untracked, so later results are not ``git_dirty``."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
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


def _commands(heading: str) -> list[list[str]]:
    return [shlex.split(line.split("  #", 1)[0]) for line in _block_after(heading)]


def needs_a_cluster(argv: list[str]) -> bool:
    """A line that submits to SLURM: tests/analysis/test_slurm.py runs it on the local cluster."""
    return any(a == "--executor" and b == "slurm" for a, b in zip(argv, argv[1:], strict=False))


def usage_commands(*, cluster: bool = False) -> list[list[str]]:
    """The usage block's lines: those that run on this machine, or (``cluster``) those that need SLURM."""
    return [argv for argv in _commands("## Usage") if needs_a_cluster(argv) == cluster]


def report_commands() -> list[list[str]]:
    return _commands("### Reports")


def shown_errors() -> list[tuple[list[str], str]]:
    lines = _block_after("## Errors")
    pairs = []
    for cmd, err in zip(lines, lines[1:], strict=False):
        if cmd.startswith("$ cgbench ") and err.startswith("error: ") and "#" not in cmd:
            pairs.append((shlex.split(cmd[2:]), err))
    return pairs


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture()
def repo_like(tmp_path, monkeypatch) -> Path:
    """A clean checkout as far as git sees it: the state files and the baseline (links) and the
    checkout's .gitignore, committed."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "states").symlink_to(ROOT / "tests" / "states")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "configs").symlink_to(ROOT / "examples" / "configs")  # the experiment example
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "baseline").symlink_to(ROOT / "results" / "baseline")
    shutil.copyfile(ROOT / ".gitignore", tmp_path / ".gitignore")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "checkout")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def assert_clean(repo: Path, argv: list[str]) -> None:
    """Nothing the command wrote is untracked or changed in the checkout."""
    status = _git(repo, "status", "--porcelain", "--untracked-files=all")
    assert not status, (f"{' '.join(argv)} left the checkout dirty (outputs outside an ignored folder):\n"
                        f"{status}")


def test_assert_clean_sees_an_output_outside_the_ignored_folders(repo_like):
    """Negative control: a file at the checkout's root (report.html) is caught; one under results/ is not."""
    (repo_like / "results" / "reports").mkdir()
    (repo_like / "results" / "reports" / "run.html").write_text("x")
    assert_clean(repo_like, ["ok"])
    (repo_like / "report.html").write_text("x")
    with pytest.raises(AssertionError, match="report.html"):
        assert_clean(repo_like, ["cgbench", "report"])


def test_the_usage_block_is_what_the_test_runs():
    cmds = usage_commands()
    assert len(cmds) >= 12 and all(c[0] == "cgbench" for c in cmds)
    assert {c[1] for c in cmds} >= {"run", "grid", "schedule", "sweep", "compare", "plot"}


def _chained(argv: list[str]) -> bool:
    """Commands that write or read the sweep folders, run files and advise reports the blocks name run
    in order, in one test."""
    return argv[1] == "advise" or any("results/sweeps/" in a or "results/runs/" in a for a in argv)


def _placeholders_filled(argv: list[str], repo: Path) -> list[str]:
    """``results/advise/<run>/``: the one advise report the chain wrote."""
    out = []
    for a in argv:
        if "<run>" in a:
            (run,) = (repo / "results" / "advise").iterdir()
            a = a.replace("<run>", run.name)
        out.append(a)
    return out


def test_the_sweep_advise_and_report_commands_run_in_order(repo_like):
    chain = [argv for argv in usage_commands() if _chained(argv)] + report_commands()
    assert {a[1] for a in chain} >= {"sweep", "compare", "plot", "advise", "report"}
    for argv in chain:
        r = runner.invoke(app, _placeholders_filled(argv, repo_like)[1:])
        assert r.exit_code == 0, (argv, r.output[-2000:])
        assert_clean(repo_like, argv)
    assert (repo_like / "results" / "sweeps" / "default" / "plots").is_dir()
    assert len(list((repo_like / "results" / "reports").glob("*.html"))) == len(report_commands())


@pytest.mark.parametrize("argv", [a for a in usage_commands() if not _chained(a)], ids=lambda a: " ".join(a)[:60])
def test_every_other_usage_command_runs(repo_like, argv):
    r = runner.invoke(app, argv[1:])
    assert r.exit_code == 0, (argv, r.output[-2000:])
    assert_clean(repo_like, argv)


def test_every_error_shown_is_the_error_printed(repo_like):
    pairs = shown_errors()
    assert len(pairs) >= 4
    for argv, expected in pairs:
        r = runner.invoke(app, argv[1:])
        assert r.exit_code == 2, argv
        assert r.stderr.strip() == re.sub(r"\s+", " ", expected), argv
    assert_clean(repo_like, ["the errors block"])
