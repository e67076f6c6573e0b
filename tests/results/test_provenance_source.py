"""Provenance names the checkout only when cgbench really runs from one: a copy of the package
inside some other git repository (an installed wheel whose venv sits in a project of the user's)
records no commit and its installed version instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgbench import __version__
from cgbench.results import document
from cgbench.results.document import installed_version, provenance, source_checkout

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo,
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _unrelated_repo(path: Path, pyproject: str = '[project]\nname = "someone-else"\n') -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    (path / "pyproject.toml").write_text(pyproject)
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "theirs")
    return path


def _copy_package(into: Path) -> Path:
    shutil.copytree(ROOT / "cgbench", into / "cgbench", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return into / "cgbench"


def _is_checkout(path: Path) -> bool:
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == path.resolve()


def test_from_the_checkout_the_commit_is_recorded():
    if not _is_checkout(ROOT):
        pytest.skip("these tests do not run from a git checkout")
    document.git_sha.cache_clear()
    document.git_tree_state.cache_clear()
    doc = provenance()
    assert source_checkout() == ROOT.resolve()
    assert doc["git_sha"] == _git(ROOT, "rev-parse", "HEAD")
    assert isinstance(doc["git_dirty"], bool) and doc["cgbench_version"] == __version__


def test_a_copy_at_the_top_of_another_repository_is_not_a_checkout(tmp_path):
    # the top level matches, but its pyproject.toml is somebody else's project
    repo = _unrelated_repo(tmp_path / "theirs")
    assert source_checkout(_copy_package(repo)) is None


def test_a_copy_below_the_top_of_a_cgbench_repository_is_not_a_checkout(tmp_path):
    # e.g. site-packages/cgbench of a venv made inside a clone: the clone's pyproject names
    # cgbench, but the running code is the installed copy, not the clone's files
    repo = _unrelated_repo(tmp_path / "clone", '[project]\nname = "cgbench"\n')
    site = repo / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    assert source_checkout(_copy_package(site)) is None


def test_a_copy_with_the_projects_own_layout_is_a_checkout(tmp_path):
    repo = _unrelated_repo(tmp_path / "fork", '[project]\nname = "cgbench"\n')
    assert source_checkout(_copy_package(repo)) == repo.resolve()


def test_a_broken_pyproject_is_not_a_checkout(tmp_path):
    repo = _unrelated_repo(tmp_path / "broken", "[project\nname = ")
    assert source_checkout(_copy_package(repo)) is None


def test_a_folder_no_distribution_owns_reports_its_own_version(tmp_path):
    assert installed_version(_copy_package(tmp_path)) == __version__


@pytest.mark.slow
def test_a_copy_inside_an_unrelated_repository_records_no_commit(tmp_path):
    """End to end, in a fresh interpreter that imports the copy: no git field, the version."""
    repo = _unrelated_repo(tmp_path / "theirs")
    _copy_package(repo / "vendor")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CGBENCH_CONFIG_DIR")}
    env["PYTHONPATH"] = str(repo / "vendor")
    code = ("import json, cgbench; from cgbench.results.document import provenance; "
            "print(json.dumps([cgbench.__file__, provenance()]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, check=True, capture_output=True, text=True)
    where, doc = json.loads(out.stdout)
    assert Path(where).is_relative_to(repo / "vendor")
    assert (doc["git_sha"], doc["git_dirty"], doc["git_diff_hash"]) == (None, None, None)
    assert doc["cgbench_version"] == __version__


def _fake_install(site: Path, version: str) -> Path:
    """A site folder holding a copy of the package and the dist-info that owns it."""
    package = _copy_package(site)
    info = site / f"cgbench-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cgbench\nVersion: {version}\n")
    (info / "RECORD").write_text("cgbench/__init__.py,,\n")
    return package


def test_the_installed_version_is_that_of_the_distribution_holding_the_package(tmp_path, monkeypatch):
    package = _fake_install(tmp_path / "site", "9.9.9")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert installed_version(package) == "9.9.9"
    # another folder is not what that distribution installed: its own version, not 9.9.9
    assert installed_version(_copy_package(tmp_path / "elsewhere")) == __version__
