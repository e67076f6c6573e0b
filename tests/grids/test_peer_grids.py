"""vLLM / SGLang / TensorRT-LLM default grids (reference/peers.md A.1-A.3) and their matching."""

from __future__ import annotations

import pytest

from cgbench.config.schema import BenchConfig, CGConfig, ConfigError, EngineConfig, ModelConfig, validate
from cgbench.grids.build import build_grid
from cgbench.grids.peers import (
    sglang_batch_sizes,
    sglang_default_max_bs,
    sglang_piecewise_tokens,
    trtllm_batch_sizes,
    trtllm_piecewise_tokens,
    vllm_capture_sizes,
)
from cgbench.grids.shapes import BatchShape

BS = BatchShape
HYBRID, TRANSFORMER = ModelConfig(kind="hybrid"), ModelConfig(kind="transformer")


def peer(kind, engine=None, model=HYBRID, **cg):
    return build_grid(CGConfig(kind=kind, **cg), engine or EngineConfig(), model)


def decode_sizes(grid):
    return sorted(g.decode_req_count for g in grid.graphs if g.prefill_req_count == 0)


def piecewise_sizes(grid):
    return sorted(g.token_count for g in grid.graphs if g.prefill_req_count > 0)


def assert_peer_shapes(grid, spec=0):
    """Decode graphs are (b*(1+spec), 0, b), piecewise graphs (s, s, 0), stored in Megatron's order."""
    for g in grid.graphs:
        if g.prefill_req_count == 0:
            assert g.token_count == g.decode_req_count * (spec + 1)
        else:
            assert g.token_count == g.prefill_req_count and g.decode_req_count == 0
    keys = [(g.token_count - g.decode_req_count * (spec + 1), g.decode_req_count) for g in grid.graphs]
    assert keys == sorted(keys, reverse=True) and len(set(grid.graphs)) == len(grid.graphs)
    assert not grid.strict


# ---------------------------------------------------------------------------------------------
# vLLM (A.1)

def test_vllm_default_sizes_max_num_seqs_256():
    sizes = vllm_capture_sizes(256, 16384)
    assert len(sizes) == 51
    assert sizes == [1, 2, 4] + list(range(8, 249, 8)) + list(range(256, 513, 16))


def test_vllm_max_rule():
    # max = min(2 * max_num_seqs * (1+spec), 512, max_num_batched_tokens)
    assert vllm_capture_sizes(8, 16384) == [1, 2, 4, 8, 16]
    assert max(vllm_capture_sizes(100, 16384)) == 200
    # An off-stride max_num_batched_tokens below the max is captured too (PR #40734).
    sizes = vllm_capture_sizes(256, 300)
    assert sizes[-3:] == [272, 288, 300]
    # Spec decode: every size rounded up to a multiple of 1+spec, nothing above the max.
    spec = vllm_capture_sizes(256, 16384, num_speculative_tokens=1)
    assert all(s % 2 == 0 for s in spec) and spec[:3] == [2, 4, 8] and max(spec) == 512
    spec3 = vllm_capture_sizes(4, 16384, num_speculative_tokens=3)  # max = 32
    assert spec3 == [4, 8, 16, 24, 32]
    # User overrides.
    assert vllm_capture_sizes(256, 16384, max_capture_size=64)[-1] == 64
    assert vllm_capture_sizes(256, 16384, capture_sizes=[64, 1, 8]) == [1, 8, 64]


def test_vllm_grid_and_matching():
    grid = peer("vllm")
    assert grid.name == "vllm" and not grid.exact_decode
    assert_peer_shapes(grid)
    sizes = vllm_capture_sizes(256, 16384)
    assert decode_sizes(grid) == sizes and piecewise_sizes(grid) == sizes
    assert grid.lookup(100, 0, 100) == (BS(104, 0, 104), None)  # decode: FULL graph, padded up
    assert grid.lookup(300, 3, 20) == (BS(304, 304, 0), None)  # mixed: PIECEWISE, pad tokens up
    assert grid.lookup(1, 1, 0) == (BS(1, 1, 0), None)
    assert grid.lookup(512, 1, 255) == (BS(512, 512, 0), None)
    assert grid.lookup(513, 1, 0) == (None, "tokens_over_max")  # eager above the max capture size
    # Hybrid models still get piecewise graphs for mixed batches and match non-strict.
    assert peer("vllm", model=TRANSFORMER).graphs == grid.graphs


def test_vllm_full_decode_only_and_spec():
    grid = peer("vllm", piecewise=False)
    assert grid.lookup(300, 3, 20) == (None, "no_mixed_graphs")
    assert grid.lookup(8, 0, 8) == (BS(8, 0, 8), None)
    spec = peer("vllm", engine=EngineConfig(num_speculative_tokens=1, max_tokens=16384))
    assert_peer_shapes(spec, spec=1)
    assert spec.lookup(6, 0, 3) == (BS(8, 0, 4), None)
    explicit = peer("vllm", capture_sizes=[1, 8, 64], piecewise_sizes=[128, 1024])
    assert decode_sizes(explicit) == [1, 8, 64] and piecewise_sizes(explicit) == [128, 1024]


# ---------------------------------------------------------------------------------------------
# SGLang (A.2)

@pytest.mark.parametrize("gb, tp, max_bs", [
    (16, 1, 8), (24, 1, 24), (24, 4, 80), (40, 1, 32), (40, 8, 160), (80, 1, 256), (80, 4, 512),
    (141, 1, 256), (141, 8, 512), (192, 1, 512), (0, 1, 160),
])
def test_sglang_default_max_bs(gb, tp, max_bs):
    assert sglang_default_max_bs(gb, tp) == max_bs


def test_sglang_batch_sizes():
    assert sglang_batch_sizes(256) == [1, 2, 4, 8, 12] + list(range(16, 257, 8))
    big = sglang_batch_sizes(640)
    assert [s for s in big if s > 256] == list(range(272, 512, 16)) + list(range(512, 641, 32))
    assert sglang_batch_sizes(24) == [1, 2, 4, 8, 12, 16, 24]
    assert sglang_batch_sizes(10, padding=False) == list(range(1, 11))
    spec = sglang_batch_sizes(300, spec=True)
    assert spec[:12] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert [s for s in spec if 32 <= s <= 72] == [32, 40, 44, 48, 52, 56, 60, 64, 72]
    assert spec[-3:] == [256, 272, 288]


def test_sglang_piecewise_tokens():
    tokens = sglang_piecewise_tokens(16384)
    expected = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, 16385, 512)))
    assert tokens == expected and len(tokens) == 74
    assert sglang_piecewise_tokens(2048)[-1] == 2048


def test_sglang_grid_and_matching():
    grid = peer("sglang")  # 141 GB, tp 1: max bs 256
    assert_peer_shapes(grid)
    assert decode_sizes(grid) == sglang_batch_sizes(256)
    assert piecewise_sizes(grid) == sglang_piecewise_tokens(16384)
    assert grid.lookup(13, 0, 13) == (BS(16, 0, 16), None)
    assert grid.lookup(3, 1, 2) == (BS(4, 4, 0), None)
    assert grid.lookup(5000, 2, 0) == (BS(5120, 5120, 0), None)
    capped = peer("sglang", piecewise_max_tokens=2048)
    assert capped.lookup(2049, 1, 0) == (None, "tokens_over_max")
    # Decode graphs above max_requests are never kept.
    small = peer("sglang", engine=EngineConfig(max_requests=100))
    assert max(decode_sizes(small)) == 96
    assert small.lookup(100, 0, 100) == (None, "decode_only_over_max")
    # --disable-cuda-graph-padding: every batch size, exact match.
    exact = peer("sglang", padding=False)
    assert exact.exact_decode and decode_sizes(exact) == list(range(1, 257))
    assert exact.lookup(13, 0, 13) == (BS(13, 0, 13), None)


# ---------------------------------------------------------------------------------------------
# TensorRT-LLM (A.3)

def test_trtllm_batch_sizes():
    assert trtllm_batch_sizes(128, padding=True) == [1, 2, 4] + list(range(8, 129, 8))
    assert trtllm_batch_sizes(512, padding=True)[-7:] == [128, 192, 256, 320, 384, 448, 512]
    assert trtllm_batch_sizes(500, padding=True)[-5:] == [256, 320, 384, 448, 500]  # max appended
    assert trtllm_batch_sizes(128, padding=False) == list(range(1, 32)) + [32, 64, 128]
    assert trtllm_batch_sizes(1024, padding=False)[-6:] == [32, 64, 128, 256, 512, 1024]
    assert trtllm_batch_sizes(1000, padding=False)[-5:] == [64, 128, 256, 512, 1000]
    assert trtllm_batch_sizes(100, padding=False)[-3:] == [32, 64, 100]
    assert trtllm_piecewise_tokens(16384) == [1, 2, 4, 8, 16, 32, 64, 128] + list(range(256, 3073, 256))


def test_trtllm_exact_without_padding():
    grid = peer("trtllm", padding=False, piecewise=False)
    assert grid.exact_decode and len(grid.graphs) == 34
    assert_peer_shapes(grid)
    assert grid.lookup(32, 0, 32) == (BS(32, 0, 32), None)
    assert grid.lookup(33, 0, 33) == (None, "shape")  # exact sizes only
    assert grid.lookup(129, 0, 129) == (None, "decode_only_over_max")
    assert grid.lookup(10, 1, 0) == (None, "no_mixed_graphs")  # context/mixed batches: eager


def test_trtllm_padding_and_piecewise():
    grid = peer("trtllm", padding=True, piecewise=True)
    assert not grid.exact_decode
    assert grid.lookup(33, 0, 33) == (BS(40, 0, 40), None)
    assert piecewise_sizes(grid) == trtllm_piecewise_tokens(16384)
    assert grid.lookup(3000, 2, 5) == (BS(3072, 3072, 0), None)
    assert grid.lookup(3073, 1, 0) == (None, "tokens_over_max")
    spec = peer("trtllm", engine=EngineConfig(num_speculative_tokens=1), padding=True, piecewise=False)
    assert_peer_shapes(spec, spec=1)
    assert spec.lookup(10, 0, 5) == (BS(16, 0, 8), None)
    # cuda_graph_config.max_batch_size, capped at the engine's batch size.
    assert max(decode_sizes(peer("trtllm", max_capture_size=1024, padding=True))) == 256


def test_peer_explicit_sizes_are_checked():
    with pytest.raises(ConfigError, match="cg.capture_sizes"):  # by the one validator, for every grid
        validate(BenchConfig(cg=CGConfig(kind="trtllm", capture_sizes=[0, 8])))


@pytest.mark.parametrize("kind, cap", [("vllm", "VLLM_MAX_CAPTURE_SIZE"), ("trtllm", "TRTLLM_MAX_BATCH_SIZE"),
                                       ("sglang", "SGLANG_MAX_BATCH_SIZE")])
def test_a_peer_default_is_one_number_the_generator_and_the_estimate_share(kind, cap, monkeypatch):
    from cgbench.config.limits import estimate_graphs
    from cgbench.config.registry import grids as registry
    from cgbench.grids.build import forget_grids

    cfg = BenchConfig(cg=CGConfig(kind=kind, gpu_memory_gb=200.0), engine=EngineConfig(max_requests=256))
    before_top = max(g.decode_req_count for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs)
    before_estimate = estimate_graphs(cfg)[0]
    monkeypatch.setattr(registry, cap, 64)
    forget_grids()  # the grid of these sections was kept: the generator changed under it
    top = max(g.decode_req_count for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs)
    assert top == 64 < before_top  # the generator read the lowered default
    assert estimate_graphs(cfg)[0] < before_estimate  # and so did the estimate
