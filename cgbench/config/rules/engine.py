"""``engine.*``: the limits, the KV rules, handoff pinning, batch-invariant mode, expert and data
parallelism, and the step's room for speculative tokens."""

from __future__ import annotations

from typing import Any

from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require
from cgbench.config.rules.speculative import check_spec_acceptance

KV_CORNERS = ("megatron", "safe")
MEGATRON_RULES = ("0.19.2", "main")  # engine.megatron_rules: the rule sets of cgbench/engine/kv_rules.py
MOE_DISPATCHERS = ("nccl", "nvls", "te")
EP_ROUTINGS = ("least_loaded", "round_robin")
DP_ROUTINGS = ("least_loaded", "round_robin", "prefix_first_block", "prefix_longest")  # engine/router.py


def check_engine(cfg: Any) -> None:
    """The rules of ``cfg.engine`` but prefix caching's (``rules.prefix``)."""
    m, e = cfg.model, cfg.engine
    for key in ("max_requests", "max_tokens", "max_sequence_length", "block_size", "tp_size"):
        _require(getattr(e, key) >= 1, f"engine.{key}", f"must be >= 1, got {getattr(e, key)}")
    _require(e.kv_blocks >= 0, "engine.kv_blocks", f"must be >= 0 (0 = auto), got {e.kv_blocks}")
    _require(e.paused_blocks >= 0, "engine.paused_blocks", f"must be >= 0, got {e.paused_blocks}")
    _check_choice(e.kv_corners, KV_CORNERS, "engine.kv_corners")
    _check_choice(e.megatron_rules, MEGATRON_RULES, "engine.megatron_rules")
    if e.handoff_pinning:
        _require(e.megatron_rules == "main", "engine.handoff_pinning",
                 "hybrid SSM state handoff pinning is Megatron main's (#6584): set engine.megatron_rules=main; "
                 "megatron-core 0.19.2 has no such pinning")
        _require(m.kind == "hybrid", "engine.handoff_pinning",
                 "only a hybrid model's Mamba slot pinning is modelled: use a hybrid model")
    if e.batch_invariant:
        _require(e.megatron_rules == "main", "engine.batch_invariant",
                 "batch-invariant mode is Megatron main's (#4871, #6521): set engine.megatron_rules=main; "
                 "megatron-core 0.19.2 has no such mode")
        if m.kind == "hybrid":  # dynamic_context.py at d98e8a64 asserts these for a hybrid model
            _require(e.num_speculative_tokens == 0, "engine.batch_invariant",
                     "batch-invariant mode for a hybrid model supports one-token decode only: "
                     "set engine.num_speculative_tokens=0")
            _require(not e.chunked_prefill or e.max_tokens > e.ssm_chunk_alignment, "engine.batch_invariant",
                     f"batch-invariant SSM chunked prefill needs engine.max_tokens ({e.max_tokens}) > "
                     f"engine.ssm_chunk_alignment ({e.ssm_chunk_alignment})")
    _require(e.ep_size >= 1, "engine.ep_size", f"must be >= 1, got {e.ep_size}")
    _check_choice(e.moe_dispatcher, MOE_DISPATCHERS, "engine.moe_dispatcher")
    _check_choice(e.ep_routing, EP_ROUTINGS, "engine.ep_routing")
    _require(e.ep_size == 1 or cfg.backend.name == "sim", "engine.ep_size",
             "expert parallelism is simulated only: use backend=sim with engine.ep_size > 1")
    check_data_parallel(cfg)
    _require(e.num_speculative_tokens >= 0, "engine.num_speculative_tokens", "must be >= 0")
    _require(e.max_tokens >= e.max_requests, "engine.max_tokens",
             f"must be >= engine.max_requests ({e.max_requests}), got {e.max_tokens}")
    _require(e.max_requests % e.tp_size == 0, "engine.max_requests",
             f"must be a multiple of engine.tp_size ({e.tp_size}), got {e.max_requests}")
    _require(e.max_tokens >= e.max_requests * (e.num_speculative_tokens + 1), "engine.max_tokens",
             "must hold one step of every request: >= max_requests * (num_speculative_tokens + 1)")
    check_spec_acceptance(e)
    _require(e.token_rounder >= 1 and e.request_rounder >= 1, "engine.token_rounder",
             "rounders must be >= 1")
    _require(e.stall_steps >= 0, "engine.stall_steps", "must be >= 0 (0 = auto)")


def check_data_parallel(cfg: Any) -> None:
    """``engine.dp_size`` and its routing (docs/data-parallel.md)."""
    e = cfg.engine
    _require(e.dp_size >= 1, "engine.dp_size", f"must be >= 1, got {e.dp_size}")
    _check_choice(e.dp_routing, DP_ROUTINGS, "engine.dp_routing")
    _require(0.0 <= e.dp_routing_alpha <= 1.0, "engine.dp_routing_alpha",
             f"must be in [0, 1], got {e.dp_routing_alpha}")
    if e.dp_size == 1:
        return
    _require(cfg.backend.name == "sim", "engine.dp_size",
             "data parallelism is simulated only: use backend=sim with engine.dp_size > 1")
    if e.ep_size > 1:  # the EP ranks are DP ranks: each EP group is ep_size of them, in lockstep
        _require(e.dp_size % e.ep_size == 0, "engine.dp_size",
                 f"must be a multiple of engine.ep_size ({e.ep_size}): the expert-parallel ranks are "
                 f"data-parallel ranks, got {e.dp_size}")
    if e.dp_routing.startswith("prefix_"):
        _require(bool(cfg.workload.trace), "engine.dp_routing",
                 f"{e.dp_routing} routes on the requests' prefix-block hashes, which only a trace with "
                 "them (Mooncake's hash_ids) carries: use a workload.trace, or least_loaded")
