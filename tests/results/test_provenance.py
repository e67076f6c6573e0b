"""Provenance: a result records whether the checkout had uncommitted changes, and a hash of them
that is equal for equal changes and different for different ones."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cgbench.results.document import git_tree_state, provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo, check=True,
                   capture_output=True)


def _repo(path: Path) -> Path:
    path.mkdir()
    _git(path, "init", "-q")
    (path / "a.py").write_text("x = 1\n")
    (path / ".gitignore").write_text("ignored/\n")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "one")
    return path


def _state(repo: Path) -> tuple[bool | None, str | None]:
    git_tree_state.cache_clear()
    return git_tree_state(repo)


def test_a_clean_checkout_is_not_dirty_and_has_no_diff_hash(tmp_path):
    repo = _repo(tmp_path / "r")
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big.json").write_text("{}")  # ignored files do not count
    assert _state(repo) == (False, None)


def test_equal_changes_hash_equal_and_different_changes_differ(tmp_path):
    one, two = _repo(tmp_path / "one"), _repo(tmp_path / "two")
    for repo in (one, two):
        (repo / "a.py").write_text("x = 2\n")
    a, b = _state(one), _state(two)
    assert a[0] is True and a == b and len(a[1]) == 16
    (two / "a.py").write_text("x = 3\n")
    assert _state(two)[1] != a[1]
    (one / "new.py").write_text("y = 1\n")  # an untracked file is a change too
    assert _state(one)[0] is True and _state(one)[1] != a[1]


def test_outside_a_checkout_nothing_is_claimed(tmp_path):
    assert _state(tmp_path) == (None, None)


def test_provenance_carries_the_state():
    git_tree_state.cache_clear()
    doc = provenance()
    assert set(doc) >= {"git_sha", "git_dirty", "git_diff_hash"}
    assert (doc["git_dirty"] is None) == (doc["git_sha"] is None)
    assert (doc["git_diff_hash"] is not None) == bool(doc["git_dirty"])
