"""Megatron's captured-graph generator (``generate_cuda_graph_batch_dimensions_list``).

EXPONENTIAL and LINEAR token sizes, the geometric prefill-count grid, the validity rule, tensor
parallelism and speculative tokens, list order included, as megatron-core 0.19.2 builds them, and
PR #6667's HYBRID sizing (``1ea7881b``: EXPONENTIAL sizes for the prefill/mixed graphs, LINEAR sizes
for the decode-only graphs, the geometric prefill-count grid of EXPONENTIAL).
The only non-Megatron part is ``sizes_per_octave`` / ``p_per_octave`` (used by ``cg=dense``), see
``_densify_sizes`` and ``_densify_p_grid``; with both at 1 the output is exactly Megatron's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import pairwise

from cgbench.config.registry.grids import grid_kind
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig
from cgbench.grids.shapes import CUDA_GRAPH_ROUNDER, BatchShape, validity_error


def _ceil_to(x: int, k: int) -> int:
    return -(-x // k) * k


def _round_size(x: int, tp: int) -> int:
    """Round down to the CUDA_GRAPH_ROUNDER (floor 2), then up to a tp multiple."""
    r = max(CUDA_GRAPH_ROUNDER, (x // CUDA_GRAPH_ROUNDER) * CUDA_GRAPH_ROUNDER)
    return _ceil_to(r, tp)


# Batch-invariant mode (Megatron-LM main, #6521 ``d98e8a64``, batch_dimensions_utils.py): every graph's
# token count is a multiple of TOKEN_ROUNDER, the eager steps' padding, so graphed and eager steps run
# their norms in the same M-alignment class.
BATCH_INVARIANT_ROUNDER = 64


def batch_invariant_align(tokens: int) -> int:
    """Megatron's ``_batch_invariant_token_align``: up to a multiple of 64, at least 64."""
    return max(BATCH_INVARIANT_ROUNDER, _ceil_to(tokens, BATCH_INVARIANT_ROUNDER))


def batch_invariant_validity_error(g: BatchShape, max_requests: int, max_sequence_length: int,
                                   num_speculative_tokens: int = 0) -> str | None:
    """The validity rule for a batch-invariant graph (an explicit list, e.g. a state file's): its T a
    multiple of 64, and some unaligned T' it pads (T - 63 .. T) valid, as Megatron judges validity
    before aligning."""
    T, P, D = g.token_count, g.prefill_req_count, g.decode_req_count
    if T % BATCH_INVARIANT_ROUNDER:
        return f"batch-invariant mode: T must be a multiple of {BATCH_INVARIANT_ROUNDER}, got {T}"
    lowest = max(T - BATCH_INVARIANT_ROUNDER + 1, P + D * (num_speculative_tokens + 1), 1)
    unaligned = BatchShape(lowest, P, D) if lowest <= T else g
    return validity_error(unaligned, max_requests, max_sequence_length, num_speculative_tokens)


def exponential_sizes(tp: int, n: int, cap: int, batch_invariant: bool = False) -> list[int]:
    """EXPONENTIAL token sizes, descending: halve from ``cap`` down, keep both endpoints. Batch-invariant
    (main): the cap aligned up to 64 first, sizes rounded down to 64 (floor 64), the smallest one 64."""
    if n == -1:
        n = max(4, int(math.log2(max(2, cap))) + 2)
    rounder, floor = CUDA_GRAPH_ROUNDER, tp
    if batch_invariant:
        rounder, floor = BATCH_INVARIANT_ROUNDER, BATCH_INVARIANT_ROUNDER
        cap = batch_invariant_align(cap)
    cap = (cap // tp) * tp
    if n == 1:
        return [cap]
    sizes = set()
    v = cap
    for _ in range(n):
        sizes.add(_ceil_to(max(rounder, (v // rounder) * rounder), tp))
        v //= 2
        if v < 1:
            break
    sizes.add(cap)
    sizes.add(floor)
    out = sorted(sizes, reverse=True)
    while len(out) > n:  # trim the smallest non-endpoint sizes
        del out[-2]
    return out


def linear_sizes(tp: int, n: int, cap: int, batch_invariant: bool = False) -> list[int]:
    """LINEAR token sizes, descending (the legacy scheme, rounder 2). Batch-invariant (main): the auto
    ladder (``n == -1``) aligned up to 64; explicit counts keep their sizes (the graphs are aligned)."""
    if n == -1:
        seq = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, cap + 1, 16))
        if batch_invariant:
            seq = [batch_invariant_align(x) for x in seq]
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
# The generator (docs/design.md §2)


def family_distributions(distribution: str) -> tuple[str, str]:
    """The token-size distributions of the prefill/mixed graphs and of the decode-only graphs:
    HYBRID (PR #6667) resolves to EXPONENTIAL and LINEAR, the others apply to both families."""
    if distribution == "hybrid":
        return "exponential", "linear"
    return distribution, distribution


def _token_sizes(tp: int, n: int, cap: int, decode_bound: int, q: int, distribution: str,
                 sizes_per_octave: int, batch_invariant: bool = False) -> tuple[list[int], list[int]]:
    """The prefill/mixed token sizes (up to ``cap``) and the decode-only ones (up to
    ``min(cap, decode_bound)``), descending, for a checked ``n`` (``num_cuda_graphs``)."""
    prefill_distribution, decode_distribution = family_distributions(distribution)
    prefill_sizes = (exponential_sizes if prefill_distribution == "exponential" else linear_sizes)(
        tp, n, cap, batch_invariant)
    if prefill_distribution == "exponential":
        prefill_sizes = _densify_sizes(prefill_sizes, sizes_per_octave, tp)
    decode_cap = min(cap, decode_bound)
    decode_sizes = (exponential_sizes if decode_distribution == "exponential" else linear_sizes)(
        tp, n, decode_cap, batch_invariant)
    if n == -1:  # auto mode always keeps the 1- and 2-request decode graphs
        unit = math.lcm(q, tp)
        for k in (1, 2):
            if unit * k <= decode_cap and unit * k not in decode_sizes:
                decode_sizes.append(unit * k)
        decode_sizes = sorted(set(decode_sizes), reverse=True)
    return prefill_sizes, decode_sizes


def _prefill_counts(distribution: str, R: int, mixed_prefill_count: int, p_per_octave: int) -> tuple[list[int], int]:
    """The prefill counts of the mixed graphs and the prefill-only graphs' floor: the geometric grid
    1, 2, 4, ..., ``max_requests``, except under LINEAR, which keeps the fixed ``mixed_prefill_count``
    (HYBRID's prefill family is EXPONENTIAL's)."""
    if distribution == "linear":
        return [min(mixed_prefill_count, R)], mixed_prefill_count
    p_grid = []
    p = 1
    while p < R:
        p_grid.append(p)
        p *= 2
    p_grid.append(R)
    return _densify_p_grid(p_grid, p_per_octave), 1


def megatron_grid(*, tp_size: int, num_cuda_graphs: int | None, cuda_graph_max_tokens: int | None,
                  mixed_prefill_count: int, max_requests: int, max_tokens: int, max_sequence_length: int,
                  non_decode_graphs: bool, num_speculative_tokens: int = 0,
                  distribution: str = "exponential",
                  sizes_per_octave: int = 1, p_per_octave: int = 1, batch_invariant: bool = False,
                  ) -> tuple[list[BatchShape], list[int] | None]:
    """Megatron's captured-graph list in stored order, and its token counts (descending).

    ``distribution``: ``exponential``, ``linear`` or ``hybrid`` (#6667). ``sizes_per_octave`` /
    ``p_per_octave`` > 1 densify the EXPONENTIAL prefill sizes and P-grid (cgbench extension; ignored for
    LINEAR). With both at 1 the result is exactly Megatron's. ``batch_invariant``: Megatron main's
    64-token ladder (``BATCH_INVARIANT_ROUNDER``): the sizes as above, and every valid graph's token
    count aligned up to 64 after the validity rule (which judges the unaligned shape)."""
    if num_cuda_graphs is None:
        return [], None
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
    prefill_sizes, decode_sizes = _token_sizes(tp, n, cap, R * q, q, distribution, sizes_per_octave,
                                               batch_invariant)

    out: list[BatchShape] = []

    def add(T: int, P: int, D: int) -> None:
        g = BatchShape(T, P, D)
        if g.is_valid(R, max_sequence_length, spec):
            out.append(BatchShape(batch_invariant_align(T), P, D) if batch_invariant else g)

    def add_decode_graphs() -> None:
        for s in decode_sizes:
            d = min(s // q, R)
            add((d * q) // tp * tp, 0, d)

    if not mixed_prefill_count or mixed_prefill_count <= 0 or not non_decode_graphs:
        add_decode_graphs()
    else:
        p_grid, prefill_floor = _prefill_counts(distribution, R, mixed_prefill_count, p_per_octave)
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

def megatron_cap(cg: CGConfig, engine: EngineConfig) -> int:
    """The prefill/mixed graph cap: ``max_tokens`` with ``all_prefills``, otherwise the
    megatron-core 0.19.2 rule ``min(max(cuda_graph_max_tokens, max_requests*(1+spec)), max_tokens)``."""
    if cg.all_prefills:
        return engine.max_tokens
    decode_bound = engine.max_requests * (engine.num_speculative_tokens + 1)
    return min(max(cg.cuda_graph_max_tokens, decode_bound), engine.max_tokens)


def megatron_family(cg: CGConfig, engine: EngineConfig, non_decode: bool) -> list[BatchShape]:
    graphs, _ = megatron_grid(
        tp_size=engine.tp_size, num_cuda_graphs=cg.num_cuda_graphs,
        cuda_graph_max_tokens=megatron_cap(cg, engine), mixed_prefill_count=cg.mixed_prefill_count,
        max_requests=engine.max_requests, max_tokens=engine.max_tokens,
        max_sequence_length=engine.max_sequence_length, non_decode_graphs=non_decode,
        num_speculative_tokens=engine.num_speculative_tokens, distribution=cg.distribution,
        sizes_per_octave=cg.sizes_per_octave, p_per_octave=cg.p_per_octave,
        batch_invariant=engine.batch_invariant)
    return graphs


@dataclass(frozen=True)
class FamilySizing:
    """How one family of Megatron's generator sizes its graphs (``cgbench grid`` shows it)."""

    family: str  # "prefill/mixed" or "decode-only"
    distribution: str  # the family's token-size distribution: exponential or linear
    cap: int  # the family's largest token size
    token_sizes: tuple[int, ...]  # the generated sizes, descending (the validity rule may drop a graph)
    prefill_counts: tuple[int, ...] = ()  # the mixed graphs' prefill counts (prefill/mixed only)


def family_sizing(cg: CGConfig, engine: EngineConfig) -> tuple[FamilySizing, ...]:
    """The families ``cg.kind`` ``megatron`` or ``decode_only`` generates, each with its sizing (under
    ``cg.distribution=hybrid`` the two differ); () for every other kind and without graphs."""
    if cg.kind not in ("megatron", "decode_only") or cg.num_cuda_graphs is None:
        return ()
    R, q = engine.max_requests, engine.num_speculative_tokens + 1
    cap = megatron_cap(cg, engine)
    n = cg.num_cuda_graphs if cg.num_cuda_graphs == -1 else min(max(cg.num_cuda_graphs, 1), cap)
    prefill_sizes, decode_sizes = _token_sizes(engine.tp_size, n, cap, R * q, q, cg.distribution,
                                               cg.sizes_per_octave, engine.batch_invariant)
    prefill_distribution, decode_distribution = family_distributions(cg.distribution)
    families = []
    if cg.kind == "megatron" and cg.non_decode and cg.mixed_prefill_count > 0:
        p_grid, _ = _prefill_counts(cg.distribution, R, cg.mixed_prefill_count, cg.p_per_octave)
        families.append(FamilySizing("prefill/mixed", prefill_distribution, cap, tuple(prefill_sizes),
                                     tuple(p_grid)))
    families.append(FamilySizing("decode-only", decode_distribution, min(cap, R * q), tuple(decode_sizes)))
    return tuple(families)


DEFAULT_MIXED_PREFILL_COUNT = CGConfig().mixed_prefill_count


def idle_mixed_prefill_count(cg: CGConfig, engine: EngineConfig) -> str | None:
    """A warning when ``cg.mixed_prefill_count`` is set but yields the very grid the default does
    (under EXPONENTIAL sizing the P values are the powers of two up to ``max_requests`` whatever the
    count, only 0 versus > 0 matters; decode-only grids never read it)."""
    n = cg.mixed_prefill_count
    if n == DEFAULT_MIXED_PREFILL_COUNT or "mixed_prefill_count" not in grid_kind(cg.kind).reads:
        return None
    non_decode = cg.non_decode and cg.kind != "decode_only"
    mine = megatron_family(cg, engine, non_decode)
    default = megatron_family(replace(cg, mixed_prefill_count=DEFAULT_MIXED_PREFILL_COUNT), engine, non_decode)
    if mine != default:
        return None
    if not non_decode:
        why = "a decode-only grid has no mixed-prefill graphs"
    elif cg.distribution != "linear" and n > 0:
        why = (f"under cg.distribution={cg.distribution} the prefill counts are the powers of two up to "
               "max_requests; only 0 versus > 0 matters")
    else:
        why = "no graph it would change is valid for this engine"
    return (f"cg.mixed_prefill_count={n} gives the same {len(mine)} graphs as the default "
            f"{DEFAULT_MIXED_PREFILL_COUNT}: it changes nothing ({why})")
