"""The README's table "Speculative decoding and decode graph coverage" is what
scripts/spec_figures.py computes, row for row."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _script():
    spec = importlib.util.spec_from_file_location("spec_figures", ROOT / "scripts" / "spec_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_table_is_the_scripts():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Speculative decoding and decode graph coverage"):]
    section = section[:section.index("\n## ")]
    script = _script()
    assert script.HEADER in section
    for line in script.readme_rows():
        assert line in section, line
