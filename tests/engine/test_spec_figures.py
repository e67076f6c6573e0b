"""The README's table "Speculative decoding and decode graph coverage" is what
scripts/spec_figures.py computes, row for row."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow



def test_the_readme_table_is_the_scripts():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Speculative decoding and decode graph coverage"):]
    section = section[:section.index("\n## ")]
    script = load_script("spec_figures")
    assert script.HEADER in section
    for line in script.readme_rows():
        assert line in section, line
