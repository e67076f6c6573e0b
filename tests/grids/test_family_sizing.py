"""``cgbench grid``: the generator family each graph came from (prefill/mixed or decode-only) and each
family's sizing (``cgbench.grids.megatron.family_sizing``), which differ under ``cg.distribution=hybrid``."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.cli.render_grid import family_of, graphs_table, grid_json, summary_table
from cgbench.config.schema import CGConfig, EngineConfig, ModelConfig
from cgbench.grids.build import build_grid
from cgbench.grids.megatron import family_sizing

ENGINE_40 = replace(EngineConfig(), max_requests=40, tp_size=8)


def test_hybrid_families_at_the_prs_configuration():
    prefill, decode = family_sizing(CGConfig(distribution="hybrid"), ENGINE_40)
    assert (prefill.family, prefill.distribution, prefill.cap) == ("prefill/mixed", "exponential", 16384)
    assert prefill.prefill_counts == (1, 2, 4, 8, 16, 32, 40)
    assert prefill.token_sizes[:3] == (16384, 8192, 4096) and prefill.token_sizes[-1] == 8
    assert (decode.family, decode.distribution, decode.cap) == ("decode-only", "linear", 40)
    assert decode.token_sizes == (40, 32, 24, 16, 8) and decode.prefill_counts == ()
    (e_prefill, e_decode) = family_sizing(CGConfig(), ENGINE_40)
    assert e_prefill == prefill and e_decode.distribution == "exponential" and e_decode.token_sizes == (40, 24, 16, 8)


@pytest.mark.parametrize("dist", ["exponential", "linear", "hybrid"])
def test_every_graph_comes_from_its_familys_sizes(dist):
    engine = replace(EngineConfig(), max_requests=64)  # tp 1, no speculative tokens: T is the size itself
    cg = CGConfig(distribution=dist)
    families = {f.family: f for f in family_sizing(cg, engine)}
    for g in build_grid(cg, engine, ModelConfig(kind="hybrid")).graphs:
        f = families["prefill/mixed" if g.prefill_req_count > 0 else "decode-only"]
        assert g.token_count in f.token_sizes, (g, f)
        if g.prefill_req_count > 0 and g.decode_req_count > 0:
            assert g.prefill_req_count in f.prefill_counts


def test_kinds_without_the_generator_have_no_families():
    engine = EngineConfig()
    assert family_sizing(CGConfig(kind="explicit", graphs=[[8, 0, 8]]), engine) == ()
    assert family_sizing(CGConfig(kind="vllm", all_prefills=False), engine) == ()
    assert family_sizing(CGConfig(num_cuda_graphs=None), engine) == ()
    (only,) = family_sizing(CGConfig(kind="decode_only", all_prefills=False, non_decode=False), engine)
    assert only.family == "decode-only"
    (only,) = family_sizing(CGConfig(mixed_prefill_count=0), engine)
    assert only.family == "decode-only"


def test_the_report_names_each_graphs_family_and_sizing():
    cg = CGConfig(distribution="hybrid")
    grid = build_grid(cg, ENGINE_40, ModelConfig(kind="hybrid"))
    families = family_sizing(cg, ENGINE_40)
    labels = [family_of(g, families) for g in grid.graphs]
    assert labels[0] == "prefill/mixed (exponential)" and labels[-1] == "decode-only (linear)"
    assert labels.count("decode-only (linear)") == 5
    assert [c.header for c in graphs_table(grid, families).columns][-1] == "family"
    assert [c.header for c in graphs_table(grid).columns][-1] == "kind"
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(summary_table(grid, families))
    text = console.export_text()
    assert re.search(r"sizing: decode-only\s*│ linear, cap 40: 40, 32, 24, 16, 8 ", text)
    assert re.search(r"sizing: prefill/mixed\s*│ exponential, cap 16384: 16384, 8192, .*; P = 1, 2, 4, 8, 16, 32, 40",
                     text)
    doc = grid_json(grid, None, families)
    assert doc["families"][1] == {"family": "decode-only", "distribution": "linear", "cap": 40,
                                  "token_sizes": [40, 32, 24, 16, 8], "prefill_counts": []}
    assert "families" not in grid_json(grid)


def test_grid_command_prints_the_families():
    runner = CliRunner()
    args = ["grid", "model=hybrid", "cg.distribution=hybrid", "engine.max_requests=40", "engine.tp_size=8"]
    r = runner.invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert [f["distribution"] for f in json.loads(r.stdout)["families"]] == ["exponential", "linear"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "decode-only (linear)" in r.stdout and "sizing: decode-only" in r.stdout
