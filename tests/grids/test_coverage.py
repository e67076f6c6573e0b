"""Exact grid coverage against brute-force enumeration, and the `cgbench grid` report helpers."""

from __future__ import annotations

from collections import Counter

import pytest
from rich.console import Console
from rich.table import Table

from cgbench.cli.render_grid import grid_json, grid_table
from cgbench.config.schema import CGConfig, EngineConfig, ModelConfig
from cgbench.grids.build import build_grid
from cgbench.grids.coverage import MAX_HOLES, coverage
from cgbench.grids.lookup import Grid
from cgbench.grids.megatron import megatron_grid
from cgbench.grids.shapes import BatchShape, match

BS = BatchShape
R, MAX_T, MSL = 8, 64, 16


def small_megatron(spec=0, tp=1, dist="exponential", non_decode=True, n=16, cap=MAX_T):
    return megatron_grid(tp_size=tp, num_cuda_graphs=n, cuda_graph_max_tokens=cap, mixed_prefill_count=4,
                         max_requests=R, max_tokens=MAX_T, max_sequence_length=MSL,
                         non_decode_graphs=non_decode, num_speculative_tokens=spec, distribution=dist)[0]


def brute(graphs, strict, exact_decode, spec):
    """Enumerate every reachable (T, P, D) and classify it with the plain matcher."""
    q = spec + 1
    out = Counter()
    mixed_graphs = [g for g in graphs if g.prefill_req_count > 0]
    for T in range(1, MAX_T + 1):
        for P in range(0, R + 1):
            for D in range(0, R - P + 1):
                if P + D == 0 or not (P + D * q <= T <= P * MSL + D * q):
                    continue
                real = BS(T, P, D)
                if P == 0:
                    out["decode_states"] += 1
                    fits = [g for g in graphs if g.prefill_req_count == 0 and g.token_count >= T
                            and g.decode_req_count >= D]
                    if exact_decode:
                        hit = [g for g in fits if g.decode_req_count == D]
                    else:
                        hit = fits
                    if hit:
                        out["decode_covered"] += 1
                    elif not graphs:
                        out["no_graphs"] += 1
                    else:
                        out["shape" if fits else "decode_only_over_max"] += 1
                    continue
                out["mixed_states"] += 1
                out["mixed_covered_strict"] += match(real, graphs, True) is not None
                out["mixed_covered_non_strict"] += match(real, graphs, False) is not None
                if match(real, graphs, strict) is not None:
                    out["mixed_covered"] += 1
                elif not graphs:
                    out["no_graphs"] += 1
                elif not mixed_graphs:
                    out["no_mixed_graphs"] += 1
                elif T > max(g.token_count for g in mixed_graphs):
                    out["tokens_over_max"] += 1
                else:
                    out["shape"] += 1
    return out


SMALL_GRIDS = {
    "megatron": (small_megatron, 0, False),
    "cap16": (lambda: small_megatron(cap=16), 0, False),
    "sparse": (lambda: small_megatron(n=2), 0, False),
    "spec1": (lambda: small_megatron(spec=1), 1, False),
    "tp2": (lambda: small_megatron(tp=2), 0, False),
    "linear": (lambda: small_megatron(dist="linear"), 0, False),
    "decode_only": (lambda: small_megatron(non_decode=False), 0, False),
    "empty": (lambda: [], 0, False),
    "explicit": (lambda: [BS(32, 2, 6), BS(16, 1, 7), BS(8, 8, 0), BS(4, 0, 4), BS(2, 0, 2)], 0, False),
    "exact_decode": (lambda: [BS(s, 0, s) for s in (1, 2, 3, 8)] + [BS(s, s, 0) for s in (4, 16, 40)],
                     0, True),
}


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("name", list(SMALL_GRIDS))
def test_coverage_counts_equal_brute_force(name, strict):
    make, spec, exact = SMALL_GRIDS[name]
    graphs = make()
    grid = Grid(name, graphs, strict, exact_decode=exact)
    cov = coverage(grid, max_requests=R, max_tokens=MAX_T, max_sequence_length=MSL,
                   num_speculative_tokens=spec)
    b = brute(graphs, strict, exact, spec)
    assert cov.decode_states == b["decode_states"]
    assert cov.decode_covered == b["decode_covered"]
    assert cov.mixed_states == b["mixed_states"]
    assert cov.mixed_covered == b["mixed_covered"]
    assert cov.mixed_covered_strict == b["mixed_covered_strict"]
    assert cov.mixed_covered_non_strict == b["mixed_covered_non_strict"]
    reasons = ("no_graphs", "decode_only_over_max", "no_mixed_graphs", "tokens_over_max", "shape")
    assert cov.misses_by_reason == {r: b[r] for r in reasons if b[r]}
    assert cov.covered + sum(cov.misses_by_reason.values()) == cov.states
    # Every example hole is a reachable state that really misses, for the stated reason.
    assert len(cov.holes) <= MAX_HOLES
    q = spec + 1
    for h in cov.holes:
        T, P, D = h.shape
        assert 1 <= T <= MAX_T and P + D <= R and P + D * q <= T <= P * MSL + D * q
        assert grid.lookup(T, P, D) == (None, h.reason)
    if sum(cov.misses_by_reason.values()):
        assert cov.holes


def test_strict_matching_leaves_holes_non_strict_does_not():
    graphs = small_megatron()
    s = coverage(Grid("s", graphs, True), max_requests=R, max_tokens=MAX_T, max_sequence_length=MSL,
                 num_speculative_tokens=0)
    n = coverage(Grid("n", graphs, False), max_requests=R, max_tokens=MAX_T, max_sequence_length=MSL,
                 num_speculative_tokens=0)
    # Section 6.5: with all_prefills, non-strict matching covers every state; strict does not.
    assert n.fraction == 1.0 and s.fraction < 1.0
    assert s.mixed_covered_strict == n.mixed_covered_strict == s.mixed_covered
    assert s.strict_fraction == n.strict_fraction < n.non_strict_fraction == 1.0


def test_default_hybrid_grid_holes_are_explained():
    engine = EngineConfig()  # 256 / 16384 / 2560: list (B)
    grid = build_grid(CGConfig(), engine, ModelConfig(kind="hybrid"))
    cov = coverage(grid, max_requests=engine.max_requests, max_tokens=engine.max_tokens,
                   max_sequence_length=engine.max_sequence_length, num_speculative_tokens=0)
    assert cov.decode_fraction == 1.0 and set(cov.misses_by_reason) == {"shape"}
    texts = [h.explanation or "" for h in cov.holes]
    assert any(t.startswith("msl rule") for t in texts)
    assert any(t.startswith("P-grid gap") for t in texts)
    for h in cov.holes:
        assert grid.lookup(*h.shape) == (None, h.reason)
    # Section 6.5's two mechanisms, in cells the report looks at (full batches, D = 256 - P):
    by_shape = {tuple(h.shape): h.explanation for h in cov.holes}
    assert by_shape[(2049, 1, 255)].startswith("msl rule")  # (4096, 1, 255) is invalid
    assert by_shape[(256, 3, 253)].startswith("P-grid gap")  # P jumps 2 -> 4
    assert cov.to_dict()["holes"][0]["graph"] == list(cov.holes[0].shape)


def test_peer_holes():
    engine = EngineConfig()
    trt = build_grid(CGConfig(kind="trtllm", padding=False, piecewise=False), engine, ModelConfig())
    cov = coverage(trt, max_requests=256, max_tokens=16384, max_sequence_length=2560,
                   num_speculative_tokens=0)
    # Exact sizes 1..32, 64, 128: 34 of 256 decode states; 128 above the max; the rest "shape".
    assert (cov.decode_covered, cov.decode_states) == (34, 256)
    assert cov.misses_by_reason["decode_only_over_max"] == 128
    assert cov.misses_by_reason["shape"] == 256 - 34 - 128
    assert cov.mixed_covered == 0 and cov.misses_by_reason["no_mixed_graphs"] == cov.mixed_states
    assert {h.reason for h in cov.holes} == {"no_mixed_graphs", "shape", "decode_only_over_max"}


def test_coverage_counts_add_up_at_256_requests():
    # (the speed of this exact count is a benchmark figure, not a test: `make bench` / `cgbench grid`)
    engine = EngineConfig()
    for cg in (CGConfig(sizes_per_octave=3, p_per_octave=2), CGConfig(kind="sglang", padding=False)):
        grid = build_grid(cg, engine, ModelConfig())
        cov = coverage(grid, max_requests=256, max_tokens=16384, max_sequence_length=2560,
                       num_speculative_tokens=0)
        missed = cov.decode_states - cov.decode_covered + cov.mixed_states - cov.mixed_covered
        assert sum(cov.misses_by_reason.values()) == missed


# ---------------------------------------------------------------------------------------------
# Report helpers for `cgbench grid`

def test_grid_json_stored_order():
    engine = EngineConfig()
    grid = build_grid(CGConfig(), engine, ModelConfig())
    data = grid_json(grid)
    assert set(data) == {"graphs", "token_counts"}
    assert data["graphs"] == [[g.token_count, g.prefill_req_count, g.decode_req_count] for g in grid.graphs]
    assert data["graphs"][0] == [16384, 256, 0] and data["graphs"][-1] == [1, 0, 1]
    assert data["token_counts"] == [2 ** k for k in range(14, -1, -1)]
    assert grid_json(Grid("none", (), False)) == {"graphs": [], "token_counts": []}


def test_grid_table_renders():
    engine = EngineConfig()
    grid = build_grid(CGConfig(), engine, ModelConfig(kind="hybrid"))
    cov = coverage(grid, max_requests=256, max_tokens=16384, max_sequence_length=2560,
                   num_speculative_tokens=0)
    tables = grid_table(grid, cov)
    assert all(isinstance(t, Table) for t in tables)
    assert tables[0].row_count == len(grid.graphs) == 101
    console = Console(record=True, width=240)
    console.print(*tables)
    text = console.export_text()
    counts = grid.counts_by_kind()
    assert sum(counts.values()) == 101
    for kind, n in counts.items():
        assert any(kind in line and line.split("│")[2].strip() == str(n)
                   for line in text.splitlines() if line.count("│") >= 3 and f"  {kind}" in line)
    assert "strict (hybrid)" in text and "miss: shape" in text and "P-grid gap" in text
    assert f"{100 * cov.strict_fraction:.2f}%" in text
    # An empty grid still renders (no holes table when nothing misses is also fine).
    empty = Grid("none", (), False)
    ecov = coverage(empty, max_requests=4, max_tokens=8, max_sequence_length=8, num_speculative_tokens=0)
    assert ecov.misses_by_reason == {"no_graphs": ecov.states}
    Console(record=True).print(*grid_table(empty, ecov))
