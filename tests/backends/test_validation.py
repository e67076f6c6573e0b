"""The dense cost model against the published data of scripts/validation_*.csv (acceptance bands of
issue 29), and hand-computed cases of its collectives, host profiles and padded-slot pricing."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.backends.sim.collectives import Collectives
from cgbench.backends.sim.cost_model import RooflineCostModel
from cgbench.backends.sim.host_profiles import HOST_PROFILES, MEGATRON, host_profile
from cgbench.config.schema import BenchConfig, ConfigError, HardwareConfig, ModelConfig, validate
from cgbench.engine.contract import StepWork
from tests.helpers import examples, load_script

ROOT = Path(__file__).resolve().parents[2]



VALIDATION = load_script("validation_table")
ROWS = list(VALIDATION.rows())


def _load(kind: str, name: str):
    data = yaml.safe_load((ROOT / "conf" / kind / f"{name}.yaml").read_text())
    return ModelConfig(**data) if kind == "model" else HardwareConfig(**data)


H100, A100 = _load("hardware", "h100"), _load("hardware", "a100")


# --------------------------------------------------------------------------- acceptance bands


# Reported, not held to the band: one published MoE decode step, of another engine (vLLM's TPOT, its
# scheduler and sampler included; the same sweep's dense control is 11-14 % fast). A Megatron MoE step
# measured with its own step timer would settle it (docs/cost-model.md, "Validity range").
REPORTED_ONLY = {"moe_step"}


@pytest.mark.parametrize("summary", [s for s in VALIDATION.summarise(ROWS) if s.cls not in REPORTED_ONLY],
                         ids=lambda s: s.cls)
def test_each_class_median_error_is_within_15_percent(summary) -> None:
    assert summary.median <= 0.15
    if summary.held_out_median is not None:
        assert summary.held_out_median <= 0.25  # what was not fitted is no worse than the class band


def test_the_moe_step_is_reported_held_back_and_within_35_percent() -> None:
    moe = [r for r in ROWS if r.cls == "moe_step"]
    assert moe and all(r.role == "check" for r in moe)  # nothing of the MoE model was fitted to it
    assert all(abs(r.error) <= 0.35 for r in moe)
    dense = [r for r in ROWS if r.cls == "step" and "dense control" in r.quantity]
    assert dense and abs(dense[0].error) < min(abs(r.error) for r in moe)  # the gap is the MoE layers'


def test_every_class_reports_its_held_back_rows_apart() -> None:
    table = VALIDATION.summary_table(ROWS)
    assert "held-back median" in table and "fitted-on median" in table
    for s in VALIDATION.summarise(ROWS):
        held = [abs(r.error) for r in ROWS if r.cls == s.cls and r.role == "check"]
        assert s.held_out == len(held) and (s.held_out_worst == max(held) if held else s.held_out_worst is None)
    # the new kernel classes keep most of their rows out of the fit
    for cls in ("mamba_ssd", "ssm_update", "allreduce_graph"):
        rows = [r for r in ROWS if r.cls == cls]
        assert sum(r.role == "check" for r in rows) > len(rows) / 2, cls


def test_every_published_eager_over_graphed_pair_is_within_25_percent() -> None:
    pairs = [r for r in ROWS if r.cls == "ratio"]
    assert len(pairs) >= 4
    for r in pairs:
        assert abs(r.error) <= 0.25, r.quantity


def test_validation_data_names_a_source_and_a_role_on_every_row() -> None:
    assert len(ROWS) > 500
    assert all(r.source and r.role in ("fit", "check") for r in ROWS)
    assert sum(r.role == "check" for r in ROWS) > sum(r.role == "fit" for r in ROWS)  # mostly held out


# --------------------------------------------------------------------------- collectives, by hand


def test_ring_and_tree_allreduce_by_hand() -> None:
    c = Collectives(8, alpha_s=30e-6, hop_s=2e-6, bandwidth=100e9, algorithm="ring")
    n = 1_000_000
    assert c.allreduce(n) == pytest.approx(30e-6 + 14 * 2e-6 + 2 * 7 / 8 * n / 100e9)  # 75.5 us
    tree = dataclasses.replace(c, algorithm="tree")
    assert tree.allreduce(n) == pytest.approx(30e-6 + 2 * 3 * 2e-6 + 2 * n / 100e9)  # 56 us
    auto = dataclasses.replace(c, algorithm="auto")
    assert auto.allreduce(n) == tree.allreduce(n)  # small message: the tree's fewer hops win
    big = 1e9
    assert auto.allreduce(big) == c.allreduce(big)  # large message: the ring's 2(t-1)/t wins
    assert c.allgather(n) == pytest.approx(30e-6 + 7 * 2e-6 + 7 / 8 * n / 100e9)
    assert Collectives(1, 30e-6, 2e-6, 100e9).allreduce(n) == 0.0


def test_small_all_reduces_pay_the_latency() -> None:
    # Vidur's H100 node: 1 MB on 8 GPUs takes 34 us; the size alone would take ~5 us
    c = Collectives.from_hardware(H100, 8)
    assert c.allreduce(1 << 20) == pytest.approx(34e-6, rel=0.15)
    assert c.allreduce(1 << 20) > 5 * (2 * 7 / 8 * (1 << 20) / H100.interconnect_bandwidth)


def test_tp8_step_pays_one_allreduce_per_layer_and_the_logits_gather() -> None:
    m = _load("model", "transformer_70b")
    cost = RooflineCostModel(m, H100, 8)
    parts = cost.breakdown(StepWork(8, 0, 8, 8000, (8, 0, 8)))
    c = Collectives.from_hardware(H100, 8)
    expected = (len(m.layers) + 1) * c.allreduce(8 * m.hidden_size * 2) + c.allgather(8 * m.vocab_size * 2)
    assert parts["collectives"] == pytest.approx(expected)


def test_the_low_latency_protocol_takes_small_messages_by_hand() -> None:
    c = Collectives(8, alpha_s=30e-6, hop_s=0.0, bandwidth=365e9, algorithm="auto",
                    ll_alpha_s=6.6e-6, ll_hop_s=1.15e-6, ll_bandwidth=238e9)
    small, big = 16 * 1024, 64 << 20
    ll_small = 6.6e-6 + 14 * 1.15e-6 + 2 * 7 / 8 * small / 238e9  # 22.8 us
    assert c.allreduce(small) == pytest.approx(ll_small)
    assert c.allreduce(big) == pytest.approx(30e-6 + 2 * 7 / 8 * big / 365e9)  # the bulk ring
    assert c.allgather(small) == pytest.approx(6.6e-6 + 7 * 1.15e-6 + 7 / 8 * small / 238e9)
    off = dataclasses.replace(c, ll_bandwidth=0.0)
    assert off.allreduce(small) == pytest.approx(30e-6 + 2 * 7 / 8 * small / 365e9)
    for algorithm in ("ring", "tree"):  # the algorithm restricts the bulk form, LL stays a ring
        assert dataclasses.replace(c, algorithm=algorithm).allreduce(small) == pytest.approx(ll_small)


@settings(max_examples=examples(60, stretch=False))
@given(st.integers(2, 8), st.floats(1.0, 1e9))
def test_a_collective_never_costs_more_than_either_protocol(ranks, nbytes) -> None:
    c = Collectives.from_hardware(H100, ranks)
    assert c.allreduce(nbytes) <= min(c.ring_allreduce(nbytes), c.ll_allreduce(nbytes)) + 1e-15
    assert c.allreduce(nbytes) < c.allreduce(nbytes * 2) + 1e-15  # more bytes never cost less


def test_a100_keeps_the_bulk_protocol_only() -> None:
    # no graph-mode small-message measurement on A100: its LL protocol is off, and typing its unread
    # latencies is refused like any other setting that changes nothing
    c = Collectives.from_hardware(A100, 8)
    assert A100.interconnect_ll_bandwidth == 0 and c.ll_allreduce(2048) == math.inf
    from cgbench.config.schema import unread_keys
    assert "hardware.interconnect_ll_hop_us" in unread_keys(BenchConfig(hardware=A100))
    assert "hardware.interconnect_ll_hop_us" not in unread_keys(BenchConfig(hardware=H100))


# --------------------------------------------------------------------------- host profiles, by hand


def test_host_seconds_by_hand_per_profile() -> None:
    m = _load("model", "transformer")  # 32 x "*-"
    kernels = None
    for name, ops_per_layer in (("megatron", 50 + 18), ("vllm", 14 + 6), ("sglang", 14 + 6)):
        cost = RooflineCostModel(m, dataclasses.replace(H100, host_profile=name))
        p = HOST_PROFILES[name]
        ops = 32 * ops_per_layer + p.ops_per_step
        assert cost.host_ops_decode == ops
        kernels = cost.kernel_count(0) if kernels is None else kernels
        assert cost.kernel_count(0) == kernels  # the GPU's kernels do not depend on the host
        assert cost.host_seconds(0) == pytest.approx((ops * p.op_us + kernels * H100.kernel_launch_us) * 1e-6)
    megatron = RooflineCostModel(m, H100)
    assert megatron.host_ops_decode == 2210 and megatron.kernel_count(0) == 389
    # 2,210 x 4.05 us + 389 x 2.5 us = 9.92 ms: near the published 8.2-9.3 ms eager 8B steps
    assert megatron.host_seconds(0) == pytest.approx(9.923e-3, rel=1e-4)


def test_host_op_us_overrides_the_profile_and_measured_needs_a_file() -> None:
    assert host_profile(H100) is MEGATRON and MEGATRON.op_us == 4.05
    assert host_profile(dataclasses.replace(H100, host_op_us=2.0)).op_us == 2.0
    with pytest.raises(ConfigError, match="host_calibration"):
        validate(BenchConfig(hardware=dataclasses.replace(H100, host_profile="measured")))
    with pytest.raises(ConfigError, match="host_profile"):
        validate(BenchConfig(hardware=dataclasses.replace(H100, host_profile="tgi")))


# --------------------------------------------------------------------------- padded slots


@pytest.mark.parametrize(("value", "state_slots"), [("full", 256.0), ("shared", 2.0), ("0.25", 1 + 0.25 * 255)])
def test_padded_slot_cost_state_slots(value: str, state_slots: float) -> None:
    m = dataclasses.replace(_load("model", "hybrid"), padded_slot_cost=value)
    assert RooflineCostModel(m, H100).state_slots(256, 1) == state_slots


def test_padded_slots_cost_the_scan_as_configured() -> None:
    # issue 29's case: one real request replayed on a (256, 1, 255) graph
    base = _load("model", "nemotron_h_56b")
    work = StepWork(256, 1, 0, 256, (256, 1, 255))
    scan = {v: RooflineCostModel(dataclasses.replace(base, padded_slot_cost=v), H100).breakdown(work)["mamba_scan"]
            for v in ("full", "0.5", "shared", "0")}
    assert scan["full"] > scan["0.5"] > scan["shared"] > scan["0"]
    # full - shared is at most the state traffic of 254 more slots (conv and SSM state, read and written)
    state_bytes = RooflineCostModel(base, H100).mamba_state_bytes * 2
    bandwidth = H100.hbm_bandwidth * H100.bandwidth_efficiency
    assert scan["full"] - scan["shared"] <= 254 * state_bytes / bandwidth * 1.0001


def test_padded_slot_cost_rejects_other_values() -> None:
    for bad in ("half", "1.5", "-0.1"):
        with pytest.raises(ConfigError, match="model.padded_slot_cost"):
            validate(BenchConfig(model=dataclasses.replace(_load("model", "hybrid"), padded_slot_cost=bad)))


# --------------------------------------------------------------------------- invariants

steps = st.tuples(st.integers(1, 4096), st.integers(0, 8), st.integers(0, 256), st.integers(0, 4000))


@settings(max_examples=examples(120, stretch=False))
@given(steps, st.sampled_from(["transformer", "hybrid"]), st.sampled_from(["a100", "h100"]),
       st.sampled_from(["full", "shared"]), st.integers(0, 512), st.integers(0, 8))
def test_a_graphed_step_never_costs_less_than_its_real_gpu_work(step, name, hw, slots, pad_t, pad_r) -> None:
    t, p, d, cached = step
    if p + d == 0:
        d = 1
    t = max(t, p + d)
    if p == 0:
        t = d
    hardware = dataclasses.replace(_load("hardware", hw), kernel_gap_us=0.0)
    cost = RooflineCostModel(dataclasses.replace(_load("model", name), padded_slot_cost=slots), hardware)
    ctx = t + cached * (p + d)
    real = StepWork(t, p, d, ctx, None)
    graph = (t + pad_t, p, d + pad_r) if p else (d + pad_r, 0, d + pad_r)
    gpu_work = sum(v for k, v in cost.breakdown(real).items() if k not in ("launch", "dispatch", "sync"))
    assert cost.step_time(StepWork(t, p, d, ctx, graph)) >= gpu_work


@settings(max_examples=examples(80, stretch=False))
@given(st.integers(1, 4096), st.integers(1, 8), st.integers(0, 64), st.integers(0, 8000),
       st.sampled_from(["transformer", "hybrid"]))
def test_pricing_is_monotone_in_prefill_tokens_with_context(t, p, d, cached, name) -> None:
    cost = RooflineCostModel(_load("model", name), H100)
    t = max(t, p)
    a = StepWork(t + d, p, d, t + d + cached * p, (t + d, p, d))
    b = StepWork(t + d + 1, p, d, t + d + 1 + cached * p, (t + d + 1, p, d))
    assert cost.step_time(b) >= cost.step_time(a)
    assert cost.step_time(StepWork(b.tokens, p, d, b.context_tokens, None)) >= \
        cost.step_time(StepWork(a.tokens, p, d, a.context_tokens, None))


def test_gemm_quantisation_by_hand() -> None:
    cost = RooflineCostModel(_load("model", "transformer"), H100)
    tiling = cost.tiling
    # 4096 x 4096 output projection: 64 column tiles; 65 tokens take 2 tile rows -> 128 tiles, 1 wave
    assert tiling.seconds(65, 4096, 4096) == tiling.seconds(128, 4096, 4096)
    one_wave = 2 * 64 * 64 * 4096 / (H100.peak_flops * H100.flops_efficiency / H100.sm_count)
    assert tiling.seconds(128, 4096, 4096) == pytest.approx(one_wave)
    assert tiling.seconds(192, 4096, 4096) == pytest.approx(2 * one_wave)  # 192 tiles on 132 SMs
    assert math.isclose(tiling.combine(3.0, 4.0), (3 ** 1.5 + 4 ** 1.5) ** (1 / 1.5))


def test_readme_validation_summary_is_the_scripts_output() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split(VALIDATION.SUMMARY_BEGIN, 1)[1].split(VALIDATION.SUMMARY_END, 1)[0].strip()
    assert block == VALIDATION.summary_table(ROWS), "regenerate it: python scripts/validation_table.py --write"
