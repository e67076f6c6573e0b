"""Batch shapes and Megatron's matching rules.

``BatchShape`` is Megatron's ``InferenceBatchDimensions``: a ``(T, P, D)`` record (tokens, prefill
requests, decode requests) ordered lexicographically. ``match`` is ``match_graph_config`` without
expert parallelism: the minimum over applicable graphs. ``find_cg_chunk_size`` is
``_find_cg_chunk_size``: the first applicable graph in the list's stored order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

CUDA_GRAPH_ROUNDER = 2  # Megatron's rounder since PR #3509 (was 8)

# Miss reasons returned by Grid.lookup (stable strings: they are metric keys).
NO_GRAPHS = "no_graphs"
DECODE_ONLY_OVER_MAX = "decode_only_over_max"
NO_MIXED_GRAPHS = "no_mixed_graphs"
TOKENS_OVER_MAX = "tokens_over_max"
SHAPE = "shape"
MISS_REASONS = (NO_GRAPHS, DECODE_ONLY_OVER_MAX, NO_MIXED_GRAPHS, TOKENS_OVER_MAX, SHAPE)


@dataclass(frozen=True, order=True, slots=True)
class BatchShape:
    """One step's (or one captured graph's) shape: tokens, prefill requests, decode requests."""

    token_count: int = 0  # T
    prefill_req_count: int = 0  # P
    decode_req_count: int = 0  # D

    def __iter__(self) -> Iterator[int]:
        yield self.token_count
        yield self.prefill_req_count
        yield self.decode_req_count

    def __str__(self) -> str:
        return f"[{self.token_count}]: {self.prefill_req_count} P + {self.decode_req_count} D"

    @property
    def req_count(self) -> int:
        return self.prefill_req_count + self.decode_req_count

    def is_valid(self, max_requests: int, max_sequence_length: int, num_speculative_tokens: int = 0) -> bool:
        """Megatron's filter for generated graphs (docs/design.md §1, validity)."""
        return validity_error(self, max_requests, max_sequence_length, num_speculative_tokens) is None

    def is_applicable_for_batch_dim(self, real: BatchShape, strict: bool) -> bool:
        """Can this captured graph serve the real batch ``real``? (docs/design.md §1)"""
        return applicable(self, real, strict)


def validity_error(g: BatchShape, max_requests: int, max_sequence_length: int,
                   num_speculative_tokens: int = 0) -> str | None:
    """The first validity rule ``g`` breaks, in words, or None when it is valid."""
    T, P, D = g.token_count, g.prefill_req_count, g.decode_req_count
    q = num_speculative_tokens + 1
    if T <= 0:
        return f"T must be > 0, got {T}"
    if P < 0 or D < 0:
        return f"P and D must be >= 0, got P={P}, D={D}"
    if P + D > max_requests:
        return f"P + D = {P + D} exceeds max_requests ({max_requests})"
    if T < P + D * q:
        return f"T = {T} is below P + D*(1+spec) = {P + D * q} (one token per prefill, 1+spec per decode)"
    if T > P * max_sequence_length + D * q:
        return (f"T = {T} exceeds P*max_sequence_length + D*(1+spec) = {P * max_sequence_length + D * q} "
                "(each prefill contributes at most max_sequence_length tokens)")
    return None


def applicable(graph: BatchShape, real: BatchShape, strict: bool) -> bool:
    """Megatron's ``is_applicable_for_batch_dim(self=graph, real, strict)``."""
    gT, gP, gD = graph.token_count, graph.prefill_req_count, graph.decode_req_count
    rT, rP, rD = real.token_count, real.prefill_req_count, real.decode_req_count
    if rP == 0:  # decode-only real batch: only decode-only graphs, strictness ignored
        return gP == 0 and gT >= rT and gD >= rD
    if strict:
        return gT >= rT and gP >= rP and gD >= rD
    return gT >= rT and gP >= rP and gP + gD >= rP + rD


def match(real: BatchShape, graphs: Sequence[BatchShape], strict: bool) -> BatchShape | None:
    """``match_graph_config`` without EP: the smallest ``(T, P, D)`` among applicable graphs."""
    cands = [g for g in graphs if applicable(g, real, strict)]
    return min(cands) if cands else None


def find_cg_chunk_size(graphs: Sequence[BatchShape], active_tokens: int, prefill: int, decode: int,
                       max_chunk: int, strict: bool) -> int | None:
    """Megatron's ``_find_cg_chunk_size``: walk the list in STORED order and return the first
    ``g.T - active_tokens`` in ``[1, max_chunk]`` whose graph serves ``(g.T, prefill+1, decode)``."""
    for g in graphs:
        chunk = g.token_count - active_tokens
        if chunk < 1 or chunk > max_chunk:
            continue
        if applicable(g, BatchShape(g.token_count, prefill + 1, decode), strict):
            return chunk
    return None


# ---------------------------------------------------------------------------------------------
# Token sizes (docs/design.md §2)


def kind_of(g: BatchShape) -> str:
    if g.prefill_req_count == 0:
        return "decode-only"
    if g.decode_req_count == 0:
        return "prefill-only"
    return "mixed"
