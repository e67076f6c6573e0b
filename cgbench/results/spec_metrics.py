"""The ``spec`` block of a result's metrics (``engine.num_speculative_tokens`` > 0): what speculative
decoding's drafts gave (docs/speculative.md).

A decode row-step proposes ``S`` drafts and accepts ``a`` of them (``cgbench.engine.acceptance``);
it emits ``1 + a`` tokens, fewer on a request's last step (clamped to its output). The acceptance
rate is Megatron's ``inference/spec_decode_acceptance_rate`` (accepted drafts / proposed drafts over
decode row-steps, before the clamp); tokens per step are the decode tokens actually emitted per
decode row-step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cgbench.config.schema import EngineConfig
from cgbench.engine.acceptance import AcceptanceModel
from cgbench.engine.stats import StepStats


def _round(x: float) -> float:
    return round(x, 6)


def spec_metrics(e: EngineConfig, stats: StepStats, output_tokens: int,
                 models: Sequence[AcceptanceModel | None], dummy_steps: int, step_engine: str) -> dict[str, Any]:
    """``models``: each (rank's) engine's acceptance model (None: every draft accepted); ``dummy_steps``:
    an EP run's dummy decode rank-steps (they step no row)."""
    spec = e.num_speculative_tokens
    rows = stats.decode_rows - dummy_steps
    stochastic = [m for m in models if m is not None]
    accepted = sum(m.accepted for m in stochastic) if stochastic else spec * rows
    proposed = spec * rows
    decode_tokens = output_tokens - stats.prefill_emitted
    expected = 1.0 + (stochastic[0].mean_accepted if stochastic else spec)
    sa = e.spec_acceptance
    return {
        "num_speculative_tokens": spec,
        "acceptance_model": "per_position" if sa.per_position else "lengths" if sa.lengths else "all_accepted",
        "step_engine": step_engine,
        "decode_row_steps": rows,
        "drafts_proposed": proposed,
        "drafts_accepted": accepted,
        "acceptance_rate": _round(accepted / proposed) if proposed else 0.0,
        "decode_tokens": decode_tokens,
        "tokens_per_step": _round(decode_tokens / rows) if rows else 0.0,
        "expected_tokens_per_step": _round(expected),
    }
