"""Cost models: presets, roofline sanity figures and invariants, calibrated-table interpolation and I/O."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.backends.sim.calibrated import (
    CALIBRATION_SCHEMA,
    CalibratedCostModel,
    CalibrationPoint,
    CalibrationTable,
    HostCalibration,
    fit_nonneg_linear,
)
from cgbench.backends.sim.cost_model import EagerPadding, RooflineCostModel, estimate_attention_pairs
from cgbench.backends.sim.factory import make_cost_model
from cgbench.config.schema import (
    MOE_KEYS,
    BackendConfig,
    BenchConfig,
    ConfigError,
    EngineConfig,
    HardwareConfig,
    ModelConfig,
    validate,
)
from cgbench.engine.contract import StepWork
from tests.helpers import examples

CONF = Path(__file__).resolve().parents[2] / "conf"
MODELS = ("transformer", "hybrid", "tiny_transformer", "tiny_hybrid")
HARDWARE = ("a100", "h100", "h200", "b200")


def load_model(name: str) -> ModelConfig:
    return ModelConfig(**yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text()))


def load_hardware(name: str) -> HardwareConfig:
    return HardwareConfig(**yaml.safe_load((CONF / "hardware" / f"{name}.yaml").read_text()))


def decode(d: int, ctx_per_request: int, graph: bool = True) -> StepWork:
    return StepWork(d, 0, d, d * ctx_per_request, (d, 0, d) if graph else None)


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name", MODELS)
def test_model_preset_keys_are_exactly_the_dataclass_fields(name: str) -> None:
    data = yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text())
    moe = () if "E" in data["layer_pattern"] else MOE_KEYS  # read only with MoE ('E') layers
    assert set(data) == {f.name for f in dataclasses.fields(ModelConfig)} - set(moe)
    assert data["name"] == name
    validate(BenchConfig(model=ModelConfig(**data)))


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_preset_keys_are_exactly_the_dataclass_fields(name: str) -> None:
    data = yaml.safe_load((CONF / "hardware" / f"{name}.yaml").read_text())
    assert set(data) == {f.name for f in dataclasses.fields(HardwareConfig)}
    assert data["name"] == name
    assert all(isinstance(data[k], float) for k in ("peak_flops", "hbm_bandwidth"))
    assert 0.0 < data["kernel_gap_us"] < data["kernel_launch_us"] and data["graph_node_us"] < data["kernel_gap_us"]
    assert data["host_calibration"] is None
    validate(BenchConfig(hardware=HardwareConfig(**data)))


def test_hardware_presets_rank_as_the_datasheets_do() -> None:
    hw = {n: load_hardware(n) for n in HARDWARE}
    assert hw["a100"].peak_flops < hw["h100"].peak_flops == hw["h200"].peak_flops < hw["b200"].peak_flops
    assert hw["a100"].hbm_bandwidth < hw["h100"].hbm_bandwidth < hw["h200"].hbm_bandwidth \
        < hw["b200"].hbm_bandwidth


def llama_params(m: ModelConfig) -> int:
    """Parameters of a Llama-style model (untied embeddings, SwiGLU, RMSNorm), counted by hand."""
    attn = m.hidden_size * m.num_attention_heads * m.head_dim * 2 \
        + m.hidden_size * m.num_kv_heads * m.head_dim * 2
    mlp = 3 * m.hidden_size * m.ffn_hidden_size
    return (len(m.layers) // 2) * (attn + mlp + 2 * m.hidden_size) + 2 * m.vocab_size * m.hidden_size \
        + m.hidden_size


def nemotron_h_params(m: ModelConfig) -> int:
    """Parameters of a Nemotron-H-style hybrid (squared-ReLU MLP, Mamba-2 mixers), counted by hand."""
    h = m.hidden_size
    inner = m.mamba_num_heads * m.mamba_head_dim
    bc = 2 * m.mamba_num_groups * m.mamba_state_dim
    mamba = h * (2 * inner + bc + m.mamba_num_heads) + (inner + bc) * (m.mamba_conv_kernel + 1) \
        + 3 * m.mamba_num_heads + inner + inner * h + h
    attn = h * m.num_attention_heads * m.head_dim * 2 + h * m.num_kv_heads * m.head_dim * 2 + h
    mlp = 2 * h * m.ffn_hidden_size + h
    lay = m.layers
    return lay.count("M") * mamba + lay.count("*") * attn + lay.count("-") * mlp \
        + 2 * m.vocab_size * h + h


def test_transformer_preset_is_llama3_8b_sized() -> None:
    m = load_model("transformer")
    assert m.layers == "*-" * 32
    # Meta's Llama-3-8B card: 8.03e9 parameters.
    assert llama_params(m) == pytest.approx(8.03e9, rel=0.005)


def test_hybrid_preset_has_nemotron_h_8b_layout() -> None:
    m = load_model("hybrid")
    lay = m.layers
    assert (len(lay), lay.count("M"), lay.count("*"), lay.count("-")) == (52, 24, 4, 24)
    assert 7.5e9 < nemotron_h_params(m) < 8.5e9


@pytest.mark.parametrize("name", ["tiny_transformer", "tiny_hybrid"])
def test_tiny_presets_are_tiny(name: str) -> None:
    m = load_model(name)
    assert 2 <= len(m.layers) <= 4 and m.hidden_size <= 128 and m.vocab_size <= 512
    assert m.hidden_size == m.num_attention_heads * m.head_dim
    if m.kind == "hybrid":
        assert m.mamba_num_heads % m.mamba_num_groups == 0 and "M" in m.layers and "*" in m.layers


# --------------------------------------------------------------------------- roofline: sanity figures


@pytest.mark.parametrize("hw_name", HARDWARE)
@pytest.mark.parametrize("model_name", ["transformer", "hybrid"])
def test_batch1_decode_is_weights_over_bandwidth(model_name: str, hw_name: str) -> None:
    m, hw = load_model(model_name), load_hardware(hw_name)
    params = llama_params(m) if model_name == "transformer" else nemotron_h_params(m)
    read_bytes = (params - m.vocab_size * m.hidden_size) * m.dtype_bytes  # the embedding is gathered
    cost = RooflineCostModel(m, hw)
    parts = cost.breakdown(decode(1, 512))
    streamed = parts["projections"] + parts["mlp"] + parts["lm_head"]
    if model_name == "hybrid":
        streamed += parts["mamba_scan"]  # the conv and SSM weights, one request's state, and 48 scan floors
    # A batch-1 GEMM streams its weights while one 64-row tile computes: the two overlap in part
    # (the p-norm), so the weights stream at an effective 70-90 % of peak (Vidur: 0.745 on A100).
    effective = read_bytes / hw.hbm_bandwidth / streamed
    assert 0.65 <= effective <= hw.bandwidth_efficiency
    t = cost.step_time(decode(1, 512))
    assert t >= read_bytes / hw.hbm_bandwidth  # never faster than the raw bandwidth allows


def test_long_prefill_is_compute_bound() -> None:
    m, hw = load_model("transformer"), load_hardware("h100")
    t_tokens = 8192
    linear = llama_params(m) - 2 * m.vocab_size * m.hidden_size
    attention = len(m.layers) // 2 * 4 * m.num_attention_heads * m.head_dim * t_tokens * (t_tokens + 1) / 2
    flops = 2 * linear * t_tokens + 2 * m.hidden_size * m.vocab_size + attention
    parts = RooflineCostModel(m, hw).breakdown(StepWork(t_tokens, 1, 0, t_tokens, (t_tokens, 1, 0)))
    gemms = parts["projections"] + parts["mlp"] + parts["lm_head"]
    # full waves of tiles: the GEMMs run at flops_efficiency, within the weight-streaming overlap
    assert gemms == pytest.approx((flops - attention) / (hw.peak_flops * hw.flops_efficiency), rel=0.04)
    # a fresh 8k prompt: attention_efficiency × q / (q + 2 × attention_half_tokens) of peak
    rate = hw.attention_efficiency * t_tokens / (t_tokens + 2 * hw.attention_half_tokens)
    assert parts["attention"] == pytest.approx(attention / (hw.peak_flops * rate), rel=0.01)


def test_decode_kv_reads_cost_bandwidth() -> None:
    m, hw = load_model("transformer"), load_hardware("h100")
    cost = RooflineCostModel(m, hw)
    kv_per_token = 2 * m.num_kv_heads * m.head_dim * m.dtype_bytes * 32  # K and V, 32 attention layers
    extra_ctx = 64 * 3000
    dt = cost.step_time(decode(64, 4000)) - cost.step_time(decode(64, 1000))
    assert dt == pytest.approx(extra_ctx * kv_per_token / (hw.hbm_bandwidth * hw.bandwidth_efficiency))


def test_mamba_state_bytes_per_request() -> None:
    m = load_model("hybrid")
    conv = (128 * 64 + 2 * 8 * 128) * (4 - 1)  # conv state: (d_inner + 2·G·N) × (K - 1)
    ssm = 128 * 64 * 128  # SSM state: heads × head dim × state
    assert RooflineCostModel(m, load_hardware("h100")).mamba_state_bytes == (conv + ssm) * 24 * 2


def test_mamba_state_traffic_dominates_large_hybrid_decode() -> None:
    m, hw = load_model("hybrid"), load_hardware("h200")
    cost = RooflineCostModel(m, hw)
    d = 256
    state_rw = 2 * d * cost.mamba_state_bytes / (hw.hbm_bandwidth * hw.bandwidth_efficiency)
    weights = cost.weight_bytes / (hw.hbm_bandwidth * hw.bandwidth_efficiency)
    assert cost.step_time(decode(d, 100)) >= state_rw + weights * 0.9


# --------------------------------------------------------------------------- roofline: invariants

shapes = st.builds(
    lambda p, d, extra, cached: (p + d + extra, p, d, cached),
    st.integers(0, 8), st.integers(0, 256), st.integers(0, 4096), st.integers(0, 20000),
).filter(lambda s: s[1] + s[2] >= 1 and (s[1] > 0 or s[0] == s[2]))

_MODELS = {n: load_model(n) for n in ("transformer", "hybrid")}
_H100 = load_hardware("h100")
_COST = {n: RooflineCostModel(m, _H100) for n, m in _MODELS.items()}
_COST_TP2 = {n: RooflineCostModel(m, _H100, 2) for n, m in _MODELS.items()}


def work(shape: tuple[int, int, int, int], graph: tuple[int, int, int] | None) -> StepWork:
    t, p, d, cached = shape
    return StepWork(t, p, d, t + cached * (p + d), graph)


@pytest.mark.slow
@settings(max_examples=examples(150, stretch=False))
@given(shapes, st.sampled_from(["transformer", "hybrid"]))
def test_eager_costs_more_than_the_same_shape_graphed(shape, model_name) -> None:
    cost = _COST[model_name]
    t, p, d, _ = shape
    assert cost.step_time(work(shape, None)) > cost.step_time(work(shape, (t, p, d)))


@settings(max_examples=examples(60, stretch=False))
@given(shapes, st.sampled_from(["transformer", "hybrid"]))
def test_eager_and_graphed_differ_only_by_launch_overhead(shape, model_name) -> None:
    free = dataclasses.replace(_H100, kernel_launch_us=0.0, graph_launch_us=0.0, host_op_us=0.0, kernel_gap_us=0.0,
                               graph_node_us=0.0, sync_us=0.0)
    cost = RooflineCostModel(_MODELS[model_name], free)
    t, p, d, _ = shape
    assert cost.step_time(work(shape, None)) == pytest.approx(cost.step_time(work(shape, (t, p, d))))


@settings(max_examples=examples(100, stretch=False))
@given(shapes, st.integers(1, 512), st.sampled_from(["transformer", "hybrid"]), st.booleans())
def test_monotone_in_prefill_tokens(shape, more, model_name, graphed) -> None:
    t, p, d, cached = shape
    p = max(p, 1)
    cost = _COST[model_name]
    a, b = (t, p, d, cached), (t + more, p, d, cached)
    ga, gb = ((a[0], p, d), (b[0], p, d)) if graphed else (None, None)
    assert cost.step_time(work(b, gb)) >= cost.step_time(work(a, ga))


@pytest.mark.parametrize("model_name", ["transformer", "hybrid"])
@pytest.mark.parametrize("graphed", [True, False])
@pytest.mark.parametrize("padding", [None, EagerPadding(16384, 512)])
def test_monotone_in_decode_count(model_name: str, graphed: bool, padding: EagerPadding | None) -> None:
    cost = RooflineCostModel(_MODELS[model_name], _H100, eager_padding=padding)
    times = [cost.step_time(decode(d, 1500, graphed)) for d in range(1, 513)]
    assert all(b >= a for a, b in itertools.pairwise(times))
    mixed = [cost.step_time(StepWork(300 + d, 2, d, 300 + d * 1500, (300 + d, 2, d) if graphed else None))
             for d in range(0, 300)]
    assert all(b >= a for a, b in itertools.pairwise(mixed))


@settings(max_examples=examples(150, stretch=False))
@given(shapes, st.integers(0, 512), st.integers(0, 4), st.integers(0, 64),
       st.sampled_from(["transformer", "hybrid"]))
def test_padded_graph_costs_at_least_the_exact_graph(shape, pad_t, pad_p, pad_d, model_name) -> None:
    t, p, d, _ = shape
    if p == 0:
        pad_p, pad_t = 0, pad_d  # a decode-only graph stays decode-only
    exact = _COST[model_name].step_time(work(shape, (t, p, d)))
    padded = _COST[model_name].step_time(work(shape, (t + pad_t, p + pad_p, d + pad_d)))
    assert padded >= exact


@settings(max_examples=examples(100, stretch=False))
@given(shapes, st.sampled_from(["transformer", "hybrid"]), st.booleans())
def test_tensor_parallel_lowers_the_kernel_time_and_adds_collectives(shape, model_name, graphed) -> None:
    t, p, d, _ = shape
    w = work(shape, (t, p, d) if graphed else None)
    one, two = _COST[model_name].breakdown(w), _COST_TP2[model_name].breakdown(w)
    kernels = ("projections", "mlp", "lm_head", "mamba_scan")
    assert sum(two[k] for k in kernels) < sum(one[k] for k in kernels)
    assert one["collectives"] == 0.0 < two["collectives"]


def test_lm_head_runs_on_sampled_rows_only() -> None:
    # Same tokens, one request vs 64: the extra 63 head rows (and nothing else, for a transformer whose
    # prefill of 64 tokens is memory-bound) make the difference.
    m = _MODELS["transformer"]
    free = dataclasses.replace(_H100, graph_launch_us=0.0)
    cost = RooflineCostModel(m, free)
    one = cost.breakdown(StepWork(64, 1, 0, 64, (64, 1, 0), attention_pairs=0))["lm_head"]
    many = cost.breakdown(StepWork(64, 64, 0, 64, (64, 64, 0), attention_pairs=0))["lm_head"]
    bandwidth = free.hbm_bandwidth * free.bandwidth_efficiency
    weights = m.hidden_size * m.vocab_size * m.dtype_bytes
    head_row = (m.hidden_size + m.vocab_size) * m.dtype_bytes
    # Hand-computed: 1 and 64 rows both fill one 64-row tile per column of 64 logits: 2,004 tiles,
    # ceil(2004 / 132) = 16 waves of 2·64·64·4096 FLOPs at 0.8 × 989 T / 132 per SM; the time is
    # (compute^1.5 + memory^1.5)^(1/1.5) with memory the weights plus the rows.
    waves = math.ceil(math.ceil(m.vocab_size / 64) / 132)
    compute = waves * 2 * 64 * 64 * m.hidden_size / (free.peak_flops * free.flops_efficiency / free.sm_count)

    def head(rows: int) -> float:
        memory = (weights + rows * head_row) / bandwidth
        return (compute ** 1.5 + memory ** 1.5) ** (1 / 1.5)

    assert (free.gemm_tile_m, free.gemm_tile_n, free.gemm_overlap_exponent) == (64, 64, 1.5)
    assert one == pytest.approx(head(1)) and many == pytest.approx(head(64)) and many > one


# --------------------------------------------------------------------------- eager padding (§4.1)


@pytest.mark.parametrize(("padding", "real", "padded"), [
    (EagerPadding(16384, 256), (65, 0, 65), (128, 0, 128)),         # decode-only: T to 64, D = T
    (EagerPadding(16384, 100), (99, 0, 99), (100, 0, 100)),         # ... capped at max_requests
    (EagerPadding(16384, 256), (300, 1, 10), (320, 2, 10)),         # mixed: requests 11 -> 12
    (EagerPadding(16384, 256, tp_size=3), (65, 1, 0), (66, 6, 0)),  # rounders to tp multiples: 66, 6
    (EagerPadding(16384, 256, num_speculative_tokens=1), (10, 0, 5), (16, 0, 8)),  # spec: D to 4
])
def test_eager_padding_follows_megatron(padding, real, padded) -> None:
    assert padding.pad(*real) == padded


def test_eager_padding_rounds_decode_steps_to_the_same_cost() -> None:
    # With padded_slot_cost=full a padded request row costs a real one; with shared (Megatron's -1
    # rows) the 63 padded rows of a 65 -> 128 step skip their state read/write.
    full = dataclasses.replace(_MODELS["hybrid"], padded_slot_cost="full")
    cost = RooflineCostModel(full, _H100, eager_padding=EagerPadding(16384, 256))
    ctx = 200_000
    assert cost.step_time(StepWork(65, 0, 65, ctx, None)) == cost.step_time(StepWork(128, 0, 128, ctx, None))
    assert cost.step_time(StepWork(129, 0, 129, ctx, None)) > cost.step_time(StepWork(128, 0, 128, ctx, None))
    shared = RooflineCostModel(_MODELS["hybrid"], _H100, eager_padding=EagerPadding(16384, 256))
    assert shared.step_time(StepWork(65, 0, 65, ctx, None)) < shared.step_time(StepWork(128, 0, 128, ctx, None))


def test_make_cost_model_uses_engine_tp_and_padding() -> None:
    engine = EngineConfig(tp_size=2, max_requests=256)
    cost = make_cost_model(BackendConfig(), _MODELS["transformer"], _H100, engine)
    assert isinstance(cost, RooflineCostModel) and cost.tp_size == 2
    assert cost.eager_padding == EagerPadding.from_engine(engine)


# --------------------------------------------------------------------------- attention pairs


def brute_pairs(requests: list[tuple[int, int]]) -> int:
    """(cached, new) per request → (query, key) pairs under a causal mask, one token at a time."""
    return sum(cached + i + 1 for cached, new in requests for i in range(new))


def totals(requests: list[tuple[int, int]], prefill: list[bool]) -> tuple[int, int, int, int]:
    t = sum(n for _, n in requests)
    return t, sum(prefill), len(prefill) - sum(prefill), sum(c + n for c, n in requests)


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=40))
def test_pairs_exact_for_decode_only(cached: list[int]) -> None:
    reqs = [(c, 1) for c in cached]
    assert estimate_attention_pairs(*totals(reqs, [False] * len(reqs))) == pytest.approx(brute_pairs(reqs))


@given(st.integers(0, 5000), st.integers(1, 700), st.integers(1, 6))
def test_pairs_exact_for_equal_prefill_chunks(cached: int, new: int, count: int) -> None:
    reqs = [(cached, new)] * count
    assert estimate_attention_pairs(*totals(reqs, [True] * count)) == pytest.approx(brute_pairs(reqs))


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=20), st.integers(1, 600), st.integers(1, 4))
def test_pairs_exact_for_fresh_prefills_with_decodes(cached: list[int], new: int, count: int) -> None:
    reqs = [(0, new)] * count + [(c, 1) for c in cached]
    flags = [True] * count + [False] * len(cached)
    assert estimate_attention_pairs(*totals(reqs, flags)) == pytest.approx(brute_pairs(reqs))


def test_explicit_pairs_override_the_estimate() -> None:
    cost = _COST["transformer"]
    reqs = [(6000, 2048), (10, 1)]  # a long continued chunk next to a decode: the estimate is low
    t, p, d, ctx = totals(reqs, [True, False])
    exact = StepWork(t, p, d, ctx, (t, p, d), attention_pairs=brute_pairs(reqs))
    assert cost.step_time(exact) > cost.step_time(StepWork(t, p, d, ctx, (t, p, d)))


# --------------------------------------------------------------------------- calibrated table


def linear_ms(t: float, p: float, d: float, ctx: float, eager: bool) -> float:
    return (3.0 if eager else 1.0) + 0.004 * t + 0.05 * p + 0.01 * d + 2e-5 * ctx


def curved_ms(t: float, p: float, d: float, ctx: float, eager: bool) -> float:
    """Monotone but not linear: flat while launch/weight-bound, then rising."""
    return (3.0 if eager else 1.0) + max(6.0, 0.02 * t) + 0.05 * p + 0.01 * d + 2e-5 * ctx + 1e-6 * t * t


GRID_T = (16, 64, 128, 256, 512, 1024, 2048)
DECODE_D = (1, 4, 16, 64, 128, 256)
MIXED = ((1, 0), (1, 32), (4, 60), (2, 200))


def make_table(fn, **kwargs) -> CalibrationTable:
    shapes = [(d, 0, d) for d in DECODE_D]
    shapes += [(t, p, d) for (p, d), t in itertools.product(MIXED, GRID_T) if t >= p + d]

    def points(eager: bool) -> tuple[CalibrationPoint, ...]:
        return tuple(CalibrationPoint(t, p, d, ctx, fn(t, p, d, ctx, eager))
                     for t, p, d in shapes for ctx in (t + 1000 * d, t + 4000 * d + 3000))

    return CalibrationTable(model={"name": "hybrid", "kind": "hybrid"}, device="NVIDIA H200",
                            graphed=points(False), eager=points(True), torch="2.11.0",
                            created_at="2025-01-01T00:00:00+00:00", **kwargs)


@pytest.mark.parametrize("fn", [linear_ms, curved_ms])
def test_calibrated_exact_on_measured_points(fn) -> None:
    table = make_table(fn)
    cost = CalibratedCostModel(table)
    for eager, pts in ((False, table.graphed), (True, table.eager)):
        for pt in pts:
            shape = (pt.tokens, pt.prefills, pt.decodes)
            w = StepWork(*shape, pt.ctx, None if eager else shape)
            assert cost.step_time(w) == pytest.approx(pt.ms * 1e-3, rel=1e-12)


@settings(max_examples=examples(200, stretch=False))
@given(st.integers(1, 6000), st.integers(0, 12), st.integers(0, 300), st.integers(0, 2_000_000),
       st.booleans())
def test_calibrated_reproduces_linear_data_everywhere(t, p, d, ctx, eager) -> None:
    table = make_table(linear_ms)
    cost = _LINEAR_COST
    floor = min(pt.ms for pt in (table.eager if eager else table.graphed))
    w = StepWork(t, p, d, ctx, None if eager else (t, p, d))
    assert cost.step_time(w) == pytest.approx(max(linear_ms(t, p, d, ctx, eager), floor) * 1e-3, rel=1e-9)


_LINEAR_COST = CalibratedCostModel(make_table(linear_ms))


@settings(max_examples=examples(200, stretch=False))
@given(st.integers(1, 300), st.integers(0, 2_000_000), st.integers(1, 40), st.integers(0, 5000), st.booleans(),
       st.sampled_from([linear_ms, curved_ms]))
def test_calibrated_stretch_paths_give_step_time_exactly(d, ctx, k, ctx_step, eager, fn) -> None:
    """The calibrated model prices decode stretches itself (its plan per shape resolved once): the
    same floats as ``step_time`` on every step, on both paths, graphed or eager."""
    from cgbench.backends.sim.backend import SimBackend

    cost = _LINEAR_COST if fn is linear_ms else _CURVED_COST
    assert SimBackend(cost).pricer is cost  # no per-step wrapper
    graph = None if eager else (d, 0, d)
    ref = [cost.step_time(StepWork(d, 0, d, ctx + i * ctx_step, graph)) for i in range(k)]
    step = cost.stepper(StepWork(d, 0, d, ctx, graph, 7))
    assert [step(ctx + i * ctx_step, 7 + i) for i in range(k)] == ref
    assert cost.decode_stretch_times(StepWork(d, 0, d, ctx, graph, 7), k, ctx_step, 1).tolist() == ref


_CURVED_COST = CalibratedCostModel(make_table(curved_ms))


def test_calibrated_interpolates_linearly_between_knots() -> None:
    cost = CalibratedCostModel(make_table(curved_ms))
    p, d, ctx = 1, 32, 50_000
    lo = cost.step_time(StepWork(512, p, d, ctx, (512, p, d)))
    hi = cost.step_time(StepWork(1024, p, d, ctx, (1024, p, d)))
    assert cost.step_time(StepWork(640, p, d, ctx, (640, p, d))) == pytest.approx(0.75 * lo + 0.25 * hi)


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("pd", MIXED)
def test_calibrated_monotone_in_tokens_where_the_data_are(eager: bool, pd: tuple[int, int]) -> None:
    cost = CalibratedCostModel(make_table(curved_ms))
    p, d = pd
    for ctx in (0, 30_000, 500_000):
        times = [cost.step_time(StepWork(t, p, d, ctx, None if eager else (t, p, d)))
                 for t in range(p + d, 5000, 7)]
        assert all(b >= a for a, b in itertools.pairwise(times))
    by_ctx = [cost.step_time(StepWork(256, p, d, c, None if eager else (256, p, d)))
              for c in range(0, 10**6, 9973)]
    assert all(b >= a for a, b in itertools.pairwise(by_ctx))


@pytest.mark.parametrize("eager", [False, True])
def test_calibrated_monotone_in_decodes_where_the_data_are(eager: bool) -> None:
    cost = CalibratedCostModel(make_table(curved_ms))
    for per_request in (0, 1000, 8000):
        times = [cost.step_time(StepWork(d, 0, d, d * per_request, None if eager else (d, 0, d)))
                 for d in range(1, 600)]
        assert all(b >= a for a, b in itertools.pairwise(times))


def test_calibrated_graphed_step_is_priced_by_its_graph() -> None:
    cost = CalibratedCostModel(make_table(curved_ms))
    ctx = 20_000
    padded = cost.step_time(StepWork(300, 1, 20, ctx, (512, 1, 32)))
    assert padded == pytest.approx(cost.step_time(StepWork(512, 1, 32, ctx, (512, 1, 32))))
    eager = cost.step_time(StepWork(512, 1, 32, ctx, None))
    assert eager - padded == pytest.approx(2e-3)  # the eager data are 2 ms slower than the graphed


def test_nonneg_fit_matches_closed_form_when_a_slope_is_clamped() -> None:
    xs = [(float(a), float(b)) for a in range(5) for b in range(4)]
    ys = [10.0 - 2.0 * a + 3.0 * b + 0.1 * ((a * 7 + b * 3) % 5) for a, b in xs]
    c0, c1, c2 = fit_nonneg_linear(xs, ys)
    assert c1 == 0.0
    # Simple regression of y on b alone (the clamped feature drops out of the support).
    bs = [b for _, b in xs]
    mb, my = sum(bs) / len(bs), sum(ys) / len(ys)
    slope = sum((b - mb) * (y - my) for b, y in zip(bs, ys, strict=True)) / sum((b - mb) ** 2 for b in bs)
    assert c2 == pytest.approx(slope) and c0 == pytest.approx(my - slope * mb)


def test_table_round_trips_through_json(tmp_path: Path) -> None:
    table = make_table(curved_ms, tp_size=1, notes="synthetic")
    path = tmp_path / "cal.json"
    table.save(path)
    loaded = CalibrationTable.load(path)
    assert loaded == table
    assert json.loads(path.read_text())["schema"] == CALIBRATION_SCHEMA
    w = StepWork(700, 1, 32, 40_000, (1024, 1, 32))
    assert CalibratedCostModel.from_file(path).step_time(w) == CalibratedCostModel(table).step_time(w)


@pytest.mark.parametrize("old_id", ["cgbench.calibration/1", "cgbench.backends.torch_calibration/1"])
def test_tables_with_an_earlier_schema_id_still_load(tmp_path: Path, old_id: str) -> None:
    table = make_table(curved_ms, tp_size=1, notes="synthetic")
    path = tmp_path / "cal.json"
    table.save(path)
    data = json.loads(path.read_text())
    data["schema"] = old_id
    path.write_text(json.dumps(data))
    assert CalibrationTable.load(path) == table


def test_an_unknown_schema_id_says_what_is_read(tmp_path: Path) -> None:
    table = make_table(curved_ms, tp_size=1, notes="synthetic")
    path = tmp_path / "cal.json"
    table.save(path)
    data = json.loads(path.read_text())
    data["schema"] = "cgbench.calibration/9"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"schema: expected 'cgbench.calibration/2' \(or an earlier id"):
        CalibrationTable.load(path)


def _mutations() -> list[tuple[str, object, str]]:
    def drop(key):
        return lambda d: d.pop(key)

    def setrow(mode, i, key, value):
        def f(d):
            d[mode][i][key] = value
        return f

    def setkey(key, value):
        return lambda d: d.__setitem__(key, value)

    return [
        ("schema", setkey("schema", "cgbench.backends.torch_calibration/0"), "schema"),
        ("no model", drop("model"), "model"),
        ("model kind", lambda d: d["model"].__setitem__("kind", "moe"), "model.kind"),
        ("no device", drop("device"), "device"),
        ("no graphed", drop("graphed"), "graphed"),
        ("empty eager", setkey("eager", []), "eager"),
        ("negative ms", setrow("graphed", 1, "ms", -1.0), "graphed[1].ms"),
        ("nan ms", setrow("eager", 0, "ms", float("nan")), "eager[0].ms"),
        ("bool T", setrow("eager", 2, "T", True), "eager[2].T"),
        ("float ctx", setrow("graphed", 0, "ctx", 1.5), "graphed[0].ctx"),
        ("missing D", lambda d: d["graphed"][3].pop("D"), "graphed[3].D"),
        ("no requests", lambda d: d["eager"][0].update(P=0, D=0), "eager[0].P"),
        ("row type", lambda d: d["eager"].__setitem__(1, [1, 2, 3]), "eager[1]"),
        ("tp", setkey("tp_size", 0), "tp_size"),
        ("torch", setkey("torch", 2.11), "torch"),
    ]


@pytest.mark.parametrize(("label", "mutate", "field"), _mutations(), ids=[m[0] for m in _mutations()])
def test_bad_tables_raise_config_error_naming_file_and_field(tmp_path: Path, label, mutate, field) -> None:
    data = make_table(linear_ms).to_dict()
    mutate(data)
    path = tmp_path / "hostile_inputs" / "bad.json"  # may hold NaN on purpose (conftest's strict check)
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as err:
        CalibratedCostModel.from_file(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_unreadable_tables_raise_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        CalibrationTable.load(tmp_path / "missing.json")
    path = tmp_path / "broken.json"
    path.write_text('{\n "schema": "cgbench.backends.torch_calibration/1",\n "model": ,\n}')
    with pytest.raises(ConfigError, match=r"broken\.json: line 3"):
        CalibrationTable.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="top level"):
        CalibrationTable.load(path)


def test_make_cost_model_calibrated(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    make_table(curved_ms).save(path)
    hybrid, engine = _MODELS["hybrid"], EngineConfig()
    backend = BackendConfig(cost_model="calibrated", calibration=str(path))
    cost = make_cost_model(backend, hybrid, _H100, engine)
    assert isinstance(cost, CalibratedCostModel)
    with pytest.raises(ConfigError, match="backend.calibration"):
        make_cost_model(BackendConfig(cost_model="calibrated"), hybrid, _H100, engine)
    with pytest.raises(ConfigError, match="'hybrid', but model.name is 'transformer'"):
        make_cost_model(BackendConfig(cost_model="calibrated", calibration=str(path)), _MODELS["transformer"],
                        _H100, engine)
    with pytest.raises(ConfigError, match="tp_size"):
        make_cost_model(BackendConfig(cost_model="calibrated", calibration=str(path)), hybrid, _H100,
                        EngineConfig(tp_size=2))
    with pytest.raises(ConfigError, match="backend.cost_model"):
        make_cost_model(BackendConfig(cost_model="oracle"), hybrid, _H100, engine)


def test_sim_path_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, cgbench.backends.sim.cost_model; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_roofline_rejects_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="engine.tp_size"):
        RooflineCostModel(_MODELS["transformer"], _H100, 0)
    with pytest.raises(ConfigError, match="model.layer_pattern"):
        RooflineCostModel(dataclasses.replace(_MODELS["transformer"], layer_pattern="*x"), _H100)
    assert math.isfinite(_COST["hybrid"].step_time(StepWork(1, 1, 0, 1, None)))


def test_documented_example_table_is_valid() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cost-model.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```json\n")[1:]]
    host = [json.loads(b) for b in blocks if "host_calibration/1" in b]
    assert len(host) == 1 and HostCalibration.from_dict(host[0]).host_op_us == 4.08
    block = next(b for b in blocks if CALIBRATION_SCHEMA in b)
    table = CalibrationTable.from_dict(json.loads(block), source="docs/cost-model.md")
    cost = CalibratedCostModel(table)
    assert cost.step_time(StepWork(64, 0, 64, 65536, (64, 0, 64))) == pytest.approx(6.41e-3)
    assert cost.step_time(StepWork(64, 0, 64, 65536, None)) == pytest.approx(8.20e-3)


def _max_formula(cost: RooflineCostModel, work: StepWork) -> float:
    """The roofline step time written with the builtin ``max`` (how it was first written)."""
    gpu, host, sync, tc, aq_tc = cost._shape_part(work)
    if not cost.n_attention:
        return max(gpu + 0.0, host) + sync
    pairs = work.attention_pairs
    if pairs is None:
        pairs = estimate_attention_pairs(work.tokens, work.prefills, work.decodes, work.context_tokens)
    extra = cost.prefill_key_overhead(work) if work.prefills else 0.0
    kv = cost._attn_floor + (cost._attn_kv * (work.context_tokens + tc) + aq_tc)
    attn = max(cost._attn_flop * (pairs + extra), kv)
    return max(gpu + attn, host) + sync


@pytest.mark.slow  # an oracle comparison over 300 random steps
@settings(max_examples=examples(300, stretch=False))
@given(name=st.sampled_from(MODELS + ("mamba_only",)), hw=st.sampled_from(HARDWARE), tp=st.sampled_from([1, 2]),
       padded=st.booleans(), d=st.integers(0, 300), p=st.integers(0, 8), extra=st.integers(0, 4000),
       ctx=st.integers(0, 10**6) | st.sampled_from([0, 1, 2**40]), graphed=st.booleans(),
       pairs=st.none() | st.integers(0, 10**9) | st.sampled_from([0, 2**60]))
def test_step_time_and_stepper_are_the_max_formula_bit_for_bit(name, hw, tp, padded, d, p, extra, ctx, graphed,
                                                               pairs) -> None:
    """``step_time`` and ``stepper`` pick the larger of their terms by comparisons, not ``max`` calls:
    the floats must be ``max``'s, over shapes, devices, tp sizes, graphs, given or estimated pairs, and a
    model without attention layers (where the attention term drops out)."""
    model = (dataclasses.replace(load_model("hybrid"), layer_pattern="M-M-") if name == "mamba_only"
             else load_model(name))
    padding = EagerPadding(16384, 512, tp_size=tp) if padded else None
    cost = RooflineCostModel(model, load_hardware(hw), tp, eager_padding=padding)
    if p == 0 and d == 0:
        d = 1
    tokens = d + (p + extra if p else 0)
    graph = (tokens + 3, p, d) if graphed else None
    work = StepWork(tokens, p, d, ctx + tokens, graph, pairs)
    assert cost.step_time(work) == _max_formula(cost, work)
    if p == 0 and pairs is not None:
        assert cost.stepper(work)(ctx + tokens, pairs) == _max_formula(cost, work)


@pytest.mark.parametrize("preset", ["transformer", "hybrid", "tiny_hybrid"])
def test_decode_stretch_paths_give_step_time_exactly(preset) -> None:
    """The fast engine prices decode stretches through ``stepper`` (one by one) and
    ``decode_stretch_times`` (numpy); both must give ``step_time``'s floats bit for bit."""
    import random

    from cgbench.config.compose import load_config

    cfg = load_config([f"model={preset}"])
    cost = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    rng = random.Random(3)
    for _ in range(100):
        d = rng.randint(1, 256)
        graph = rng.choice([None, (256, 0, 256), (512, 0, 512)])
        base = rng.randint(0, 10**6)
        k = rng.randint(1, 40)
        ref = [cost.step_time(StepWork(d, 0, d, base + d + i * d, graph, base + d + i * d)) for i in range(k)]
        step = cost.stepper(StepWork(d, 0, d, base + d, graph, base + d))
        assert [step(base + d + i * d, base + d + i * d) for i in range(k)] == ref
        assert cost.decode_stretch_times(StepWork(d, 0, d, base + d, graph, base + d), k, d, d).tolist() == ref
