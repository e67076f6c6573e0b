"""MoE layers ('E') in the roofline model: hand-computed prices, a dense-FFN oracle, invariants, EP
exchanges, memory, presets and the configuration rules (cgbench.backends.sim.moe_cost)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.backends.sim.cost_model import RooflineCostModel
from cgbench.backends.sim.memory import GB, memory_need, parameters
from cgbench.backends.sim.moe_cost import (
    GROUPED_GEMM_TILE_ROWS,
    exchange_values_per_token,
    expected_active_experts,
    padded_rows,
)
from cgbench.cli.guards import check_device_memory
from cgbench.config.compose import load_config
from cgbench.config.schema import BenchConfig, ConfigError, EngineConfig, HardwareConfig, ModelConfig, validate
from cgbench.engine.contract import StepWork
from cgbench.engine.ep import EPEngine
from cgbench.pipeline import build_engine
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import examples

# round rates, no floors: every kernel is FLOPs / 1e12 or bytes / 1e11
ROUND = HardwareConfig(peak_flops=1e12, flops_efficiency=1.0, hbm_bandwidth=1e11, bandwidth_efficiency=1.0,
                       floor_gemm_us=0.0, floor_elementwise_us=0.0, floor_attention_us=0.0, floor_scan_us=0.0,
                       interconnect_bandwidth=1e10, interconnect_latency_us=5.0)
TINY_MOE = ModelConfig(name="tiny_moe", kind="transformer", layer_pattern="E", hidden_size=64, vocab_size=256,
                       dtype_bytes=2, gated_mlp=False, num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32)


def _moe(model: ModelConfig = TINY_MOE, hw: HardwareConfig = ROUND, **kw):
    cost = RooflineCostModel(model, hw, **kw)
    assert cost.moe is not None
    return cost


def test_expected_load_under_uniform_top_k_routing():
    assert expected_active_experts(1, 4, 2) == 2.0  # one token: exactly its k experts
    assert expected_active_experts(2, 4, 2) == 3.0  # 4 * (1 - (1/2)^2)
    assert expected_active_experts(1, 4, 2, ep_size=2) == 1.5  # 2 local experts, 2 tokens system-wide
    assert expected_active_experts(0, 4, 2) == 0.0
    assert expected_active_experts(5, 8, 8) == 8.0  # top-k = all: every expert active
    # every active expert computes at least one whole grouped-GEMM tile (16 rows)
    assert GROUPED_GEMM_TILE_ROWS == 16
    assert padded_rows(2, 2) == 32 and padded_rows(128, 4) == 128 and padded_rows(130, 4) == 130
    assert padded_rows(0, 0) == 0.0


def test_a_one_token_moe_step_priced_by_hand():
    moe = _moe().moe
    # T = 1, E = 4, k = 2: 2 copies, 2 active experts of 1 row each, computed as 2 tiles of 16 rows
    up_flops = 2 * 64 * 32 * 32  # 2·h·f·rows, one matrix (not gated)
    up_bytes = 2 * 64 * 32 * 2 + 2 * (64 + 32) * 2  # 2 experts' weights + the copies in and out
    assert up_flops / 1e12 > up_bytes / 1e11  # the padded tiles make it compute-bound here
    down_flops, down_bytes = 2 * 32 * 64 * 32, 2 * 32 * 64 * 2 + 2 * (32 + 64) * 2
    experts = up_flops / 1e12 + max(down_flops / 1e12, down_bytes / 1e11)
    assert moe.expert_gemm_seconds(1) == pytest.approx(experts, rel=1e-12)
    assert experts == pytest.approx(2.62144e-7, rel=1e-12)
    router = max(2 * 64 * 4 / 1e12, (64 * 4 * 2 + (64 + 4) * 2) / 1e11)  # h x E GEMM: its 512 weight bytes
    elementwise = (64 * 2 + 2 * 64 * 2  # norm
                   + 4 * 2 * 4  # scores written and read (fp32), top-k
                   + (1 + 2) * 64 * 2  # permute: the token in, its 2 copies out
                   + 2 * (32 + 32) * 2  # activation over the copies
                   + (2 + 1) * 64 * 2  # unpermute: the copies in, the token out
                   + 3 * 64 * 2) / 1e11  # residual
    classes = moe.classes(1)
    assert classes["mlp"] == pytest.approx(router + experts, rel=1e-12)
    assert classes["elementwise"] == pytest.approx(elementwise, rel=1e-12)
    assert classes["collectives"] == 0.0  # one rank: no dispatch or combine


def test_a_64_token_step_priced_by_hand():
    moe = _moe().moe
    # 128 copies over all 4 experts (1 - 2^-64 rounds to 1): 32 rows each = 2 whole tiles
    flops = 2 * 64 * 32 * 128
    up_bytes = 4 * 64 * 32 * 2 + 128 * (64 + 32) * 2
    assert moe.expert_gemm_seconds(64) == pytest.approx(2 * max(flops / 1e12, up_bytes / 1e11), rel=1e-12)
    assert moe.expert_gemm_seconds(64) == pytest.approx(1.048576e-6, rel=1e-12)


def test_top_k_equal_to_num_experts_is_a_dense_ffn_of_the_same_total_size():
    """The oracle: 4 experts of width 64, each token routed to all 4, are one dense FFN of width 256:
    the same FLOPs and the same weights read (the routed copies' activations differ: each copy is
    read by its expert)."""
    moe_model = replace(TINY_MOE, num_experts=4, experts_per_token=4, moe_ffn_hidden_size=64, gated_mlp=True)
    dense_model = replace(moe_model, layer_pattern="-", ffn_hidden_size=256)
    moe = _moe(moe_model).moe
    dense = RooflineCostModel(dense_model, ROUND)
    mlp = [k for k in dense.kernels_decode if k.cls == "mlp"]

    def dense_seconds(tokens: int) -> float:
        return sum(k.seconds(tokens, tokens, tokens, 0, 0.0, dense.flops, dense.bandwidth) for k in mlp)

    for tokens in (16, 17, 256, 4095):  # a tile or more per expert: compute-bound FLOPs agree exactly
        assert moe.expert_gemm_seconds(tokens) == pytest.approx(dense_seconds(tokens), rel=1e-12)
    slow_memory = replace(ROUND, hbm_bandwidth=1e9)  # weight-bound: the weights read agree
    moe_mem = _moe(moe_model, slow_memory).moe
    dense_mem = RooflineCostModel(dense_model, slow_memory)
    for tokens in (1, 3):
        d = sum(k.seconds(tokens, tokens, tokens, 0, 0.0, dense_mem.flops, dense_mem.bandwidth) for k in mlp)
        copies_extra = 2 * (4 - 1) * tokens * 64 * 2  # each token's 3 extra copies, into up and out of down
        assert moe_mem.expert_gemm_seconds(tokens) == pytest.approx(d + copies_extra / 1e9, rel=1e-12)
    assert moe.weight_bytes - 4 * 64 * 2 - 64 * 2 == pytest.approx(3 * 64 * 256 * 2)  # experts = the dense FFN


@pytest.mark.parametrize("name", ["qwen3_30b_a3b", "nemotron3_nano"])
@pytest.mark.parametrize("ep,dispatcher", [(1, "nccl"), (4, "te"), (4, "nccl")])
def test_pricing_is_monotone_in_tokens(name, ep, dispatcher):
    cfg = load_config([f"model={name}"])
    cost = RooflineCostModel(cfg.model, cfg.hardware, ep_size=ep, moe_dispatcher=dispatcher)
    assert cost.moe is not None
    previous = {"decode": 0.0, "prefill": 0.0, "moe": 0.0}
    for tokens in [*range(1, 80), 96, 128, 200, 256, 512, 1000, 2048, 4096]:
        decode = cost.step_time(StepWork(tokens, 0, tokens, tokens, (tokens, 0, tokens)))
        prefill = cost.step_time(StepWork(tokens, 1, 0, tokens, (tokens, 1, 0)))
        moe = sum(cost.moe.classes(tokens).values())
        for key, value in (("decode", decode), ("prefill", prefill), ("moe", moe)):
            assert value >= previous[key], (key, tokens)
            previous[key] = value


@pytest.mark.parametrize("name", ["qwen3_30b_a3b", "nemotron3_nano"])
def test_a_graphed_step_never_costs_less_than_its_real_gpu_work(name):
    cfg = load_config([f"model={name}"])
    cost = RooflineCostModel(cfg.model, cfg.hardware, ep_size=4, moe_dispatcher="te")
    for tokens, prefills, decodes, graph in [(1, 0, 1, (8, 0, 8)), (37, 0, 37, (64, 0, 64)),
                                              (300, 1, 20, (512, 1, 32)), (512, 0, 512, (512, 0, 512))]:
        work = StepWork(tokens, prefills, decodes, 4 * tokens, graph)
        real = cost.shape_classes(tokens, prefills, decodes)
        real_gpu = sum(real.values()) + cost.attention_seconds(work, tokens)
        assert cost.step_time(work) >= real_gpu
        assert real["mlp"] > 0 and real["collectives"] > 0


def test_the_ep_exchange_is_zero_at_ep_size_1_and_priced_per_dispatcher():
    cfg = load_config(["model=qwen3_30b_a3b"])
    m, hw = cfg.model, cfg.hardware
    one = RooflineCostModel(m, hw, ep_size=1)
    assert one.breakdown(StepWork(64, 0, 64, 64 * 100, (64, 0, 64)))["collectives"] == 0.0
    assert exchange_values_per_token("nccl", 1, 8) == 0.0 == exchange_values_per_token("te", 1, 8)
    # p = 4, k = 8: the all-gather moves 3 hidden vectors per token, the all-to-all (3/4)·8 = 6
    assert exchange_values_per_token("nccl", 4, 8) == 3.0 == exchange_values_per_token("nvls", 4, 8)
    assert exchange_values_per_token("te", 4, 8) == 6.0
    lat, link = hw.interconnect_latency_us * 1e-6, hw.interconnect_bandwidth
    for dispatcher, values in (("nccl", 3.0), ("te", 6.0)):
        moe = RooflineCostModel(m, hw, ep_size=4, moe_dispatcher=dispatcher).moe
        by_hand = 48 * 2 * (lat + values * 64 * 2048 * 2 / link)  # 48 layers, dispatch + combine
        assert moe.exchange_seconds(64) == pytest.approx(by_hand, rel=1e-12)
    # the exchanges are launched kernels and host ops of their own
    four = RooflineCostModel(m, hw, ep_size=4)
    assert four.kernel_count(0) == one.kernel_count(0) + 48 * 2
    assert four.host_ops_decode > one.host_ops_decode


def test_the_dummy_decode_of_an_idle_ep_rank_is_priced_with_its_moe_layers():
    cfg = load_config(["model=qwen3_30b_a3b", "engine.ep_size=2", "engine.moe_dispatcher=nvls",
                       "engine.max_requests=16", "engine.max_tokens=1024", "engine.max_sequence_length=512",
                       "engine.block_size=16"])
    reqs = [RequestSpec(0, 0.0, 40, 30)]  # one request: the other rank steps dummies throughout
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs))
    state = eng.run()
    assert isinstance(eng, EPEngine) and state.outcome == "completed"
    assert eng.ep_metrics()["dummy_steps"] > 0
    cost = RooflineCostModel(cfg.model, cfg.hardware, ep_size=2, moe_dispatcher="nvls")
    assert cost.moe is not None
    dummy = [t for t in state.trace if t.real == (1, 0, 1) and t.rank == 1]
    assert dummy
    no_moe = RooflineCostModel(replace(cfg.model, layer_pattern="*"), cfg.hardware)
    for t in dummy:  # the lockstep step lasts at least the dummy's price, MoE layers and exchanges included
        price = cost.step_time(StepWork(1, 0, 1, 1, t.graph))
        assert t.dt_s >= price
        assert price > no_moe.step_time(StepWork(1, 0, 1, 1, t.graph))
    assert cost.moe.expert_gemm_seconds(1) > 0 and cost.moe.exchange_seconds(1) > 0


def test_the_memory_guard_counts_every_expert_split_by_ep():
    cfg = load_config(["model=qwen3_30b_a3b"])
    experts = 48 * 128 * 3 * 2048 * 768 * 2 / GB  # every expert's three matrices, bf16
    one = memory_need(cfg).weights_gb
    four = memory_need(replace(cfg, engine=replace(cfg.engine, ep_size=4))).weights_gb
    assert one - four == pytest.approx(experts * 3 / 4, rel=1e-9)
    small = replace(cfg, hardware=replace(cfg.hardware, memory_gb=40.0))
    with pytest.raises(ConfigError, match="hardware.memory_gb"):
        check_device_memory(small)
    check_device_memory(replace(small, engine=replace(small.engine, ep_size=4)))


@pytest.mark.parametrize("name,published", [("qwen3_30b_a3b", 30.5e9), ("nemotron3_nano", 31.6e9)])
def test_the_moe_presets_have_their_published_parameter_counts(name, published):
    cfg = load_config([f"model={name}"])
    total = parameters(cfg) + cfg.model.vocab_size * cfg.model.hidden_size
    assert abs(total / published - 1) < 0.01, total
    layers = cfg.model.layers
    assert (len(layers), layers.count("E")) == ((96, 48) if name == "qwen3_30b_a3b" else (52, 23))


def test_dense_models_price_as_before():
    """No 'E' layer: no MoE part, whatever ep_size and dispatcher (a config's EP scheduling still applies)."""
    cfg = load_config(["model=hybrid"])
    base = RooflineCostModel(cfg.model, cfg.hardware)
    other = RooflineCostModel(cfg.model, cfg.hardware, ep_size=8, moe_dispatcher="te")
    assert base.moe is None and other.moe is None
    work = StepWork(300, 1, 20, 42_000, (512, 1, 32))
    assert base.step_time(work) == other.step_time(work) and base.weight_bytes == other.weight_bytes


def _moe_cfg(**model) -> BenchConfig:
    return BenchConfig(model=replace(TINY_MOE, **model), engine=EngineConfig())


@pytest.mark.parametrize("model,engine,needle", [
    ({"num_experts": 0}, {}, "model.num_experts"),
    ({"experts_per_token": 5}, {}, "model.experts_per_token: must be <= model.num_experts (4)"),
    ({"moe_ffn_hidden_size": 0}, {}, "model.moe_ffn_hidden_size"),
    ({"moe_shared_experts": 1}, {}, "model.moe_shared_expert_ffn_hidden_size"),
    ({}, {"ep_size": 3}, "engine.ep_size: must divide model.num_experts (4)"),
    ({"moe_padded_routing": "random"}, {}, "model.moe_padded_routing: 'random' is not one of shared, spread"),
])
def test_moe_keys_are_validated(model, engine, needle):
    cfg = _moe_cfg(**model)
    cfg = replace(cfg, engine=replace(cfg.engine, **engine))
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert needle in str(err.value)


def test_moe_layers_are_refused_on_the_torch_backend():
    cfg = _moe_cfg()
    with pytest.raises(ConfigError, match="simulated only"):
        validate(replace(cfg, backend=replace(cfg.backend, name="torch")))


def test_moe_keys_typed_for_a_dense_model_are_refused():
    with pytest.raises(ConfigError, match="model.num_experts.*without an 'E'"):
        load_config(["model=hybrid", "model.num_experts=8"])
    assert load_config(["model=qwen3_30b_a3b", "model.num_experts=64"]).model.num_experts == 64


def test_padded_tokens_share_one_set_of_experts_by_default():
    """Megatron zero-fills the padded input ids, so every padded token routes to the same k experts."""
    shared = _moe().moe
    spread = _moe(replace(TINY_MOE, moe_padded_routing="spread")).moe
    # 4 computed tokens, 1 real: the real token's 2 experts, plus the padding's 2 (each already active
    # with probability 2/4): 3 expected; 8 copies over them, one 16-row tile each
    assert shared.routed(4, 1) == (8.0, 3.0, 48.0)
    assert spread.routed(4, 1) == (8.0, 3.75, 60.0)  # 4 · (1 - (1/2)^4): like 4 real tokens
    assert shared.routed(4, 4) == spread.routed(4, 4) == spread.routed(4)
    cfg = load_config(["model=qwen3_30b_a3b"])
    assert cfg.model.moe_padded_routing == "shared"
    cost = RooflineCostModel(cfg.model, cfg.hardware)
    # one real decode token on a 64-token graph reads at most 16 experts per layer, not ~126
    _, active, _ = cost.moe.routed(64, 1)
    assert active == pytest.approx(8 + 8 * (1 - 8 / 128))
    one = cost.step_time(StepWork(1, 0, 1, 1024, (64, 0, 64)))
    full = cost.step_time(StepWork(64, 0, 64, 64 * 1024, (64, 0, 64)))
    assert one < full / 2
    spread_cost = RooflineCostModel(replace(cfg.model, moe_padded_routing="spread"), cfg.hardware)
    assert spread_cost.step_time(StepWork(1, 0, 1, 1024, (64, 0, 64))) > 2 * one


def test_a_graphed_step_is_priced_by_its_real_tokens_too_and_monotone_in_them():
    cfg = load_config(["model=nemotron3_nano"])
    cost = RooflineCostModel(cfg.model, cfg.hardware, ep_size=2, moe_dispatcher="nvls")
    graph = (128, 0, 128)
    prices = [cost.step_time(StepWork(t, 0, t, t, graph)) for t in range(1, 129)]
    assert all(b >= a for a, b in zip(prices, prices[1:], strict=False)) and prices[-1] > prices[0]
    # the same floats from every path: step_time, stepper, breakdown
    for t in (1, 50, 128):
        work = StepWork(t, 0, t, t, graph)
        assert cost.stepper(work)(t, t) == cost.step_time(StepWork(t, 0, t, t, graph, t))
        assert sum(cost.breakdown(work).values()) == pytest.approx(cost.step_time(work), rel=1e-12)


@st.composite
def _moe_setups(draw):
    experts = draw(st.sampled_from([4, 8, 16, 64, 128]))
    model = replace(TINY_MOE, num_experts=experts, experts_per_token=draw(st.integers(1, min(experts, 8))),
                    moe_ffn_hidden_size=draw(st.sampled_from([16, 64, 768])),
                    moe_shared_experts=draw(st.integers(0, 2)), moe_shared_expert_ffn_hidden_size=64,
                    gated_mlp=draw(st.booleans()), moe_padded_routing=draw(st.sampled_from(["shared", "spread"])))
    ep = draw(st.sampled_from([p for p in (1, 2, 4, 8) if experts % p == 0]))
    cost = RooflineCostModel(model, HardwareConfig(), ep_size=ep,
                             moe_dispatcher=draw(st.sampled_from(["nccl", "nvls", "te"])))
    return cost, draw(st.integers(1, 4096)), draw(st.integers(1, 4096))


@settings(max_examples=examples(60), deadline=None)
@given(_moe_setups())
def test_moe_prices_never_fall_as_tokens_or_padding_grow(setup):
    cost, a, b = setup
    moe = cost.moe
    lo, hi = min(a, b), max(a, b)
    assert sum(moe.classes(lo).values()) <= sum(moe.classes(hi).values())
    # more padding on the same real tokens, or more real tokens in the same computed shape: never cheaper
    assert sum(moe.classes(lo, 1).values()) <= sum(moe.classes(hi, 1).values())
    assert sum(moe.classes(hi, 1).values()) <= sum(moe.classes(hi, lo).values()) <= sum(moe.classes(hi).values())
    assert (moe.exchange_seconds(lo) == 0.0) == (moe.ep_size == 1)


def test_qwen3_30b_a3bs_weights_are_its_checkpoints_bytes():
    """The published bf16 checkpoint holds 61,064,216,576 bytes of weights (its safetensors headers, as
    read by llm-cal for Qwen/Qwen3-30B-A3B); the memory guard's count (every expert, the input embedding
    included) agrees to a few kB (the QK norms it does not price)."""
    cfg = load_config(["model=qwen3_30b_a3b"])
    weights = (parameters(cfg) + cfg.model.vocab_size * cfg.model.hidden_size) * cfg.model.dtype_bytes
    assert abs(weights - 61_064_216_576) < 32_768
