"""Every module cgbench imports is declared in pyproject.toml, by deptry (`make deps-check`): the
core dependencies for what always runs, an extra for each optional feature (torch, gpu, plot,
slurm), and a check that would see a dropped declaration."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _deptry(tmp_path: Path, config: Path) -> list[dict]:
    if importlib.util.find_spec("deptry") is None:
        pytest.fail("deptry is not installed: pip install -e '.[dev]' (or make dev)")
    report = tmp_path / "deptry.json"
    subprocess.run([sys.executable, "-m", "deptry", "--no-ansi", "--config", str(config), "-o", str(report),
                    "cgbench"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return json.loads(report.read_text())


def _issues(found: list[dict]) -> set[tuple[str, str]]:
    return {(issue["error"]["code"], issue["module"]) for issue in found}


@pytest.mark.slow
def test_every_import_is_declared(tmp_path):
    found = _deptry(tmp_path, ROOT / "pyproject.toml")
    assert found == [], "\n".join(f"{i['location']['file']}:{i['location']['line']}: {i['error']['message']}"
                                  for i in found)


@pytest.mark.slow
def test_a_dropped_declaration_is_reported(tmp_path):
    """The check is not vacuous: without pyyaml in the dependencies and without the slurm extra's
    submitit, deptry names both imports."""
    text = (ROOT / "pyproject.toml").read_text()
    edited = re.sub(r'^\s*"pyyaml[^"]*",.*\n', "", text, flags=re.M)
    edited = re.sub(r'^slurm = \[.*\]$', 'slurm = []', edited, flags=re.M)
    edited = re.sub(r',\s*"submitit>=[^"]*"', "", edited)  # the dev extra's copy
    assert edited.count("pyyaml") == text.count("pyyaml") - 1 and '"submitit>=' not in edited
    config = tmp_path / "pyproject.toml"
    config.write_text(edited)
    issues = _issues(_deptry(tmp_path, config))
    assert ("DEP003", "yaml") in issues  # still there, but only through omegaconf
    assert ("DEP003", "submitit") in issues or ("DEP001", "submitit") in issues


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower().replace("_", "-")


def test_each_install_hint_names_an_extra_that_provides_the_module():
    """`pip install 'cgbench[EXTRA]'`, the hint a missing optional module gets, installs it."""
    import tomllib

    from cgbench.cli.errors import OPTIONAL_DEPS

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    module_of = project["tool"]["deptry"]["package_module_name_map"]
    for module, extra in OPTIONAL_DEPS.items():
        provides = {module_of.get(name, name.replace("-", "_")) for name in map(_requirement_name, extras[extra])}
        assert module in provides, (module, extra, extras[extra])
