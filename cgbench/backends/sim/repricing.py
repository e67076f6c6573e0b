"""Re-pricing a finished run: the steps a run computed, kept compactly, priced again by another
pricer without running the scheduler again.

``RecordingBackend`` wraps the ``sim`` backend: it prices every step as the wrapped backend does and
keeps the step's shape, context, attention pairs and graph. It offers no ``StretchPricer``, so the
composition root runs the step-by-step engine with it, which prices each executed step exactly once
and in order. ``reprice`` gives the durations another pricer assigns to the same steps.

Only a run whose scheduling does not depend on the clock can be re-priced this way (every arrival at
t = 0, or a closed loop): ``cgbench.analysis.sensitivity`` decides, and re-runs the others.
"""

from __future__ import annotations

import copy
from array import array
from collections.abc import Sequence
from typing import Any

from cgbench.backends.sim.watched import WatchedBackend
from cgbench.engine.contract import Admission, StepPricer, StepWork
from cgbench.engine.request import Request


class StepLog:
    """The priced steps of one run, in order: shape, context tokens, attention pairs and graph."""

    __slots__ = ("tokens", "prefills", "decodes", "context", "pairs", "graph_ids", "graphs", "durations",
                 "admitted")

    def __init__(self) -> None:
        self.tokens = array("q")
        self.prefills = array("q")
        self.decodes = array("q")
        self.context = array("q")
        self.pairs = array("q")
        self.graph_ids = array("q")  # index into ``graphs``, -1 for an eager step
        self.graphs: list[tuple[int, int, int]] = []
        self.durations = array("d")  # as the run priced them
        # the chunks each prefill step admitted, their requests copied as they were when it ran (a pricer
        # may read them: the keys each chunk attends); decode-only steps share the empty tuple
        self.admitted: list[tuple[Admission, ...]] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, work: StepWork, pairs: int, duration_s: float) -> None:
        self.tokens.append(work.tokens)
        self.prefills.append(work.prefills)
        self.decodes.append(work.decodes)
        self.context.append(work.context_tokens)
        self.pairs.append(pairs)
        if work.graph is None:
            self.graph_ids.append(-1)
        else:
            graph = tuple(work.graph)
            try:
                gid = self.graphs.index(graph)  # a run replays few distinct graphs
            except ValueError:
                gid = len(self.graphs)
                self.graphs.append(graph)  # type: ignore[arg-type]
            self.graph_ids.append(gid)
        self.durations.append(duration_s)
        self.admitted.append(tuple(Admission(copy.copy(a.request), a.chunk, a.final, a.computed)
                                   for a in work.admitted) if work.admitted else ())

    def works(self, *, graphed: bool | None = None) -> list[StepWork]:
        """The steps as ``StepWork`` records. ``graphed=None``: as they ran; ``True``: every step
        priced as a replay of a graph of its own real shape; ``False``: every step eager."""
        out = []
        for i in range(len(self.tokens)):
            T, P, D = self.tokens[i], self.prefills[i], self.decodes[i]
            gid = self.graph_ids[i]
            if graphed is None:
                graph = self.graphs[gid] if gid >= 0 else None
            else:
                graph = (T, P, D) if graphed else None
            out.append(StepWork(T, P, D, self.context[i], graph, self.pairs[i],
                                None if graph is not None else "repriced", self.admitted[i]))
        return out


def reprice(works: Sequence[StepWork], pricer: StepPricer) -> Any:
    """The seconds ``pricer`` gives each of ``works`` (a numpy array, in step order)."""
    import numpy as np

    step_time = pricer.step_time
    return np.fromiter((step_time(w) for w in works), dtype=np.float64, count=len(works))


class RecordingBackend(WatchedBackend):
    """The ``sim`` backend's prices, with every step kept in ``log`` (see the module docstring)."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.log = StepLog()

    def run_step(self, work: StepWork, decodes: Sequence[Request]) -> float:
        duration = self.priced(work, decodes)
        self.log.add(work, work.attention_pairs, duration)
        return duration
