"""Mamba-2's state update and chunked scan (SSD) in the roofline model: their fixed cost per launch, the
per-chunk state traffic and the chunk count, worked by hand from the kernels' shapes
(docs/cost-model.md, "Mamba-2"; the fit to published timings is scripts/validation_table.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.backends.sim.cost_model import RooflineCostModel, ssd_chunks
from cgbench.config.schema import HardwareConfig, ModelConfig
from cgbench.engine.contract import StepWork
from tests.helpers import examples

CONF = Path(__file__).resolve().parents[2] / "conf"
HYBRID = ModelConfig(**yaml.safe_load((CONF / "model" / "hybrid.yaml").read_text()))
H100 = HardwareConfig(**yaml.safe_load((CONF / "hardware" / "h100.yaml").read_text()))


def _kernel(cost: RooflineCostModel, name: str, prefill: bool):
    return next(k for k in (cost.kernels_prefill if prefill else cost.kernels_decode) if k.name == name)


@settings(max_examples=examples(200, stretch=False))
@given(st.lists(st.integers(1, 2000), min_size=1, max_size=16), st.sampled_from([64, 128, 256]))
def test_ssd_chunks_is_exact_for_one_prefill_and_never_below_the_true_count(chunks, q) -> None:
    true = sum(math.ceil(c / q) for c in chunks)  # Megatron cuts each request's chunk at multiples of Q
    estimate = ssd_chunks(sum(chunks), len(chunks), q)
    assert estimate >= true and estimate <= sum(chunks)
    if len(chunks) == 1:
        assert estimate == true
    assert ssd_chunks(0, 0, q) == 0.0


def test_chunked_scan_by_hand() -> None:
    # the hybrid preset's layer on H100: 128 heads x 64 (d_inner 8192), state 128, 8 groups, chunk 128;
    # one 200-token prefill: 2 SSD chunks
    cost = RooflineCostModel(HYBRID, H100)
    e, n, g, nh, q, b = 8192, 128, 8, 128, 128, 2
    tokens, chunks = 200, 2
    flops = tokens * (4 * e * n + q * (e + 2 * g * n))
    compute = flops / (H100.peak_flops * H100.scan_efficiency)
    nbytes = ((3 * nh + e) * b + tokens * ((3 * e + 4 * g * n) * b + 12 * nh) + 2 * e * n * b
              + chunks * (16 * e * n + 8 * g * q * q))
    memory = nbytes / (H100.hbm_bandwidth * H100.bandwidth_efficiency)
    expected = 6 * H100.floor_scan_us * 1e-6 + max(compute, memory)  # the launches' floors add
    kn = _kernel(cost, "SSM chunked scan", prefill=True)
    got = kn.seconds(tokens, 1, 0, tokens, cost.floors["mamba_scan"], cost.flops, cost.bandwidth, cost.tiling,
                     1.0, ssd_chunks(tokens, 1, q)) / kn.layers
    assert got == pytest.approx(expected)


def test_a_chunk_past_the_boundary_pays_a_whole_chunk_state() -> None:
    cost = RooflineCostModel(dataclasses.replace(HYBRID, layer_pattern="M"), H100)
    kn = _kernel(cost, "SSM chunked scan", prefill=True)
    e, n, g, q = 8192, 128, 8, 128

    def scan(tokens: int) -> float:
        return kn.seconds(tokens, 1, 0, tokens, cost.floors["mamba_scan"], cost.flops, cost.bandwidth,
                          cost.tiling, 1.0, ssd_chunks(tokens, 1, q))

    per_chunk = (16 * e * n + 8 * g * q * q) / cost.bandwidth
    # 128 -> 129 tokens opens a second chunk: one more chunk's fp32 states, far more than one token's
    assert scan(129) - scan(128) == pytest.approx(per_chunk + (scan(128) - scan(127)), rel=1e-6)
    assert scan(129) - scan(128) > 20 * (scan(128) - scan(127))


def test_the_state_update_pays_its_floor_on_top_by_hand() -> None:
    cost = RooflineCostModel(HYBRID, H100)
    e, n, g, nh, b = 8192, 128, 8, 128, 2
    conv = e + 2 * g * n
    for batch in (1, 64):
        nbytes = (3 * nh + e) * b + batch * (conv + nh + e) * b + batch * 2 * e * n * b
        expected = H100.floor_scan_us * 1e-6 + nbytes / (H100.hbm_bandwidth * H100.bandwidth_efficiency)
        kn = _kernel(cost, "SSM update", prefill=False)
        got = kn.seconds(batch, batch, batch, 0, cost.floors["mamba_scan"], cost.flops, cost.bandwidth,
                         cost.tiling, float(batch)) / kn.layers
        assert got == pytest.approx(expected)


def test_a_graph_is_priced_by_its_real_chunks_and_step_time_matches_the_breakdown() -> None:
    cost = RooflineCostModel(HYBRID, H100)
    graph = (256, 2, 0)
    one_chunk_each = StepWork(200, 2, 0, 200, graph)  # 100 + 100 tokens: 2 chunks (estimated: 3)
    short = StepWork(100, 2, 0, 100, graph)  # two short chunks: 2
    a, b = cost.step_time(one_chunk_each), cost.step_time(short)
    assert cost.real_chunks(one_chunk_each) == 3.0 and cost.real_chunks(short) == 2.0
    assert a > b  # the same graph, one more SSD chunk of state traffic
    for w in (one_chunk_each, short):
        assert cost.step_time(w) == pytest.approx(sum(cost.breakdown(w).values()))
