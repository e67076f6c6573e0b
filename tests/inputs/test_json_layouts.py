"""The three layouts a document is written in (``safeio.LAYOUTS``: indented, compact, lines) hold the
same document on reading and refuse the same documents with the same message; ``lines`` puts each
record of a top-level list (a sweep index's points) on a line of its own."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.schema import ConfigError
from cgbench.safeio import LAYOUTS, dumps_in, dumps_lines

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_infinity=True, allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=24)


def _outcome(doc, layout: str):
    try:
        return "read", json.loads(dumps_in(doc, layout))
    except ConfigError as e:
        return "refused", str(e)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _VALUES, max_size=6))
def test_every_layout_reads_back_the_same_document_or_refuses_it_alike(doc) -> None:
    outcomes = [_outcome(doc, layout) for layout in LAYOUTS]
    assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0]
    if outcomes[0][0] == "read":
        assert outcomes[0][1] == json.loads(json.dumps(doc))  # what the standard encoder writes


def test_a_refused_value_is_named_from_the_top_in_the_lines_layout() -> None:
    with pytest.raises(ConfigError, match=r"^points\[1\]\.p99: not a finite number"):
        dumps_lines({"name": "s", "points": [{"p99": 1.0}, {"p99": float("inf")}]})


def test_a_sweep_index_has_a_line_per_point(tmp_path) -> None:
    out = tmp_path / "sw"
    r = CliRunner().invoke(app, ["sweep", "seed=range(0,3)", "workload=small", "workload.num_requests=4",
                                 "--out", str(out), "--format", "csv"])
    assert r.exit_code == 0, r.output
    text = (out / "sweep.json").read_text()
    index = json.loads(text)
    point_lines = [json.loads(line.strip().rstrip(",")) for line in text.splitlines() if '"file":' in line]
    assert point_lines == index["points"] and len(point_lines) == 3
