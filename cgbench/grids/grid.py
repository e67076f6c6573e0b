"""Batch shapes, Megatron's captured-graph generator, and the matcher.

Everything here reproduces Megatron-LM's ``batch_dimensions_utils`` behaviour at the #4870 merge
(``ef549a6``, identical in megatron-core 0.19.2) as specified in
``reference/megatron-cg-semantics.md`` sections 1-3 and 6.2:

* ``BatchShape`` is ``InferenceBatchDimensions``: a ``(T, P, D)`` record ordered lexicographically.
* ``megatron_grid`` is ``generate_cuda_graph_batch_dimensions_list`` (EXPONENTIAL and LINEAR token
  sizes, the geometric P-grid, the validity rule, tp and speculative tokens), list order included.
* ``match`` is ``match_graph_config`` without EP: the minimum over applicable graphs.
* ``find_cg_chunk_size`` is ``_find_cg_chunk_size``: the first applicable graph in STORED order.

``Grid`` wraps a stored list with an index so that the engine can match every step cheaply, and
``build_grid`` turns the ``cg`` config group into a ``Grid`` (peers' grids live in ``peer_grids``).

The only non-Megatron part is ``sizes_per_octave`` / ``p_per_octave`` (used by ``cg=dense``), see
``_densify_sizes`` and ``_densify_p_grid``; with both at 1 the output is exactly Megatron's.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from cgbench.config.schema import CGConfig, ConfigError, EngineConfig, ModelConfig

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
        """Megatron's filter for generated graphs (ref. 1.2)."""
        return validity_error(self, max_requests, max_sequence_length, num_speculative_tokens) is None

    def is_applicable_for_batch_dim(self, real: BatchShape, strict: bool) -> bool:
        """Can this captured graph serve the real batch ``real``? (ref. 1.1)"""
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
# Token sizes (ref. 2.3, 2.4)


def _ceil_to(x: int, k: int) -> int:
    return -(-x // k) * k


def _round_size(x: int, tp: int) -> int:
    """Round down to the CUDA_GRAPH_ROUNDER (floor 2), then up to a tp multiple."""
    r = max(CUDA_GRAPH_ROUNDER, (x // CUDA_GRAPH_ROUNDER) * CUDA_GRAPH_ROUNDER)
    return _ceil_to(r, tp)


def exponential_sizes(tp: int, n: int, cap: int) -> list[int]:
    """EXPONENTIAL token sizes, descending: halve from ``cap`` down, keep both endpoints."""
    if n == -1:
        n = max(4, int(math.log2(max(2, cap))) + 2)
    cap = (cap // tp) * tp
    if n == 1:
        return [cap]
    sizes = set()
    v = cap
    for _ in range(n):
        sizes.add(_round_size(v, tp))
        v //= 2
        if v < 1:
            break
    sizes.add(cap)
    sizes.add(tp)
    out = sorted(sizes, reverse=True)
    while len(out) > n:  # trim the smallest non-endpoint sizes
        del out[-2]
    return out


def linear_sizes(tp: int, n: int, cap: int) -> list[int]:
    """LINEAR token sizes, descending (the legacy scheme, rounder 2)."""
    if n == -1:
        seq = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, cap + 1, 16))
        aligned = [s for s in dict.fromkeys(_ceil_to(x, tp) for x in seq) if s <= cap]
        if not aligned or aligned[-1] != cap:
            aligned.append(cap)
        return aligned[::-1]
    step = CUDA_GRAPH_ROUNDER * -(-int(cap / n) // CUDA_GRAPH_ROUNDER)
    step = max(_ceil_to(step, tp), tp)
    cap = (cap // tp) * tp
    if n == 1:
        return [cap]
    seq = list(range(step, cap, step))
    if not seq or seq[-1] != cap:
        seq.append(cap)
    return seq[::-1]


def _densify_sizes(sizes: list[int], k: int, tp: int) -> list[int]:
    """cgbench extension (NOT Megatron): add ``k-1`` geometric sizes between each consecutive pair
    of Megatron's sizes, rounded like Megatron's sizes (rounder 2, then up to a tp multiple)."""
    if k <= 1:
        return sizes
    out = set(sizes)
    for hi, lo in pairwise(sizes):
        for j in range(1, k):
            s = _round_size(int(lo * (hi / lo) ** (j / k)), tp)
            if lo < s < hi:
                out.add(s)
    return sorted(out, reverse=True)


def _densify_p_grid(p_grid: list[int], k: int) -> list[int]:
    """cgbench extension (NOT Megatron): add ``k-1`` geometric P values between consecutive
    entries of the P-grid (powers of two, then max_requests)."""
    if k <= 1:
        return p_grid
    out = set(p_grid)
    for lo, hi in pairwise(p_grid):
        for j in range(1, k):
            p = round(lo * (hi / lo) ** (j / k))
            if lo < p < hi:
                out.add(p)
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# The generator (ref. 2.2)


def megatron_grid(*, tp_size: int, num_cuda_graphs: int | None, cuda_graph_max_tokens: int | None,
                  mixed_prefill_count: int, max_requests: int, max_tokens: int, max_sequence_length: int,
                  non_decode_graphs: bool, num_speculative_tokens: int = 0,
                  distribution: str = "exponential",
                  sizes_per_octave: int = 1, p_per_octave: int = 1,
                  ) -> tuple[list[BatchShape], list[int] | None]:
    """Megatron's captured-graph list in stored order, and its token counts (descending).

    ``sizes_per_octave`` / ``p_per_octave`` > 1 densify the EXPONENTIAL grid (cgbench extension;
    ignored for LINEAR). With both at 1 the result is exactly Megatron's."""
    if num_cuda_graphs is None:
        return [], None
    if distribution not in ("exponential", "linear"):
        raise ConfigError(f"cg.distribution: {distribution!r} is not one of exponential, linear")
    tp, spec, R = tp_size, num_speculative_tokens, max_requests
    q = spec + 1
    cap = cuda_graph_max_tokens
    if cap is None or cap > max_tokens or cap <= 0:
        cap = max_tokens
    if cap < R * q:
        raise ConfigError(f"cg.cuda_graph_max_tokens: the graph cap ({cap}) must be >= max_requests * "
                          f"(num_speculative_tokens + 1) = {R * q}")
    n = num_cuda_graphs
    if n != -1:
        n = min(max(n, 1), cap)
    exponential = distribution == "exponential"
    sizes_fn = exponential_sizes if exponential else linear_sizes
    prefill_sizes = sizes_fn(tp, n, cap)
    if exponential:
        prefill_sizes = _densify_sizes(prefill_sizes, sizes_per_octave, tp)
    decode_cap = min(cap, R * q)
    decode_sizes = sizes_fn(tp, n, decode_cap)
    if n == -1:  # auto mode always keeps the 1- and 2-request decode graphs
        unit = math.lcm(q, tp)
        for k in (1, 2):
            if unit * k <= decode_cap and unit * k not in decode_sizes:
                decode_sizes.append(unit * k)
        decode_sizes = sorted(set(decode_sizes), reverse=True)

    out: list[BatchShape] = []

    def add(T: int, P: int, D: int) -> None:
        g = BatchShape(T, P, D)
        if g.is_valid(R, max_sequence_length, spec):
            out.append(g)

    def add_decode_graphs() -> None:
        for s in decode_sizes:
            d = min(s // q, R)
            add((d * q) // tp * tp, 0, d)

    if not mixed_prefill_count or mixed_prefill_count <= 0 or not non_decode_graphs:
        add_decode_graphs()
    else:
        if exponential:
            p_grid = []
            p = 1
            while p < R:
                p_grid.append(p)
                p *= 2
            p_grid.append(R)
            p_grid = _densify_p_grid(p_grid, p_per_octave)
            prefill_floor = 1
        else:
            p_grid = [min(mixed_prefill_count, R)]
            prefill_floor = mixed_prefill_count
        for s in prefill_sizes:
            if s >= 2:
                for p in p_grid:
                    add(s, p, max(0, min((s - p) // q, R - p)))
            m = max(prefill_floor, -(-s // max(1, max_sequence_length - 1)))
            if m < R and s >= 2:
                add(s, max(m, min(R, s)), 0)
        add_decode_graphs()

    # Megatron dedupes through a set of shapes whose hash is hash((T, P, D)), then sorts stably;
    # doing the same keeps even equal-key ties (same T and D, different P) in Megatron's order.
    graphs = list(set(out))
    graphs.sort(key=lambda g: (g.token_count - g.decode_req_count * q, g.decode_req_count), reverse=True)
    if not graphs:
        return [], None
    return graphs, sorted({g.token_count for g in graphs}, reverse=True)


# ---------------------------------------------------------------------------------------------
# The grid the engine uses


def kind_of(g: BatchShape) -> str:
    if g.prefill_req_count == 0:
        return "decode-only"
    if g.decode_req_count == 0:
        return "prefill-only"
    return "mixed"


_CACHE_LIMIT = 1 << 18


@dataclass(slots=True, eq=False)
class Grid:
    """A captured-graph list in stored order, with an index for fast matching.

    ``lookup`` returns exactly what ``match`` returns (Megatron's min over applicable graphs),
    plus a reason on a miss. ``exact_decode`` grids (TRT-LLM / SGLang without padding) need a
    decode-only graph with exactly the real decode count."""

    name: str
    graphs: tuple[BatchShape, ...]
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
        """``_find_cg_chunk_size`` on this grid: first graph in stored order (ref. 6.2)."""
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


# ---------------------------------------------------------------------------------------------
# Config -> Grid


def megatron_cap(cg: CGConfig, engine: EngineConfig) -> int:
    """The prefill/mixed graph cap: ``max_tokens`` with ``all_prefills``, otherwise the
    megatron-core 0.19.2 rule ``min(max(cuda_graph_max_tokens, max_requests*(1+spec)), max_tokens)``."""
    if cg.all_prefills:
        return engine.max_tokens
    decode_bound = engine.max_requests * (engine.num_speculative_tokens + 1)
    return min(max(cg.cuda_graph_max_tokens, decode_bound), engine.max_tokens)


def _megatron_family(cg: CGConfig, engine: EngineConfig, non_decode: bool) -> list[BatchShape]:
    graphs, _ = megatron_grid(
        tp_size=engine.tp_size, num_cuda_graphs=cg.num_cuda_graphs,
        cuda_graph_max_tokens=megatron_cap(cg, engine), mixed_prefill_count=cg.mixed_prefill_count,
        max_requests=engine.max_requests, max_tokens=engine.max_tokens,
        max_sequence_length=engine.max_sequence_length, non_decode_graphs=non_decode,
        num_speculative_tokens=engine.num_speculative_tokens, distribution=cg.distribution,
        sizes_per_octave=cg.sizes_per_octave, p_per_octave=cg.p_per_octave)
    return graphs


def _explicit(cg: CGConfig, engine: EngineConfig) -> list[BatchShape]:
    graphs = []
    for i, g in enumerate(cg.graphs):
        key = f"cg.graphs[{i}]"
        if len(g) != 3:
            raise ConfigError(f"{key}: must be [T, P, D], got {g}")
        try:
            shape = BatchShape(*(int(x) for x in g))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{key}: must be three integers [T, P, D], got {g}") from exc
        err = validity_error(shape, engine.max_requests, engine.max_sequence_length,
                             engine.num_speculative_tokens)
        if err is not None:
            raise ConfigError(f"{key}: {list(shape)} is not a valid graph: {err}")
        graphs.append(shape)
    return graphs


def build_grid(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> Grid:
    """The captured-graph grid that the ``cg`` config describes."""
    strict = model.kind == "hybrid"
    kind = cg.kind
    if kind == "megatron":
        return Grid("megatron", tuple(_megatron_family(cg, engine, cg.non_decode)), strict)
    if kind == "decode_only":
        return Grid("decode_only", tuple(_megatron_family(cg, engine, False)), strict)
    if kind == "none":
        return Grid("none", (), strict)
    if kind == "explicit":
        return Grid("explicit", tuple(_explicit(cg, engine)), strict)
    if kind in ("vllm", "sglang", "trtllm"):
        from cgbench.grids import peers as peer_grids  # peer_grids imports this module

        return peer_grids.build_peer_grid(cg, engine, model)
    raise ConfigError(f"cg.kind: {kind!r} is not one of megatron, decode_only, none, explicit, "
                      "vllm, sglang, trtllm")
