"""The explicit space of ``cgbench advise``: graph lists built from the demand's own shapes. The graphs
worth considering (``candidate_pool``, on geometric ``ladder``s), the order a greedy search adds them
in (``greedy_order``: by time saved, or by steps served), the list sizes tried (``prefix_sizes``),
Megatron's stored order of a list (``stored_order``) and a list as ``cg`` overrides
(``explicit_overrides``)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from cgbench.analysis.advise.demand import Demand, Shape
from cgbench.analysis.advise.prices import ShapePrices, cover_matrix, shape_columns
from cgbench.config.schema import EngineConfig
from cgbench.grids.shapes import BatchShape, validity_error


def ladder(limit: int, per_octave: int) -> list[int]:
    """1, then ``per_octave`` geometric values per doubling, up to and including ``limit``."""
    vals = {1, limit}
    k = 0
    while 2**k <= limit:
        for j in range(per_octave):
            v = int(round(2 ** (k + j / per_octave)))
            if v <= limit:
                vals.add(v)
        k += 1
    return sorted(vals)


def _up(x: int, lad: list[int]) -> int:
    i = bisect_left(lad, x)
    return lad[i] if i < len(lad) else x


def _round_up_to(x: int, k: int) -> int:
    return -(-x // k) * k


def candidate_pool(demand: Demand, engine: EngineConfig) -> list[Shape]:
    """Graphs worth considering for an explicit list: every observed shape, the same rounded up on
    geometric ladders (T 4 per octave, P 2, D 4), and the "hull" graph of each rounded (T, P) with
    the most decode slots it can hold. Only valid graphs are kept."""
    R, msl, q, tp = engine.max_requests, engine.max_sequence_length, engine.num_speculative_tokens + 1, engine.tp_size
    t_lad, p_lad, d_lad = ladder(engine.max_tokens, 4), ladder(R, 2), ladder(R, 4)
    pool: set[Shape] = set()

    def add(T: int, P: int, D: int) -> None:
        P = min(P, R)
        D = max(0, min(D, R - P))
        T = min(engine.max_tokens, max(_round_up_to(T, tp), P + D * q))
        g = (T, P, D)
        if validity_error(BatchShape(*g), R, msl, q - 1) is None:
            pool.add(g)

    for T, P, D in demand.counts:
        if P == 0:
            for d in {D, _up(D, d_lad)}:
                add(d * q, 0, d)
            continue
        for t in {T, _up(T, t_lad)}:
            for p in {P, _up(P, p_lad)}:
                for d in {D, _up(D, d_lad)}:
                    add(t, p, d)
                add(t, p, min(R - p, (t - p) // q))
    return sorted(pool)


GREEDY_GOALS = ("time", "coverage")


def greedy_order(demand: Demand, pool: list[Shape], prices: ShapePrices, *, strict: bool, max_requests: int,
                 limit: int, fits: Callable[[list[Shape]], bool], required: Sequence[Shape] = (),
                 gated: bool = True, goal: str = "time") -> list[Shape]:
    """Graphs in the order a greedy search adds them, at most ``limit``.

    ``goal="time"``: each round adds the graph that saves the most estimated time on the demand: a
    step served by it (the matcher picks the smallest applicable graph, as the engine does) costs
    the graph's padded shape instead of what it cost before (eager, or a larger graph).
    ``goal="coverage"``: each round adds the graph that serves the most steps no graph served yet;
    ties (and, once every step is served, every round) go to the most time saved, i.e. the least
    padding. This finds a list that serves every step whenever ``limit`` graphs can, even where the
    time model prices a step cheaper eager than padded into a graph.

    A graph that would break a budget (``fits``) is skipped; the search stops when nothing improves.
    ``required`` graphs come first whatever they save (a backstop that keeps gating from deferring
    forever)."""
    if goal not in GREEDY_GOALS:
        raise ValueError(f"greedy goal {goal!r} is not one of {GREEDY_GOALS}")
    pool = list(pool) + [g for g in required if g not in set(pool)]
    if not demand.counts or not pool:
        return [g for g in required][:limit]
    shapes = sorted(demand.counts)
    w = np.array([demand.counts[s] for s in shapes], dtype=np.float64)
    cover = cover_matrix(pool, shape_columns(shapes), strict)
    base = max_requests + 1
    key = np.array([(T * base + P) * base + D for T, P, D in pool], dtype=np.float64)
    gcost = np.array([prices.graphed(g) for g in pool], dtype=np.float64)
    cur_cost = np.array([prices.miss(s, gated) for s in shapes], dtype=np.float64)
    cur_key = np.full(len(shapes), np.inf)
    alive = cover.any(axis=1)

    def contribution(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        better = cover[:, cols] & (key[:, None] < cur_key[None, cols])
        saved = (better * (cur_cost[None, cols] - gcost[:, None]) * w[None, cols]).sum(axis=1)
        newly = (better * (np.isinf(cur_key[cols]) * w[cols])[None, :]).sum(axis=1)
        return saved, newly

    gain, covers = contribution(np.arange(len(shapes)))
    order: list[Shape] = []
    forced = [pool.index(g) for g in dict.fromkeys(required)]
    while len(order) < limit and alive.any():
        if forced:
            best = forced.pop(0)
        elif goal == "time":
            masked = np.where(alive, gain, -np.inf)
            best = int(np.argmax(masked))  # the first maximum: deterministic
            if not masked[best] > 0:
                break
        else:
            most = np.where(alive, covers, -np.inf)
            top = most.max()
            masked = np.where(alive & (covers == top), gain, -np.inf)
            best = int(np.argmax(masked))  # the first maximum: deterministic
            if not (top > 0 or masked[best] > 0):
                break
        alive[best] = False
        g = pool[best]
        if not fits(order + [g]):
            continue
        order.append(g)
        took = np.flatnonzero(cover[best] & (key[best] < cur_key))
        s0, c0 = contribution(took)  # only the steps the new graph takes over change their gains
        cur_cost[took] = gcost[best]
        cur_key[took] = key[best]
        s1, c1 = contribution(took)
        gain -= s0
        gain += s1
        covers -= c0
        covers += c1
    return order


def stored_order(graphs: Iterable[Shape], num_speculative_tokens: int = 0) -> list[Shape]:
    """Megatron's stored order (largest prefill part first), so chunk snapping tries big graphs first."""
    q = num_speculative_tokens + 1
    return sorted(set(graphs), key=lambda g: (g[0] - g[2] * q, g[2], g[1]), reverse=True)


def prefix_sizes(n_picks: int, n: int) -> list[int]:
    """Up to ``n`` list sizes spread geometrically over ``[n_picks // 16, n_picks]``, always with
    ``n_picks`` (the fullest list) itself."""
    if n_picks <= 0 or n <= 0:
        return []
    lo = max(1, n_picks // 16)
    if n >= n_picks - lo + 1:
        return list(range(lo, n_picks + 1))
    sizes = {n_picks}
    for i in range(n):
        sizes.add(int(round(lo * (n_picks / lo) ** (i / max(1, n - 1)))))
    k = n_picks - 1
    while len(sizes) < n and k >= lo:
        sizes.add(k)
        k -= 1
    return sorted(sizes)[-n:]


def graphs_override(graphs: Sequence[Shape]) -> str:
    return "cg.graphs=[" + ",".join(f"[{T},{P},{D}]" for T, P, D in graphs) + "]"


def explicit_overrides(graphs: Sequence[Shape], all_prefills: bool) -> list[str]:
    return ["cg=explicit", f"cg.all_prefills={str(all_prefills).lower()}", "cg.non_decode=true",
            graphs_override(graphs)]
