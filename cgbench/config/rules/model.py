"""``model.*``: the layer pattern, the sizes, the Mamba and MoE keys."""

from __future__ import annotations

from typing import Any

from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require

MODEL_KINDS = ("transformer", "hybrid")
LAYER_SYMBOLS = "M*-E"  # Mamba-2, attention, MLP, MoE (Megatron's hybrid layer symbols)
MOE_KEYS = ("num_experts", "experts_per_token", "moe_ffn_hidden_size", "moe_shared_experts",
            "moe_shared_expert_ffn_hidden_size", "moe_padded_routing")
MOE_PADDED_ROUTING = ("shared", "spread")


def check_model(cfg: Any) -> None:
    """The rules of ``cfg.model`` (a ``BenchConfig``'s), MoE's with ``engine.ep_size`` and the backend."""
    m, e = cfg.model, cfg.engine
    _check_choice(m.kind, MODEL_KINDS, "model.kind")
    _require(len(m.layers) >= 1 and set(m.layers) <= set(LAYER_SYMBOLS), "model.layer_pattern",
             f"must be a non-empty string of 'M', '*', '-', 'E', got {m.layer_pattern!r}")
    _require(m.pattern_repeat >= 1, "model.pattern_repeat", "must be >= 1")
    padded_slot_fraction(m.padded_slot_cost)
    if m.kind == "hybrid":
        _require("M" in m.layers, "model.layer_pattern", "a hybrid model needs at least one 'M' layer")
    for key in ("hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                "vocab_size", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim",
                "mamba_num_groups", "mamba_conv_kernel", "dtype_bytes"):
        _require(getattr(m, key) >= 1, f"model.{key}", f"must be >= 1, got {getattr(m, key)}")
    _require(m.num_attention_heads % m.num_kv_heads == 0, "model.num_kv_heads",
             "must divide model.num_attention_heads")
    if "*" in m.layers:
        _require(m.head_dim % 2 == 0, "model.head_dim", f"must be even (rotary embedding), got {m.head_dim}")
    if "M" in m.layers:
        _require(m.mamba_num_heads % m.mamba_num_groups == 0, "model.mamba_num_groups",
                 f"must divide model.mamba_num_heads ({m.mamba_num_heads}), got {m.mamba_num_groups}")
        _require(m.mamba_conv_kernel >= 2, "model.mamba_conv_kernel", f"must be >= 2, got {m.mamba_conv_kernel}")
    if "E" in m.layers:
        check_moe(m, e.ep_size, cfg.backend.name)


def padded_slot_fraction(value: str) -> float | None:
    """``model.padded_slot_cost`` as a fraction of a slot's state traffic, None for ``shared``."""
    if value == "full":
        return 1.0
    if value == "shared":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = -1.0
    _require(0.0 <= f <= 1.0, "model.padded_slot_cost", f"must be full, shared or a fraction in [0, 1], got {value!r}")
    return f


def check_moe(m: Any, ep_size: int, backend: str) -> None:
    """The MoE keys of a model with 'E' layers (``ep_size`` must split the experts evenly, as Megatron
    requires)."""
    for key in ("num_experts", "experts_per_token", "moe_ffn_hidden_size"):
        _require(getattr(m, key) >= 1, f"model.{key}", f"must be >= 1 for a model with 'E' (MoE) layers, "
                 f"got {getattr(m, key)}")
    _require(m.experts_per_token <= m.num_experts, "model.experts_per_token",
             f"must be <= model.num_experts ({m.num_experts}), got {m.experts_per_token}")
    _require(m.moe_shared_experts >= 0, "model.moe_shared_experts", f"must be >= 0, got {m.moe_shared_experts}")
    if m.moe_shared_experts > 0:
        _require(m.moe_shared_expert_ffn_hidden_size >= 1, "model.moe_shared_expert_ffn_hidden_size",
                 f"must be >= 1 with model.moe_shared_experts={m.moe_shared_experts}, "
                 f"got {m.moe_shared_expert_ffn_hidden_size}")
    _check_choice(m.moe_padded_routing, MOE_PADDED_ROUTING, "model.moe_padded_routing")
    _require(m.num_experts % ep_size == 0, "engine.ep_size",
             f"must divide model.num_experts ({m.num_experts}), got {ep_size}")
    _require(backend == "sim", "model.layer_pattern",
             "MoE ('E') layers are simulated only: use backend=sim")
