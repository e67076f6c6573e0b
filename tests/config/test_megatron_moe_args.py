"""Megatron's MoE arguments as cgbench's MoE model keys (cgbench.config.megatron_args)."""

from __future__ import annotations

import dataclasses

import pytest

from cgbench.config.compose import load_config
from cgbench.config.megatron_args import NO_EFFECT, NOT_MODELLED, TRANSLATED, rule_of, translate
from cgbench.config.schema import ConfigError

# the model flags of Megatron-LM's examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.sh
NANO = """--moe-token-dispatcher-type allgather --moe-permute-fusion --moe-router-score-function sigmoid
--moe-grouped-gemm --num-experts 128 --moe-router-topk 6 --moe-aux-loss-coeff 1e-4
--moe-router-topk-scaling-factor 2.5 --moe-router-enable-expert-bias --moe-router-dtype fp32
--moe-router-load-balancing-type seq_aux_loss --moe-shared-expert-intermediate-size 3712 --is-hybrid-model
--mamba-num-heads 64 --mamba-head-dim 64 --hybrid-override-pattern MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME
--position-embedding-type none --squared-relu --num-layers 52 --hidden-size 2688 --num-attention-heads 32
--group-query-attention --num-query-groups 2 --ffn-hidden-size 1856 --kv-channels 128 --normalization RMSNorm
--bf16"""
# and of .../conf/Qwen/Qwen3-30B-A3B.sh (without --sequence-parallel, which cgbench does not model)
QWEN = """--bf16 --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope
--normalization RMSNorm --swiglu --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144
--num-attention-heads 32 --group-query-attention --num-query-groups 4 --kv-channels 128 --num-experts 128
--moe-ffn-hidden-size 768 --moe-router-topk 8 --moe-router-dtype fp32 --moe-aux-loss-coeff 1e-3
--moe-token-dispatcher-type alltoall --moe-router-load-balancing-type aux_loss"""


def _differences(overrides: list[str], preset: str) -> dict[str, tuple]:
    got, ref = load_config(overrides).model, load_config([f"model={preset}"]).model
    return {f.name: (getattr(got, f.name), getattr(ref, f.name)) for f in dataclasses.fields(got)
            if getattr(got, f.name) != getattr(ref, f.name)}


def test_nemotron_3_nanos_launch_line_is_the_preset():
    t = translate(NANO)
    t.check()
    assert "model.num_experts=128" in t.overrides and "model.moe_shared_experts=1" in t.overrides
    # the launch line names no vocabulary; the preset's dense FFN width is unread (no '-' layer)
    diff = _differences([*t.overrides, "model.vocab_size=131072"], "nemotron3_nano")
    assert set(diff) == {"name", "ffn_hidden_size"}


def test_qwen3_30b_a3bs_launch_line_is_the_preset():
    t = translate(QWEN)
    t.check()
    assert t.overrides[:3] == ["model.layer_pattern='*E'", "model.pattern_repeat=48", "model.kind=transformer"]
    diff = _differences([*t.overrides, "model.vocab_size=151936"], "qwen3_30b_a3b")
    assert set(diff) == {"name", "ffn_hidden_size"}  # the dense FFN width is unread (no "-" layer)


def test_megatrons_moe_defaults_fill_the_absent_sizes():
    t = translate("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-experts 8 --bf16")
    assert "model.experts_per_token=2" in t.overrides  # --moe-router-topk's default
    assert "model.moe_ffn_hidden_size=256" in t.overrides  # --ffn-hidden-size's default, 4 x hidden
    assert "model.moe_shared_experts=0" in t.overrides


def test_moe_rules():
    assert rule_of("--num-experts").kind == TRANSLATED and rule_of("--moe-router-topk").kind == TRANSLATED
    assert rule_of("--moe-aux-loss-coeff").kind == NO_EFFECT
    assert rule_of("--moe-expert-capacity-factor").kind == NOT_MODELLED
    with pytest.raises(ConfigError, match="'E' layers need --num-experts"):
        translate("--hybrid-layer-pattern M*E --hidden-size 64")
    with pytest.raises(ConfigError, match="--moe-layer-freq is not modelled"):
        translate("--num-layers 4 --hidden-size 64 --num-experts 8 --moe-layer-freq 2").check()
    translate("--num-layers 4 --hidden-size 64 --num-experts 8 --moe-layer-freq 1").check()
