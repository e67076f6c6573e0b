"""Batch shapes, Megatron's grid generator and the matchers, against the worked examples of
reference/megatron-cg-semantics.md (sections 1-3, 6.2, 6.4, 8, 9.1, 9.3) and brute-force oracles."""

from __future__ import annotations

import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.config.schema import CGConfig, ConfigError, EngineConfig, ModelConfig
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.grids.megatron import exponential_sizes, linear_sizes, megatron_grid
from cgbench.grids.shapes import MISS_REASONS, BatchShape, applicable, find_cg_chunk_size, match
from tests.helpers import examples

BS = BatchShape


def shapes(text: str) -> list[BatchShape]:
    """Parse the reference's '(T,P,D) (T,P,D) ...' notation."""
    return [BS(*map(int, m)) for m in re.findall(r"\((\d+),(\d+),(\d+)\)", text)]


def gen(**overrides):
    """Section 2.6's common config: tp=1, spec=0, max_requests=256, max_tokens=16384, msl=2560, n=16."""
    kw = dict(tp_size=1, num_cuda_graphs=16, cuda_graph_max_tokens=256, mixed_prefill_count=16,
              max_requests=256, max_tokens=16384, max_sequence_length=2560, non_decode_graphs=True)
    kw.update(overrides)
    return megatron_grid(**kw)


def sort_key(g: BatchShape, spec: int = 0):
    return (g.token_count - g.decode_req_count * (spec + 1), g.decode_req_count)


# ---------------------------------------------------------------------------------------------
# Section 1: the batch shape

def test_batch_shape_record():
    s = BS(512, 4, 252)
    T, P, D = s
    assert (T, P, D) == (512, 4, 252)
    assert s.req_count == 256
    assert str(s) == "[512]: 4 P + 252 D"
    assert BS() == BS(0, 0, 0)
    # Lexicographic (T, P, D) order: min picks smallest T, then P, then D.
    assert min([BS(64, 8, 56), BS(64, 4, 60), BS(128, 1, 1)]) == BS(64, 4, 60)
    assert BS(2, 1, 1) < BS(2, 2, 0) < BS(4, 0, 4)
    assert len({BS(1, 2, 3), BS(1, 2, 3)}) == 1


def test_validity_rule_section_1_2():
    # msl=2560, max_requests=256: (4096,1,255) breaks T <= P*msl + D; (4096,2,254) is valid.
    assert not BS(4096, 1, 255).is_valid(256, 2560)
    assert BS(4096, 2, 254).is_valid(256, 2560)
    assert not BS(0, 0, 0).is_valid(256, 2560)  # T > 0
    assert not BS(300, 1, 256).is_valid(256, 2560)  # P + D <= max_requests
    assert not BS(10, 2, 9).is_valid(256, 2560)  # T >= P + D
    assert not BS(9, 2, 4).is_valid(256, 2560, num_speculative_tokens=1)  # T >= P + D*(spec+1)
    assert BS(10, 2, 4).is_valid(256, 2560, num_speculative_tokens=0)


def test_applicability_section_1_1():
    # Decode-only real batches need decode-only graphs; strictness is ignored.
    assert applicable(BS(128, 0, 128), BS(100, 0, 100), strict=True)
    assert not applicable(BS(128, 1, 127), BS(100, 0, 100), strict=False)
    # A mixed real batch can never use a decode-only graph.
    assert not applicable(BS(128, 0, 128), BS(10, 1, 5), strict=False)
    # Non-strict decode spill-over: prefill slots host decodes; strict forbids it.
    assert applicable(BS(128, 64, 64), BS(64, 1, 70), strict=False)
    assert not applicable(BS(128, 64, 64), BS(64, 1, 70), strict=True)
    assert BS(128, 64, 64).is_applicable_for_batch_dim(BS(64, 1, 70), strict=False)


# ---------------------------------------------------------------------------------------------
# Sections 2.3, 2.4: token sizes

@pytest.mark.parametrize("tp, n, cap, expected", [
    (1, 16, 256, [256, 128, 64, 32, 16, 8, 4, 2, 1]),
    (1, 8, 128, [128, 64, 32, 16, 8, 4, 2, 1]),
    (1, 16, 16384, [2 ** k for k in range(14, -1, -1)]),
    (1, 4, 16384, [16384, 8192, 4096, 1]),
    (1, 4, 80, [80, 40, 20, 1]),
    (2, 16, 1000, [1000, 500, 250, 124, 62, 30, 14, 6, 2]),
])
def test_exponential_sizes(tp, n, cap, expected):
    assert exponential_sizes(tp, n, cap) == expected
    if n == 16 and tp == 1 and cap == 16384:
        assert len(expected) == 15


def test_linear_sizes():
    assert linear_sizes(1, 16, 256) == list(range(256, 15, -16))  # (F): [256, 240, ..., 16]
    assert linear_sizes(1, 1, 256) == [256]
    auto = linear_sizes(1, -1, 300)
    assert auto[:3] == [300, 288, 272] and auto[-4:] == [8, 4, 2, 1]


# ---------------------------------------------------------------------------------------------
# Section 2.6: worked examples, list order included

LIST_A = shapes("""
(256,256,0) (256,128,128) (128,128,0) (256,64,192) (128,64,64) (64,64,0) (256,32,224) (128,32,96) (64,32,32)
(32,32,0) (256,16,240) (128,16,112) (64,16,48) (32,16,16) (16,16,0) (256,8,248) (128,8,120) (64,8,56)
(32,8,24)
(16,8,8) (8,8,0) (256,4,252) (128,4,124) (64,4,60) (32,4,28) (16,4,12) (8,4,4) (4,4,0) (256,2,254) (128,2,126)
(64,2,62) (32,2,30) (16,2,14) (8,2,6) (4,2,2) (2,2,0) (256,1,255) (128,1,127) (64,1,63) (32,1,31) (16,1,15)
(8,1,7) (4,1,3) (2,1,1) (256,0,256) (128,0,128) (64,0,64) (32,0,32) (16,0,16) (8,0,8) (4,0,4) (2,0,2) (1,0,1)
""")

# List (B)'s first 48 entries; the reference abbreviates the P-grid runs "(4096,256,0) … (4096,2,254)".
B_HEAD_TEXT = """
(16384,256,0) (16384,128,128) (16384,64,192) (16384,32,224) (16384,16,240) (16384,8,248)
(8192,256,0) (8192,128,128) (8192,64,192) (8192,32,224) (8192,16,240) (8192,8,248) (8192,4,252)
"""


def p_run(T: int, smallest_p: int) -> list[BatchShape]:
    """The reference's '(T,256,0) … (T,p,256-p)' run: P = 256, 128, ..., smallest_p, D = 256 - P."""
    out, p = [], 256
    while p >= smallest_p:
        out.append(BS(T, p, 256 - p))
        p //= 2
    return out


LIST_B_HEAD = (shapes(B_HEAD_TEXT) + p_run(4096, 2) + p_run(2048, 1) + p_run(1024, 1) + p_run(512, 1))


def test_list_a_exact():
    graphs, token_counts = gen()
    assert len(LIST_A) == 53
    assert graphs == LIST_A
    assert token_counts == [256, 128, 64, 32, 16, 8, 4, 2, 1]
    # n=-1 gives the same list here (auto n = 16 for prefill, 10 for decode).
    assert gen(num_cuda_graphs=-1)[0] == LIST_A


def test_list_b_exact():
    graphs, token_counts = gen(cuda_graph_max_tokens=16384)
    assert len(graphs) == 101
    assert len(LIST_B_HEAD) == 48
    assert graphs[:48] == LIST_B_HEAD
    assert graphs[48:] == LIST_A  # "followed by the same 53 entries as (A)"
    assert token_counts == [2 ** k for k in range(14, -1, -1)]
    for missing in (BS(16384, 4, 252), BS(8192, 2, 254), BS(4096, 1, 255)):  # msl rule
        assert missing not in graphs
    assert gen(num_cuda_graphs=-1, cuda_graph_max_tokens=16384)[0] == graphs


def test_list_c_decode_only():
    graphs, token_counts = gen(non_decode_graphs=False)
    assert graphs == [BS(s, 0, s) for s in (256, 128, 64, 32, 16, 8, 4, 2, 1)]
    assert token_counts == [256, 128, 64, 32, 16, 8, 4, 2, 1]
    assert gen(mixed_prefill_count=0)[0] == graphs  # mixed count <= 0 also means decode-only


def test_list_d_tp2():
    graphs, token_counts = gen(tp_size=2, cuda_graph_max_tokens=16384)
    assert len(graphs) == 100
    assert token_counts == [2 ** k for k in range(14, 0, -1)]  # no 1


def test_list_e():
    graphs, token_counts = gen(max_requests=128, max_tokens=8192, max_sequence_length=4096,
                               cuda_graph_max_tokens=8192)
    assert len(graphs) == 90
    assert token_counts == [2 ** k for k in range(13, -1, -1)]


def test_list_f_linear():
    graphs, token_counts = gen(distribution="linear")
    assert len(graphs) == 47
    assert token_counts == list(range(256, 15, -16))
    mixed = [g for g in graphs if g.prefill_req_count > 0 and g.decode_req_count > 0]
    assert {g.prefill_req_count for g in mixed} == {16}  # P fixed at 16
    prefill_only = {g for g in graphs if g.decode_req_count == 0 and g.prefill_req_count > 0}
    assert prefill_only == {BS(s, s, 0) for s in range(256, 15, -16)}
    assert {g for g in graphs if g.prefill_req_count == 0} == {BS(s, 0, s) for s in range(256, 15, -16)}


@pytest.mark.parametrize("n, decode_only, all_prefills", [
    (0, [80], [80]),
    (1, [80], [80]),
    (2, [80, 1], [80, 1]),
    (4, [80, 40, 20, 1], [80, 40, 20, 1]),
    (8, [80, 40, 20, 10, 4, 2, 1], [1024, 512, 256, 80, 40, 20, 10, 4, 2, 1]),
    (16, [80, 40, 20, 10, 4, 2, 1], [1024, 512, 256, 128, 80, 64, 40, 32, 20, 16, 10, 8, 4, 2, 1]),
    (32, [80, 40, 20, 10, 4, 2, 1], [1024, 512, 256, 128, 80, 64, 40, 32, 20, 16, 10, 8, 4, 2, 1]),
])
def test_list_g_token_counts(n, decode_only, all_prefills):
    # test_cuda_graph_token_counts: max_requests=80, msl=20, max_tokens=16384. Decode-only graphs
    # use the ef549a6 cap (max_requests) with non-decode graphs off; all_prefills caps at max_tokens.
    common = dict(num_cuda_graphs=n, max_requests=80, max_sequence_length=20)
    assert gen(cuda_graph_max_tokens=80, non_decode_graphs=False, **common)[1] == decode_only
    assert gen(cuda_graph_max_tokens=16384, **common)[1] == all_prefills


def test_section_2_7_megatron_core_0_19_2_cap():
    engine = EngineConfig()  # 256 / 16384 / 2560
    grid = build_grid(CGConfig(all_prefills=False), engine, ModelConfig(kind="transformer"))
    assert len(grid.graphs) == 62
    assert grid.token_counts == [512, 256, 128, 64, 32, 16, 8, 4, 2, 1]
    assert grid.lookup(300, 1, 0)[0] == BS(512, 1, 255)
    # Setting the cap to the decode bound reproduces ef549a6 (list A).
    old = build_grid(CGConfig(all_prefills=False, cuda_graph_max_tokens=256), engine, ModelConfig())
    assert list(old.graphs) == LIST_A
    assert old.lookup(300, 1, 0) == (None, "tokens_over_max")


def test_section_2_5_order_interleaves():
    graphs = gen()[0]
    i = graphs.index
    assert i(BS(256, 128, 128)) < i(BS(128, 128, 0)) < i(BS(256, 64, 192))


def test_section_8_old_vs_new_counts():
    # Old (LINEAR, fixed P) against new (EXPONENTIAL, P-grid), cap 256: 47 against 53 graphs.
    assert len(gen(distribution="linear")[0]) == 47
    assert len(gen()[0]) == 53


# ---------------------------------------------------------------------------------------------
# Section 3: the match table against list (B)

LIST_B = gen(cuda_graph_max_tokens=16384)[0]


@pytest.mark.parametrize("real, non_strict, strict", [
    ((100, 0, 100), (128, 0, 128), (128, 0, 128)),
    ((300, 1, 50), (512, 1, 255), (512, 1, 255)),
    ((300, 3, 253), (512, 4, 252), None),
    ((5000, 2, 0), (8192, 4, 252), (8192, 4, 252)),
    ((2000, 1, 255), (2048, 1, 255), (2048, 1, 255)),
    ((2255, 1, 255), (4096, 2, 254), None),
    ((40, 5, 30), (64, 8, 56), (64, 8, 56)),
    ((16385, 1, 0), None, None),
    ((1, 1, 0), (2, 1, 1), (2, 1, 1)),
])
def test_match_table_section_3(real, non_strict, strict):
    for is_strict, expected in ((False, non_strict), (True, strict)):
        expected = BS(*expected) if expected else None
        assert match(BS(*real), LIST_B, is_strict) == expected
        grid = Grid("b", LIST_B, is_strict)
        assert grid.lookup(*real)[0] == expected
        assert grid.match(BS(*real)) == expected
    assert match(BS(*real), [], False) is None


def test_list_a_mixed_above_256_is_eager():
    for real in [(257, 1, 0), (300, 1, 50), (1000, 4, 100)]:
        assert match(BS(*real), LIST_A, False) is None


# ---------------------------------------------------------------------------------------------
# Section 9.1: test_cg_admission_gating.py expectations on the helpers

SAMPLE_CG_LIST = shapes("""(256,1,255) (256,4,252) (256,256,0) (128,1,127) (128,4,124) (128,128,0) (64,1,63)
(64,4,60) (64,64,0) (16,1,15) (16,4,12) (16,16,0) (4,1,3) (4,4,0) (2,1,1) (2,2,0)""")


def chunk(graphs, A=0, P=0, D=0, max_chunk=10 ** 9, strict=False):
    direct = find_cg_chunk_size(graphs, A, P, D, max_chunk, strict)
    assert Grid("t", graphs, strict).find_chunk_size(A, P, D, max_chunk) == direct
    return direct


def test_find_chunk_size_section_9_1():
    L = SAMPLE_CG_LIST
    assert chunk(L, max_chunk=500) == 256  # picks largest chunk in budget
    assert [chunk(L, max_chunk=b) for b in (100, 20, 5)] == [64, 16, 4]  # respects budget ceiling
    assert chunk(L, A=50, max_chunk=300) == 206  # accounts for active tokens
    assert chunk(L, A=300, max_chunk=10) is None  # no cg fits
    assert chunk(L, D=125, max_chunk=300, strict=True) == 256  # strict filters insufficient decode
    assert chunk(L, D=200, max_chunk=100, strict=True) is None
    assert chunk([], max_chunk=500) is None  # empty list
    assert chunk(L, max_chunk=300) == 256  # new_request_cg_match
    assert chunk(L, max_chunk=1) is None  # eager fallback: the scheduler then uses chunk = max_chunk = 1


def test_admission_check_section_9_1():
    assert match(BS(64, 1, 0), SAMPLE_CG_LIST, False) is not None
    assert match(BS(64, 1, 0), [], False) is None
    pair = [BS(128, 128, 0), BS(128, 64, 64)]
    assert match(BS(64, 1, 70), pair, strict=True) is None
    assert match(BS(64, 1, 70), pair, strict=False) is not None


def test_strict_boundary_section_9_1():
    at_max = [BS(512, 1, 511), BS(512, 2, 510), BS(512, 4, 508), BS(512, 8, 504)]
    assert chunk(at_max, P=2, D=508, max_chunk=512, strict=True) == 512
    assert match(BS(512, 3, 508), at_max, strict=True) is not None
    no_p8 = at_max[:3]
    assert chunk(no_p8, P=2, D=510, max_chunk=512, strict=True) is None
    assert match(BS(512, 3, 510), no_p8, strict=True) is None


def test_deferral_list_section_9_1():
    # DEFERRAL_CG_LIST: P-grid {1,2,4,8} at T in {512,256,64} (filled with decodes) + decode graphs.
    deferral = [BS(T, p, T - p) for T in (512, 256, 64) for p in (1, 2, 4, 8)]
    deferral += [BS(8, 0, 8), BS(64, 0, 64), BS(256, 0, 256), BS(512, 0, 512)]
    assert match(BS(512, 3, 510), deferral, strict=True) is None  # deferred
    assert match(BS(8, 0, 1), deferral, strict=True) == BS(8, 0, 8)  # decode-style candidate passes
    assert match(BS(512, 3, 508), deferral, strict=True) == BS(512, 4, 508)  # after D -> 508


# ---------------------------------------------------------------------------------------------
# Section 9.3: test_batch_dimension_utils.py

def _bdu(n, **kw):
    base = dict(tp_size=1, num_cuda_graphs=n, cuda_graph_max_tokens=256, mixed_prefill_count=16,
                max_requests=256, max_tokens=2048, max_sequence_length=4096, non_decode_graphs=True)
    base.update(kw)
    return megatron_grid(**base)[0]


@pytest.mark.parametrize("n", [1, 16, 32, -1])
def test_token_count_alignment(n):
    graphs = _bdu(n)
    decode_T = {g.token_count for g in graphs if g.prefill_req_count == 0}
    mixed_T = {g.token_count for g in graphs if g.prefill_req_count > 0}
    assert mixed_T <= decode_T
    assert not {t for t in decode_T - mixed_T if t >= 16}


def test_edge_max_tokens_above_max_requests():
    graphs = _bdu(8, cuda_graph_max_tokens=512, max_requests=64, max_tokens=512)
    assert all(g.token_count <= 64 for g in graphs if g.prefill_req_count == 0)
    assert max(g.token_count for g in graphs if g.prefill_req_count > 0) > 64


def test_edge_max_tokens_below_n():
    graphs = _bdu(32, cuda_graph_max_tokens=10, mixed_prefill_count=0, max_requests=10, max_tokens=10,
                  non_decode_graphs=False)
    assert graphs and all(g.token_count > 0 for g in graphs)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_edge_tp_multiples(tp):
    graphs = _bdu(64, tp_size=tp, cuda_graph_max_tokens=tp, mixed_prefill_count=0, max_requests=tp,
                  max_tokens=tp, non_decode_graphs=False)
    assert graphs and all(g.token_count % tp == 0 for g in graphs)
    # And on a full grid (list B's config): every T is a multiple of tp.
    full = gen(tp_size=tp, cuda_graph_max_tokens=16384)[0]
    assert full and all(g.token_count % tp == 0 for g in full)


@pytest.mark.parametrize("spec", [1, 3, 7])
def test_edge_speculative_decode_graphs(spec):
    graphs = _bdu(8, cuda_graph_max_tokens=1024, max_requests=32, max_tokens=1024,
                  num_speculative_tokens=spec)
    decode = [g for g in graphs if g.prefill_req_count == 0]
    assert decode
    for g in decode:
        assert g.token_count == g.decode_req_count * (spec + 1)
        assert g.decode_req_count <= 32


def test_auto_mode_keeps_smallest_decode_graphs():
    # n=-1 always keeps lcm(spec+1, tp) x {1, 2} decode graphs (section 2.2 / 8).
    graphs = gen(num_cuda_graphs=-1, tp_size=2, num_speculative_tokens=2, max_requests=64, max_tokens=4096,
                 cuda_graph_max_tokens=4096)[0]
    decode_T = {g.token_count for g in graphs if g.prefill_req_count == 0}
    assert {6, 12} <= decode_T


def test_none_means_no_graphs():
    assert gen(num_cuda_graphs=None) == ([], None)


def test_cap_below_decode_bound_is_an_error():
    with pytest.raises(ConfigError, match="cuda_graph_max_tokens"):
        gen(cuda_graph_max_tokens=100)


# ---------------------------------------------------------------------------------------------
# Invariants of the generator (random configurations)

@settings(max_examples=examples(150, stretch=False))
@given(tp=st.sampled_from([1, 2, 4, 8]), spec=st.sampled_from([0, 1, 3]),
       n=st.sampled_from([None, -1, 0, 1, 2, 4, 8, 16, 32]), R_mult=st.integers(1, 16),
       extra_tokens=st.integers(0, 4000), msl=st.integers(2, 5000),
       dist=st.sampled_from(["exponential", "linear", "hybrid"]), non_decode=st.booleans(),
       mixed=st.sampled_from([0, 4, 16]), all_prefills=st.booleans(),
       k=st.sampled_from([1, 1, 2, 3]), kp=st.sampled_from([1, 2]))
def test_generated_graphs_valid_sorted_deduped(tp, spec, n, R_mult, extra_tokens, msl, dist, non_decode,
                                               mixed, all_prefills, k, kp):
    R = R_mult * tp
    max_tokens = R * (spec + 1) + extra_tokens
    cap = max_tokens if all_prefills else R * (spec + 1)
    graphs, token_counts = megatron_grid(
        tp_size=tp, num_cuda_graphs=n, cuda_graph_max_tokens=cap, mixed_prefill_count=mixed,
        max_requests=R, max_tokens=max_tokens, max_sequence_length=msl, non_decode_graphs=non_decode,
        num_speculative_tokens=spec, distribution=dist, sizes_per_octave=k, p_per_octave=kp)
    if n is None:
        assert graphs == [] and token_counts is None
        return
    assert all(g.is_valid(R, msl, spec) for g in graphs)
    assert len(set(graphs)) == len(graphs)
    keys = [sort_key(g, spec) for g in graphs]
    assert keys == sorted(keys, reverse=True)
    assert token_counts == (sorted({g.token_count for g in graphs}, reverse=True) or None)
    if not (non_decode and mixed > 0):
        assert all(g.prefill_req_count == 0 for g in graphs)
    # Megatron rounds every size to an even number of at least 2, so a cap of 1 still yields a 2-token graph
    assert all(g.token_count <= max(cap, 2) for g in graphs if g.prefill_req_count > 0)
    assert all(g.token_count <= R * (spec + 1) for g in graphs if g.prefill_req_count == 0)


def test_dense_extension_is_a_superset():
    base = gen(cuda_graph_max_tokens=16384)[0]
    dense = gen(cuda_graph_max_tokens=16384, sizes_per_octave=3, p_per_octave=2)[0]
    assert set(base) < set(dense)
    assert len(dense) >= 3 * len(base)
    sizes = sorted({g.token_count for g in dense if g.prefill_req_count > 0}, reverse=True)
    # Geometric: between 8192 and 16384 the two extra sizes are ~8192 * 2**(1/3), 2**(2/3), rounded to even.
    assert [s for s in sizes if 8192 < s < 16384] == [13002, 10320]
    # P-grid: one extra P (the rounded geometric mean) between consecutive powers of two.
    ps = sorted({g.prefill_req_count for g in dense if g.token_count == 256 and g.prefill_req_count})
    assert ps == [1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256]
    for lo in (2, 4, 8, 16, 32, 64, 128):
        hi = 2 * lo
        assert round(math.sqrt(lo * hi)) in ps
    # The extension only acts on EXPONENTIAL grids.
    assert gen(distribution="linear", sizes_per_octave=3, p_per_octave=2)[0] == gen(distribution="linear")[0]


# ---------------------------------------------------------------------------------------------
# Grid.lookup and Grid.find_chunk_size against brute force

def brute_reason(graphs, T, P, D, strict, exact_decode):
    """An independent classification of a real step: the graph or the miss reason."""
    if not graphs:
        return None, "no_graphs"
    if P == 0:
        fits = [g for g in graphs
                if g.prefill_req_count == 0 and g.token_count >= T and g.decode_req_count >= D]
        exact = [g for g in fits if g.decode_req_count == D] if exact_decode else fits
        if exact:
            return min(exact), None
        return None, ("shape" if fits else "decode_only_over_max")
    mixed = [g for g in graphs if g.prefill_req_count > 0]
    hit = match(BS(T, P, D), graphs, strict)
    if hit is not None:
        return hit, None
    if not mixed:
        return None, "no_mixed_graphs"
    if T > max(g.token_count for g in mixed):
        return None, "tokens_over_max"
    return None, "shape"


def grids_for_random_checks():
    out = [("B", LIST_B, 256, 2560, 0), ("A", LIST_A, 256, 2560, 0)]
    out.append(("tp2", gen(tp_size=2, cuda_graph_max_tokens=16384)[0], 256, 2560, 0))
    out.append(("spec1", gen(num_speculative_tokens=1, cuda_graph_max_tokens=16384)[0], 256, 2560, 1))
    out.append(("linear", gen(distribution="linear", cuda_graph_max_tokens=16384)[0], 256, 2560, 0))
    out.append(("small", gen(max_requests=8, max_tokens=64, max_sequence_length=16,
                             cuda_graph_max_tokens=64)[0], 8, 16, 0))
    out.append(("decode", gen(non_decode_graphs=False)[0], 256, 2560, 0))
    out.append(("sample", SAMPLE_CG_LIST, 256, 2560, 0))
    return out


def random_real(rng: random.Random, R: int, msl: int, spec: int, max_T: int):
    q = spec + 1
    if rng.random() < 0.25:
        D = rng.randint(1, R)
        return D * q, 0, D
    P = rng.randint(1, R)
    D = rng.randint(0, R - P)
    lo, hi = P + D * q, min(max_T, P * msl + D * q)
    T = rng.randint(lo, max(lo, hi))
    return T, P, D


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("exact_decode", [False, True])
def test_lookup_equals_match_and_brute_reason(strict, exact_decode):
    rng = random.Random(1234)
    for name, graphs, R, msl, spec in grids_for_random_checks():
        grid = Grid(name, graphs, strict, exact_decode=exact_decode)
        max_T = max(g.token_count for g in graphs) + 8
        for _ in range(600):
            T, P, D = random_real(rng, R, msl, spec, max_T)
            got = grid.lookup(T, P, D)
            assert got == brute_reason(graphs, T, P, D, strict, exact_decode), (name, T, P, D)
            if not exact_decode:
                assert got[0] == match(BS(T, P, D), graphs, strict)
            assert got[1] is None or got[1] in MISS_REASONS
            assert grid.lookup(T, P, D) == got  # the cached answer is the same
    empty = Grid("none", (), strict)
    assert empty.lookup(10, 1, 0) == (None, "no_graphs")
    assert empty.lookup(1, 0, 1) == (None, "no_graphs")


def literal_find(graphs, A, P, D, max_chunk, strict):
    """The loop of section 6.2, written out again."""
    for g in graphs:
        c = g.token_count - A
        if 1 <= c <= max_chunk:
            ok = g.prefill_req_count >= P + 1 and (
                g.decode_req_count >= D if strict
                else g.prefill_req_count + g.decode_req_count >= P + 1 + D)
            if ok:
                return c
    return None


@pytest.mark.parametrize("strict", [False, True])
def test_find_chunk_size_equals_literal_loop(strict):
    rng = random.Random(99)
    for name, graphs, R, _msl, _spec in grids_for_random_checks():
        grid = Grid(name, graphs, strict)
        max_T = max(g.token_count for g in graphs)
        for _ in range(500):
            P = rng.randint(0, R - 1)
            D = rng.randint(0, R - 1 - P)
            A = rng.randint(0, max_T)
            max_chunk = rng.randint(1, max_T + 10)
            expected = literal_find(graphs, A, P, D, max_chunk, strict)
            assert grid.find_chunk_size(A, P, D, max_chunk) == expected, (name, A, P, D, max_chunk)
            assert find_cg_chunk_size(graphs, A, P, D, max_chunk, strict) == expected


def test_find_chunk_stored_order_equals_largest_fit_for_spec_0():
    # Section 6.4: with spec <= 1 "first in stored order" and "largest fitting T" always agreed.
    rng = random.Random(7)
    for strict in (False, True):
        for _ in range(2000):
            P = rng.randint(0, 255)
            D = rng.randint(0, 255 - P)
            A = rng.randint(0, 16384)
            max_chunk = rng.randint(1, 16384)
            fits = [g.token_count - A for g in LIST_B if 1 <= g.token_count - A <= max_chunk
                    and applicable(g, BS(g.token_count, P + 1, D), strict)]
            assert find_cg_chunk_size(LIST_B, A, P, D, max_chunk, strict) == (max(fits) if fits else None)


def test_kind_of_and_counts():
    grid = Grid("a", LIST_A, strict=False)
    assert grid.kind_of(BS(256, 0, 256)) == "decode-only"
    assert grid.kind_of(BS(256, 256, 0)) == "prefill-only"
    assert grid.kind_of(BS(256, 4, 252)) == "mixed"
    counts = grid.counts_by_kind()
    assert sum(counts.values()) == 53 and counts["decode-only"] == 9
    assert grid.non_decode and not Grid("c", gen(non_decode_graphs=False)[0], False).non_decode
    assert grid.token_counts == [256, 128, 64, 32, 16, 8, 4, 2, 1]


# ---------------------------------------------------------------------------------------------
# build_grid

def test_build_grid_kinds():
    engine = EngineConfig()
    hybrid, transformer = ModelConfig(kind="hybrid"), ModelConfig(kind="transformer")
    g = build_grid(CGConfig(), engine, hybrid)
    assert g.name == "megatron" and g.strict and list(g.graphs) == LIST_B
    assert not build_grid(CGConfig(), engine, transformer).strict
    assert list(build_grid(CGConfig(kind="decode_only", all_prefills=False), engine, hybrid).graphs) == \
        gen(non_decode_graphs=False)[0]
    no_mixed = build_grid(CGConfig(non_decode=False), engine, hybrid)
    assert list(no_mixed.graphs) == gen(non_decode_graphs=False)[0]
    none = build_grid(CGConfig(kind="none", num_cuda_graphs=None), engine, hybrid)
    assert none.graphs == () and none.token_counts is None and not none.non_decode
    assert build_grid(CGConfig(num_cuda_graphs=None), engine, hybrid).graphs == ()
    assert len(build_grid(CGConfig(num_cuda_graphs=4), engine, hybrid).graphs) < 101
    tp2 = build_grid(CGConfig(), EngineConfig(tp_size=2), hybrid)
    assert len(tp2.graphs) == 100


def test_build_grid_explicit_keeps_order_and_validates():
    engine = EngineConfig()
    rows = [[2048, 2, 254], [2048, 1, 255], [1024, 4, 252], [256, 0, 256], [1, 0, 1]]
    grid = build_grid(CGConfig(kind="explicit", graphs=rows), engine, ModelConfig())
    assert [list(g) for g in grid.graphs] == rows
    assert grid.strict
    # Stored order drives find_chunk_size: (2048, 2, 254) comes first.
    assert grid.find_chunk_size(0, 0, 0, 4096) == 2048
    for bad, rule in [([[64, 0, 64], [4096, 1, 255]], "max_sequence_length"),
                      ([[64, 0, 64], [0, 0, 0]], "T must be > 0"),
                      ([[10, 1, 300]], "max_requests"),
                      ([[10, 4, 8]], "P \\+ D\\*\\(1\\+spec\\)")]:
        idx = len(bad) - 1
        with pytest.raises(ConfigError, match=rf"cg\.graphs\[{idx}\].*{rule}"):
            build_grid(CGConfig(kind="explicit", graphs=bad), engine, ModelConfig())
    with pytest.raises(ConfigError, match=r"cg\.graphs\[0\]"):
        build_grid(CGConfig(kind="explicit", graphs=[[1, 2]]), engine, ModelConfig())


def test_build_grid_unknown_kind():
    with pytest.raises(ConfigError, match="cg.kind"):
        build_grid(CGConfig(kind="bogus"), EngineConfig(), ModelConfig())
