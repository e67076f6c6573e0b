"""The content of ``cgbench report`` (``cgbench.analysis.report``): sections in order, cells that
sort by their value, and the refusals of a document that is not what it claims."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from cgbench.analysis.report import SWEEP, Cell, build_report, cell, graph_usage_table
from cgbench.config.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baseline"


def test_cells_show_registry_formats_and_sort_by_the_raw_value():
    assert cell(0.0171, "eager_step_fraction") == Cell("1.710%", 0.0171)
    assert cell(5381, "steps") == Cell("5,381", 5381.0)
    assert cell(True) == Cell("yes") and cell(None) == Cell("-") and cell("chat") == Cell("chat")
    assert cell([1, 2]).text == "[1, 2]" and cell([1, 2]).sort is None


def test_graph_usage_lists_hit_graphs_by_hits_then_eager_reasons():
    doc = {"graph_usage": [{"graph": [8, 0, 8], "hits": 2, "real_tokens": 12, "padded_tokens": 4},
                           {"graph": [4, 0, 4], "hits": 0, "real_tokens": 0, "padded_tokens": 0},
                           {"graph": [2, 0, 2], "hits": 5, "real_tokens": 10, "padded_tokens": 0}],
           "metrics": {"eager_steps_by_reason": {"shape": 3}}}
    t = graph_usage_table(doc, "usage")
    assert [[c.text for c in r] for r in t.rows] == [["[2, 0, 2]", "5", "10", "0", "0.00%"],
                                                     ["[8, 0, 8]", "2", "12", "4", "25.00%"],
                                                     ["eager: shape", "3", "", "", ""]]
    assert t.rows[1][4].sort == 0.25


def test_a_sweep_report_without_matplotlib_names_its_missing_figures(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = build_report(BASELINE)
    assert r.kind == SWEEP
    assert [s.heading for s in r.sections] == ["Headline", "Health flags", "Graph usage", "Comparisons", "Load curves"]
    assert r.missing_figures and "matplotlib" in r.figure_hint
    assert not any(s.figures for s in r.sections)
    assert ("points", "done 48, failed 0, pending 0") in r.facts


@pytest.mark.parametrize(("change", "needle"), [
    ({"candidates": None}, "'candidates'"),
    ({"pareto": "x"}, "'pareto'"),
    ({"objective": {"name": "throughput"}}, "objective.metric"),
    ({"candidates": [{"name": "a", "space": "explicit", "num_graphs": "2", "metrics": {}, "objective": 1.0}]},
     "candidates[0].num_graphs"),
    ({"recommended": [1]}, "'recommended'"),
])
def test_an_advise_report_missing_what_the_report_reads_is_refused(tmp_path, change, needle):
    from cgbench.results.document import SCHEMA_VERSION

    doc = {"kind": "cgbench-advise", "schema_version": SCHEMA_VERSION, "objective": {"name": "t", "metric": "m"},
           "budgets": {"graphs": 4}, "overrides": [], "candidates": [], "pareto": [], "recommended": None, **change}
    bad = tmp_path / "hostile_inputs" / "advise.json"  # not a valid advise report: the schema check skips it
    bad.parent.mkdir()
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=re.escape(needle)):
        build_report(bad)
