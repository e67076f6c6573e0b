"""The ``prefix_cache`` block of a result's metrics (``engine.prefix_caching`` only)."""

from __future__ import annotations

from cgbench.engine.prefix_cache import PrefixCounters


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def prefix_metrics(c: PrefixCounters, full_size_deferrals: int) -> dict[str, float | int]:
    """The registry's ``prefix_cache.*`` metrics from the cache's counters and the scheduler's count of
    deferrals the full-size non-chunked candidate caused."""
    span = c.prefill_skipped_tokens + c.prefill_computed_tokens
    return {
        "block_hit_rate": _ratio(c.blocks_matched, c.blocks_matched + c.registered_blocks),
        "token_hit_rate": _ratio(c.prefill_skipped_tokens, span),
        "saved_prefill_tokens": c.prefill_skipped_tokens,
        "computed_prefill_tokens": c.prefill_computed_tokens,
        "hits": c.hits,
        "blocks_matched": c.blocks_matched,
        "computed_tokens_per_prefill": _ratio(c.prefill_computed_tokens, c.admissions),
        "span_tokens_per_prefill": _ratio(span, c.admissions),
        "coordination_waits": c.coordination_waits,
        "full_size_deferrals": full_size_deferrals,
        "evicted_blocks": c.evicted_blocks,
    }
