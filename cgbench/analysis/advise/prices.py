"""The cheap estimate both search spaces are ranked by before any simulation: the time the demand's
steps would take on a grid, each step priced on the graph that would serve it or, when none does,
eagerly (``ShapePrices``), and which graph can serve which step (``cover_matrix``, Megatron's
applicability rule). The simulator then decides; the estimate only chooses what to simulate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cgbench.analysis.advise.demand import Demand, Shape
from cgbench.engine.contract import StepPricer, StepWork


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
