"""``Grid``: a captured-graph list in stored order, indexed so the engine can match every step cheaply."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from cgbench.grids.shapes import (
    DECODE_ONLY_OVER_MAX,
    NO_GRAPHS,
    NO_MIXED_GRAPHS,
    SHAPE,
    TOKENS_OVER_MAX,
    BatchShape,
    kind_of,
)

_CACHE_LIMIT = 1 << 18


@dataclass(slots=True, eq=False)
class Grid:
    """A captured-graph list in stored order, with an index for fast matching.

    ``lookup`` returns exactly what ``match`` returns (Megatron's min over applicable graphs),
    plus a reason on a miss. ``exact_decode`` grids (TRT-LLM / SGLang without padding) need a
    decode-only graph with exactly the real decode count."""

    name: str
    graphs: Sequence[BatchShape]  # kept as a tuple
    strict: bool
    exact_decode: bool = False
    token_counts: list[int] | None = field(init=False)
    non_decode: bool = field(init=False)
    _decode: list[BatchShape] = field(init=False, repr=False)  # decode-only graphs, sorted
    _decode_T: list[int] = field(init=False, repr=False)
    _mixed: list[BatchShape] = field(init=False, repr=False)  # graphs with P > 0, sorted
    _mixed_T: list[int] = field(init=False, repr=False)
    _stored: tuple[tuple[int, int, int], ...] = field(init=False, repr=False)
    _cache: dict = field(init=False, repr=False)
    _chunk_cache: dict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.graphs = tuple(self.graphs)
        self.token_counts = sorted({g.token_count for g in self.graphs}, reverse=True) or None
        self._decode = sorted(g for g in self.graphs if g.prefill_req_count == 0)
        self._decode_T = [g.token_count for g in self._decode]
        self._mixed = sorted(g for g in self.graphs if g.prefill_req_count > 0)
        self._mixed_T = [g.token_count for g in self._mixed]
        self.non_decode = bool(self._mixed)
        self._stored = tuple((g.token_count, g.prefill_req_count, g.decode_req_count) for g in self.graphs)
        self._cache = {}
        self._chunk_cache = {}

    def __len__(self) -> int:
        return len(self.graphs)

    @staticmethod
    def kind_of(g: BatchShape) -> str:
        return kind_of(g)

    def lookup(self, T: int, P: int, D: int) -> tuple[BatchShape | None, str | None]:
        """The graph a real step ``(T, P, D)`` replays, or ``(None, reason)`` when it runs eager."""
        key = (T, P, D)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._lookup_uncached(T, P, D)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _lookup_uncached(self, T: int, P: int, D: int) -> tuple[BatchShape | None, str | None]:
        if not self.graphs:
            return None, NO_GRAPHS
        if P == 0:
            dec = self._decode
            padded_ok = False
            for i in range(bisect_left(self._decode_T, T), len(dec)):
                g = dec[i]
                if g.decode_req_count >= D:
                    if not self.exact_decode or g.decode_req_count == D:
                        return g, None
                    padded_ok = True
            return None, (SHAPE if padded_ok else DECODE_ONLY_OVER_MAX)
        mixed = self._mixed
        if not mixed:
            return None, NO_MIXED_GRAPHS
        i = bisect_left(self._mixed_T, T)
        if i == len(mixed):
            return None, TOKENS_OVER_MAX
        strict = self.strict
        S = P + D
        for j in range(i, len(mixed)):
            g = mixed[j]
            gP = g.prefill_req_count
            if gP >= P and (g.decode_req_count >= D if strict else gP + g.decode_req_count >= S):
                return g, None
        return None, SHAPE

    def match(self, real: BatchShape) -> BatchShape | None:
        return self.lookup(real.token_count, real.prefill_req_count, real.decode_req_count)[0]

    def find_chunk_size(self, active_tokens: int, prefill: int, decode: int, max_chunk: int) -> int | None:
        """``_find_cg_chunk_size`` on this grid: first graph in stored order (docs/design.md §6.3)."""
        ts = self._chunk_cache.get((prefill, decode))
        if ts is None:
            # Which graphs serve (g.T, prefill+1, decode) does not depend on the active tokens.
            p, strict = prefill + 1, self.strict
            ts = tuple(gT for gT, gP, gD in self._stored
                       if gP >= p and (gD >= decode if strict else gP + gD >= p + decode))
            if len(self._chunk_cache) >= _CACHE_LIMIT:
                self._chunk_cache.clear()
            self._chunk_cache[(prefill, decode)] = ts
        for t in ts:
            chunk = t - active_tokens
            if 1 <= chunk <= max_chunk:
                return chunk
        return None

    def counts_by_kind(self) -> dict[str, int]:
        counts = {"mixed": 0, "prefill-only": 0, "decode-only": 0}
        for g in self.graphs:
            counts[kind_of(g)] += 1
        return counts

