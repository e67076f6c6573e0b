"""The ``ttft_collapse`` health flag: a gating policy whose p99 TTFT is many times the no-gating
policy's (PR #6675's chat run: ~15 minutes), from the same no-gating run as ``throughput_collapse``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.results.health import TTFT_COLLAPSE_FACTOR, ttft_collapse


def _m(p99):
    return {"ttft_ms": {"p99": p99}}


def test_the_flag_fires_at_the_factor_and_not_below():
    assert TTFT_COLLAPSE_FACTOR == 10.0
    flag = ttft_collapse(_m(1500.0), _m(150.0))
    assert flag == {"code": "ttft_collapse", "ratio": 10.0,
                    "message": "p99 TTFT 1,500 ms is 10.0x the no-gating policy's (budget: 150 ms)"}
    assert ttft_collapse(_m(1499.0), _m(150.0)) is None


def test_a_missing_or_zero_figure_raises_no_flag():
    assert ttft_collapse(_m(None), _m(150.0)) is None
    assert ttft_collapse(_m(1500.0), {"ttft_ms": None}) is None
    assert ttft_collapse(_m(1500.0), _m(0.0)) is None
    assert ttft_collapse({}, _m(1.0)) is None


@pytest.mark.slow
def test_a_serialising_gate_carries_the_flag_with_the_ratio_of_the_two_runs(tmp_path):
    """defer on a chunked chat run: heavy deferral, and p99 TTFT many times the budget run's."""
    ovr = ["cg=sparse", "engine=chunked", "workload=chat", "workload.num_requests=8"]
    docs = {}
    for policy in ("defer", "budget"):
        out = tmp_path / f"{policy}.json"
        r = CliRunner().invoke(app, ["run", *ovr, f"policy={policy}", "--out", str(out)])
        assert r.exit_code == 0, r.output
        docs[policy] = json.loads(out.read_text())
    flag = next(w for w in docs["defer"]["warnings"] if w["code"] == "ttft_collapse")
    p99 = {k: d["metrics"]["ttft_ms"]["p99"] for k, d in docs.items()}
    assert flag["ratio"] == p99["defer"] / p99["budget"] >= TTFT_COLLAPSE_FACTOR
    assert not [w for w in docs["budget"]["warnings"] if w["code"] == "ttft_collapse"]
