"""Megatron main's batch-invariant graph ladder (engine.batch_invariant; #6521 ``d98e8a64``,
``megatron/core/inference/batch_dimensions_utils.py``: ``_batch_invariant_token_align``, the
EXPONENTIAL rounder and smallest bucket, the LINEAR auto ladder, and ``add_if_valid`` aligning each
valid graph). Checked while writing against that file, loaded on the CPU with its imports stubbed:
3,000 random configurations (tp, spec, limits, n, cap, both distributions, decode-only or not, the
mode on and off) gave the same lists in the same order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.config.schema import CGConfig, ConfigError, validate
from cgbench.grids.build import build_grid
from cgbench.grids.megatron import batch_invariant_align, exponential_sizes, linear_sizes, megatron_grid
from tests.helpers import make_cfg

DEFAULTS = dict(tp_size=1, mixed_prefill_count=16, max_requests=256, max_tokens=16384, max_sequence_length=2560)


def _grid(bi: bool, **kw):
    args = {**DEFAULTS, **kw}
    graphs, counts = megatron_grid(batch_invariant=bi, **args)
    return [tuple(g) for g in graphs], counts


def test_align_rounds_up_to_64_with_a_floor_of_64():
    assert [batch_invariant_align(t) for t in (1, 2, 63, 64, 65, 300)] == [64, 64, 64, 64, 128, 320]


def test_exponential_sizes_stop_at_64():
    assert exponential_sizes(1, 16, 256) == [256, 128, 64, 32, 16, 8, 4, 2, 1]
    assert exponential_sizes(1, 16, 256, batch_invariant=True) == [256, 128, 64]
    assert exponential_sizes(1, 4, 100, batch_invariant=True) == [128, 64]  # the cap aligned up first
    assert linear_sizes(1, -1, 256, batch_invariant=True)[-3:] == [192, 128, 64]


def test_megatron_defaults_lose_the_buckets_below_64():
    """all_prefills, 256 requests, 16384 tokens, msl 2560, 16 graphs: 101 graphs on token counts
    16384 .. 1 without the mode, 75 on 16384 .. 64 with it."""
    graphs, counts = _grid(False, num_cuda_graphs=16, cuda_graph_max_tokens=16384, non_decode_graphs=True)
    assert len(graphs) == 101 and counts[-1] == 1
    graphs, counts = _grid(True, num_cuda_graphs=16, cuda_graph_max_tokens=16384, non_decode_graphs=True)
    assert len(graphs) == 75 and counts == [16384, 8192, 4096, 2048, 1024, 512, 256, 128, 64]
    assert [g for g in graphs if g[1] == 0] == [(256, 0, 256), (128, 0, 128), (64, 0, 64)]


def test_the_auto_one_and_two_request_decode_graphs_are_padded_to_64():
    """The commit's own motivation: auto sizing injects 1- and 2-token decode buckets; under the mode
    they keep their request counts and take 64 tokens (sorted first: their prefill-token key is 63, 62)."""
    graphs, _ = _grid(True, num_cuda_graphs=-1, cuda_graph_max_tokens=256, non_decode_graphs=False)
    assert graphs == [(64, 0, 1), (64, 0, 2), (256, 0, 256), (128, 0, 128), (64, 0, 64)]
    graphs, _ = _grid(False, num_cuda_graphs=-1, cuda_graph_max_tokens=256, non_decode_graphs=False)
    assert graphs[-2:] == [(2, 0, 2), (1, 0, 1)]


def test_the_engine_key_reaches_the_grid_and_needs_main():
    cfg = make_cfg(kind="transformer", megatron_rules="main", batch_invariant=True)
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    assert min(g.token_count for g in grid.graphs) == 64
    assert all(g.token_count % 64 == 0 for g in grid.graphs)
    with pytest.raises(ConfigError, match="engine.megatron_rules=main"):
        validate(make_cfg(batch_invariant=True))
    validate(replace(cfg, cg=CGConfig()))


def test_an_explicit_list_is_judged_before_alignment():
    """A state file or cg=explicit list of a batch-invariant run holds the aligned graphs: (64, 0, 8)
    pads an 8-token decode graph (valid); (64, 0, 65) pads nothing valid; 96 is no multiple of 64."""
    from cgbench.grids.megatron import batch_invariant_validity_error
    from cgbench.grids.shapes import BatchShape, validity_error

    graphs, _ = _grid(True, num_cuda_graphs=16, cuda_graph_max_tokens=16384, non_decode_graphs=True)
    assert all(batch_invariant_validity_error(BatchShape(*g), 256, 2560) is None for g in graphs)
    assert validity_error(BatchShape(64, 0, 8), 8, 1024) is not None
    assert batch_invariant_validity_error(BatchShape(64, 0, 8), 8, 1024) is None
    assert "P + D" in batch_invariant_validity_error(BatchShape(64, 0, 65), 64, 1024)
    assert "multiple of 64" in batch_invariant_validity_error(BatchShape(96, 1, 0), 8, 1024)
