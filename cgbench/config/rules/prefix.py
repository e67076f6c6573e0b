"""``engine.prefix_caching`` and its keys: what prefix caching is modelled with."""

from __future__ import annotations

from typing import Any

from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require

PREFIX_GATES = ("full", "computed")  # full: Megatron 0.19.2's non-chunked candidate; computed: cgbench-only
PREFIX_EVICTIONS = ("lru", "ref_zero")  # Megatron's prefix_caching_eviction_policy (its default: ref_zero)


def check_prefix_caching(cfg: Any) -> None:
    """The rules of ``engine.prefix_caching*`` and ``engine.prefix_gate``."""
    m, e = cfg.model, cfg.engine
    _require(e.prefix_caching_mamba_slots >= 0, "engine.prefix_caching_mamba_slots", "must be >= 0")
    if e.prefix_caching:
        _require(e.ep_size == 1, "engine.prefix_caching", "is modelled on one engine: use engine.ep_size=1")
        _require(e.dp_size == 1, "engine.prefix_caching", "is modelled on one engine (one KV pool): use "
                 "engine.dp_size=1 (engine.dp_routing=prefix_* routes by the trace's block hashes without it)")
        _require(cfg.backend.name == "sim", "engine.prefix_caching", "is simulated only: use backend=sim")
        _require(not (e.batch_invariant and m.kind == "hybrid"), "engine.prefix_caching",
                 "Megatron main's batch-invariant mode does not support Mamba prefix caching (its context "
                 "asserts): use engine.batch_invariant=false or a transformer model")
        _require(not e.handoff_pinning, "engine.prefix_caching",
                 "with engine.handoff_pinning a handed-off request keeps its KV blocks referenced, which is "
                 "not modelled: use engine.handoff_pinning=false")
    else:
        _require(e.prefix_caching_mamba_slots == 0, "engine.prefix_caching_mamba_slots",
                 "needs engine.prefix_caching=true")
    _check_choice(e.prefix_gate, PREFIX_GATES, "engine.prefix_gate")
    _check_choice(e.prefix_caching_eviction, PREFIX_EVICTIONS, "engine.prefix_caching_eviction")
    _require(e.prefix_caching_eviction == "lru" or e.prefix_caching, "engine.prefix_caching_eviction",
             "needs engine.prefix_caching=true")
    _require(e.prefix_gate == "full" or e.prefix_caching, "engine.prefix_gate", "needs engine.prefix_caching=true")
