"""Speculative decoding's acceptance: how many of a decode step's drafts the target model accepts.

A decode row of a step with ``S = engine.num_speculative_tokens`` feeds ``1 + S`` tokens: the last
sampled token and ``S`` drafts (Megatron's MTP heads). The target model verifies the drafts left to
right and accepts the longest matching prefix, ``a`` of them (0 <= a <= S); the step then emits
``1 + a`` tokens (the accepted drafts and the token it samples after them) and keeps ``1 + a`` tokens
of KV: Megatron's ``rewind_kv_cache`` (``text_generation_controllers/mtp_utils_pytorch.py``) moves
the request's KV offsets back by the ``S - a`` rejected drafts and releases the last KV block when
the rewind crosses back into the block before it, before ``update_requests`` runs its pause rule.

``AcceptanceModel`` draws ``a`` from a distribution over 0..S (``engine.spec_acceptance``: the
per-position acceptance probabilities, or an empirical distribution of accepted lengths). A draw is
a counter-based hash of (run seed, request id, tokens the request had emitted before the step): it
does not depend on the order rows are stepped in, on other requests, or on which engine runs, so the
same config and seed give the same accepted lengths under every schedule. ``acceptance_model``
returns None when every draft is always accepted: that is the engine's behaviour without a model.
"""

from __future__ import annotations

from collections.abc import Sequence

from cgbench.config.schema import EngineConfig

_MASK = (1 << 64) - 1
_UNIT = float(1 << 53)


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit integers whose outputs look independent."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, request_id: int, emitted: int) -> float:
    """A uniform draw in [0, 1) for the decode step of ``request_id`` that starts after ``emitted``
    tokens, under run seed ``seed``."""
    h = _mix(_mix(_mix(seed & _MASK) ^ (request_id & _MASK)) ^ (emitted & _MASK))
    return (h >> 11) / _UNIT


def length_distribution(per_position: Sequence[float], lengths: Sequence[float], spec: int) -> list[float]:
    """P(a = 0), ..., P(a = spec): from ``per_position`` (p_k, draft k accepted given drafts 1..k-1
    were: P(a = k) = p_1 ... p_k (1 - p_{k+1})), or ``lengths`` (weights, normalised), or, with
    neither, every draft accepted."""
    if per_position:
        out, reach = [], 1.0  # reach: P(a >= k)
        for p in per_position:
            out.append(reach * (1.0 - p))
            reach *= p
        out.append(reach)
        return out
    if lengths:
        total = float(sum(lengths))
        return [w / total for w in lengths]
    return [0.0] * spec + [1.0]


class AcceptanceModel:
    """Draws a decode row's accepted draft count, and counts what it drew."""

    __slots__ = ("seed", "spec", "cdf", "draws", "accepted")

    def __init__(self, distribution: Sequence[float], seed: int) -> None:
        self.seed = seed
        self.spec = len(distribution) - 1
        cdf, cum = [], 0.0
        for w in distribution:
            cum += w
            cdf.append(cum)
        cdf[-1] = 2.0  # every u in [0, 1) lands at or before the last length
        self.cdf = cdf
        self.draws = 0  # decode row-steps drawn (each proposes ``spec`` drafts)
        self.accepted = 0  # drafts accepted over those draws

    def draw(self, request_id: int, emitted: int) -> int:
        """The drafts accepted in the decode step of ``request_id`` that follows ``emitted`` tokens."""
        u = uniform(self.seed, request_id, emitted)
        a = 0
        cdf = self.cdf
        while u >= cdf[a]:
            a += 1
        self.draws += 1
        self.accepted += a
        return a

    @property
    def mean_accepted(self) -> float:
        """The distribution's mean accepted length (drafts per decode step)."""
        prev, mean = 0.0, 0.0
        for a, c in enumerate(self.cdf):
            mean += a * (min(c, 1.0) - prev)
            prev = min(c, 1.0)
        return mean


def acceptance_model(e: EngineConfig, seed: int) -> AcceptanceModel | None:
    """``e.spec_acceptance`` as a model seeded with the run's ``seed``; None when every draft is always
    accepted (no speculation, no acceptance model, or one that gives all of its mass to ``S``)."""
    spec = e.num_speculative_tokens
    sa = e.spec_acceptance
    if spec == 0 or not (sa.per_position or sa.lengths):
        return None
    dist = length_distribution(sa.per_position, sa.lengths, spec)
    if all(w == 0.0 for w in dist[:-1]):
        return None
    return AcceptanceModel(dist, seed)


def needs_step_engine(e: EngineConfig) -> bool:
    """Whether ``e``'s acceptance is stochastic: rows then progress by a different number of tokens
    each step, which the event-proportional engine's anchored rows cannot express, so the run uses the
    step-by-step ``Engine`` (as a plug-in policy's own object does)."""
    return acceptance_model(e, 0) is not None
