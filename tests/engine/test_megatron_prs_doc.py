"""docs/megatron-prs.md's tables are what scripts/megatron_prs_figures.py prints: every row, from its
own ``cgbench run`` overrides, today."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tests.helpers import load_script

pytestmark = pytest.mark.e2e  # regenerates the doc tables: about 90 simulator runs

ROOT = Path(__file__).resolve().parents[2]


def test_every_table_row_is_current():
    figures = load_script("megatron_prs_figures")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        figures.gating_tables()
        figures.trace_tables()
        figures.sizing_table()
        figures.coverage_table()
        figures.rules_kv_table()
        figures.rules_arrival_table()
    rows = [line for line in out.getvalue().splitlines() if line.startswith("| `")]
    doc = (ROOT / "docs" / "megatron-prs.md").read_text()
    assert len(rows) == 116  # every table's rows and its header
    assert [r for r in rows if r not in doc] == []
