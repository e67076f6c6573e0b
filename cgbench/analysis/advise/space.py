"""The two search spaces of ``cgbench advise``: Megatron's own knobs, and explicit graph lists built
from the batch shapes a workload produces.

Both are ranked before any simulation by a cheap estimate (``ShapePrices``): the time the
workload's observed steps would take on a grid, each step priced on the graph that would serve it
or, when none does, eagerly. The simulator then decides; the estimate only chooses what to simulate.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from cgbench.config.megatron_lines import LaunchArg, as_mapping, command_text, graph_launch_args
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig
from cgbench.engine.contract import StepPricer, StepWork
from cgbench.grids.megatron import megatron_family
from cgbench.grids.shapes import BatchShape, validity_error

Shape = tuple[int, int, int]

# ---------------------------------------------------------------------------------------------- demand


@dataclass
class Demand:
    """How often each real step shape ``(T, P, D)`` ran in the runs it was taken from."""

    counts: Counter

    @classmethod
    def of(cls, shape_counts: Iterable[Sequence[int]]) -> Demand:
        """From ``[[T, P, D, n], ...]`` records."""
        c: Counter = Counter()
        for T, P, D, n in shape_counts:
            c[(int(T), int(P), int(D))] += int(n)
        return cls(c)

    def merged(self, other: Demand) -> Demand:
        return Demand(self.counts + other.counts)

    @property
    def steps(self) -> int:
        return sum(self.counts.values())


def shape_counts(steps: Iterable[dict]) -> list[list[int]]:
    """A run's per-step records -> ``[[T, P, D, n], ...]`` sorted by shape."""
    c = Counter(tuple(s["real"]) for s in steps)
    return [[*k, n] for k, n in sorted(c.items())]


class ShapePrices:
    """Step times from the backend's cost model, for ranking grids before simulating them.

    A step served by graph ``g`` is priced as ``g`` itself (its padded shape), an eager step on its
    own shape; both without cached context (the context costs the same either way). When the
    policy gates (``gating``) and the grid switches gating on, a prefill or mixed step no graph
    serves is deferred, not run eager: ``miss`` prices it ``GATED_MISS_FACTOR`` times its eager
    time, so the search covers such shapes first."""

    GATED_MISS_FACTOR = 4.0

    def __init__(self, pricer: StepPricer, *, gating: bool = False) -> None:
        self._pricer = pricer
        self.gating = gating
        self._graphed: dict[Shape, float] = {}
        self._eager: dict[Shape, float] = {}

    def graphed(self, g: Shape) -> float:
        t = self._graphed.get(g)
        if t is None:
            t = self._graphed[g] = self._pricer.step_time(StepWork(g[0], g[1], g[2], g[0], g))
        return t

    def eager(self, s: Shape) -> float:
        t = self._eager.get(s)
        if t is None:
            t = self._eager[s] = self._pricer.step_time(StepWork(s[0], s[1], s[2], s[0], None))
        return t

    def miss(self, s: Shape, gated: bool = True) -> float:
        """The estimated cost of a step no graph serves, on a grid that switches gating on or not."""
        t = self.eager(s)
        return t * self.GATED_MISS_FACTOR if self.gating and gated and s[1] > 0 else t

    def scorer(self, demand: Demand, *, strict: bool) -> Callable[[Sequence[Shape], bool], float]:
        """``f(graphs)``: seconds the demand's steps would take on ``graphs`` (misses priced by ``miss``);
        the graph serving a step is the smallest applicable one, as the engine's matcher picks it."""
        shapes = sorted(demand.counts)
        w = np.array([demand.counts[s] for s in shapes], dtype=np.float64)
        misses = {gated: np.array([self.miss(s, gated) for s in shapes], dtype=np.float64)
                  for gated in (False, True)}
        cols = np.arange(len(shapes))
        columns = shape_columns(shapes)

        def predicted_time(graphs: Sequence[Shape], gated: bool) -> float:
            eager = misses[gated]
            if not graphs or not shapes:
                return float((w * eager).sum())
            gs = sorted(graphs)  # lexicographic: the first applicable graph is the matcher's choice
            cover = cover_matrix(gs, columns, strict)
            first = np.argmax(cover, axis=0)
            gcost = np.array([self.graphed(g) for g in gs], dtype=np.float64)
            return float((w * np.where(cover[first, cols], gcost[first], eager)).sum())

        return predicted_time


def shape_columns(shapes: Sequence[Shape]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.array(shapes, dtype=np.int64).reshape(-1, 3)
    return a[:, 0], a[:, 1], a[:, 2]


def cover_matrix(graphs: Sequence[Shape], columns: tuple[np.ndarray, np.ndarray, np.ndarray],
                 strict: bool) -> np.ndarray:
    """``[g, s]``: can captured graph ``g`` serve real step ``s`` (Megatron's applicability rule);
    ``columns`` are the steps' T, P and D (``shape_columns``)."""
    uT, uP, uD = columns
    c = np.array(graphs, dtype=np.int64).reshape(-1, 3)
    cT, cP, cD = c[:, 0:1], c[:, 1:2], c[:, 2:3]
    decode = (uP == 0)[None, :]
    mixed_ok = (cP >= uP) & ((cD >= uD) if strict else (cP + cD >= uP + uD))
    return (cT >= uT) & np.where(decode, (cP == 0) & (cD >= uD), mixed_ok & (cP > 0))


# ---------------------------------------------------------------------------------------------- Megatron

NUM_CUDA_GRAPHS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, -1)
LINEAR_MIXED_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MIXED_ON = 16  # under the exponential distribution the mixed count only switches mixed graphs on


@dataclass(frozen=True)
class MegatronKnobs:
    """One setting of Megatron's graph arguments."""

    num_cuda_graphs: int
    distribution: str
    mixed_prefill_count: int
    all_prefills: bool
    cuda_graph_max_tokens: int
    non_decode: bool

    def overrides(self) -> list[str]:
        # with all prefills the cap is engine.max_tokens: the run refuses a cuda_graph_max_tokens it would not read
        cap = [] if self.all_prefills else [f"cg.cuda_graph_max_tokens={self.cuda_graph_max_tokens}"]
        return ["cg=megatron", f"cg.num_cuda_graphs={self.num_cuda_graphs}", f"cg.distribution={self.distribution}",
                f"cg.mixed_prefill_count={self.mixed_prefill_count}",
                f"cg.all_prefills={str(self.all_prefills).lower()}", *cap,
                f"cg.non_decode={str(self.non_decode).lower()}", "cg.sizes_per_octave=1", "cg.p_per_octave=1"]

    def launch_args(self) -> list[LaunchArg]:
        """Megatron-LM's graph arguments for this setting, read backwards from the translator's table
        (``cgbench.config.megatron_lines``): ``--megatron-args`` translates them to these knobs."""
        args = graph_launch_args(_cg_of(self))
        if args is None:  # a knob setting is a Megatron grid by construction
            raise AssertionError(f"{self} is not expressible as Megatron arguments")
        return args

    def megatron_args(self) -> dict[str, int | str | bool]:
        """The arguments as ``{flag: value}`` (a switch maps to True)."""
        return as_mapping(self.launch_args())

    @property
    def command(self) -> str:
        return command_text(self.launch_args())


def _cg_of(knobs: MegatronKnobs) -> CGConfig:
    return replace(CGConfig(), kind="megatron", num_cuda_graphs=knobs.num_cuda_graphs,
                   distribution=knobs.distribution, mixed_prefill_count=knobs.mixed_prefill_count,
                   all_prefills=knobs.all_prefills, cuda_graph_max_tokens=knobs.cuda_graph_max_tokens,
                   non_decode=knobs.non_decode, sizes_per_octave=1, p_per_octave=1)


SpaceEntry = tuple[MegatronKnobs, tuple[Shape, ...], bool]


def megatron_space(engine: EngineConfig) -> list[SpaceEntry]:
    """Every distinct grid Megatron's knobs produce: (knobs, graphs in stored order, gating on).

    Settings that give the same graph list and the same gating are one entry (the first, in a
    fixed enumeration order: fewer graphs first, exponential before linear)."""
    limits = (engine.max_requests, engine.max_tokens, engine.max_sequence_length, engine.tp_size,
              engine.num_speculative_tokens)
    return list(_megatron_space(limits))


@lru_cache(maxsize=8)
def _megatron_space(limits: tuple[int, int, int, int, int]) -> tuple[SpaceEntry, ...]:
    R, max_tokens, msl, tp, spec = limits
    engine = EngineConfig(max_requests=R, max_tokens=max_tokens, max_sequence_length=msl, tp_size=tp,
                          num_speculative_tokens=spec)
    q = engine.num_speculative_tokens + 1
    caps = sorted({min(c, engine.max_tokens) for c in
                   (engine.max_requests * q, 512, 1024, 2048, 4096, 8192, engine.max_tokens)})
    settings: list[MegatronKnobs] = []
    for n in NUM_CUDA_GRAPHS:
        settings.append(MegatronKnobs(n, "exponential", MIXED_ON, False, caps[0], False))
        for dist, counts in (("exponential", (MIXED_ON,)), ("linear", LINEAR_MIXED_COUNTS)):
            for m in counts:
                if m > engine.max_requests:
                    continue
                settings.append(MegatronKnobs(n, dist, m, True, 512, True))
                settings += [MegatronKnobs(n, dist, m, False, c, True) for c in caps]
    out, seen = [], set()
    for k in settings:
        try:
            graphs = tuple(tuple(g) for g in megatron_family(_cg_of(k), engine, k.non_decode))
        except ConfigError:
            continue
        if not graphs:
            continue
        gating = k.all_prefills and k.non_decode and any(g[1] > 0 for g in graphs)
        key = (graphs, gating)
        if key not in seen:
            seen.add(key)
            out.append((k, graphs, gating))
    return tuple(out)


def spread_pick(scored: list[tuple[float, int, int]], n: int) -> list[int]:
    """Choose ``n`` of ``(predicted seconds, graph count, index)``: the best-predicted entry of each
    graph-count band first (so the Pareto front has points across counts), then the best overall."""
    if n <= 0 or not scored:
        return []
    by_score = sorted(scored)
    counts = sorted({c for _, c, _ in scored})
    bands = max(1, min(len(counts), (n + 1) // 2))
    edges = [counts[min(len(counts) - 1, (len(counts) * b) // bands)] for b in range(bands)] + [math.inf]
    picked: list[int] = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        for _, c, i in by_score:
            if lo <= c < hi:
                if i not in picked:
                    picked.append(i)
                break
    for _, _, i in by_score:
        if len(picked) >= n:
            break
        if i not in picked:
            picked.append(i)
    return picked[:n]


# ---------------------------------------------------------------------------------------------- explicit


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
