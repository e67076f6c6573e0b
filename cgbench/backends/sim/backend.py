"""The ``sim`` backend: no model, a pricer (cost model) gives each step's duration (never imports torch).

It is the pricer side of the step contract: it counts each step's attention pairs, and it hands the
event-proportional engine a ``StretchPricer`` (the cost model itself when it prices stretches, else
``PerStepPricing`` around it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from cgbench.engine.contract import StepPricer, StepWork, StretchPricer, attention_pairs
from cgbench.engine.request import Request


class PerStepPricing:
    """A ``StretchPricer`` for a pricer that prices single steps only: every step of a stretch is priced
    on its own by ``step_time`` (so the floats are the same by construction)."""

    def __init__(self, pricer: StepPricer) -> None:
        self.pricer = pricer
        self.name = pricer.name

    def step_time(self, work: StepWork) -> float:
        return self.pricer.step_time(work)

    def stepper(self, work: StepWork) -> Callable[[int, int], float]:
        step_time, T, P, D, graph = self.pricer.step_time, work.tokens, work.prefills, work.decodes, work.graph
        return lambda ctx, pairs: step_time(StepWork(T, P, D, ctx, graph, pairs))

    def decode_stretch_times(self, work: StepWork, k: int, ctx_step: int, pairs_step: int) -> Any:
        import numpy as np

        f = self.stepper(work)
        ctx, pairs = work.context_tokens, work.attention_pairs
        assert pairs is not None
        return np.array([f(ctx + j * ctx_step, pairs + j * pairs_step) for j in range(k)], dtype=np.float64)


def stretch_pricer(pricer: StepPricer) -> StretchPricer:
    """``pricer`` itself when it prices stretches, else ``PerStepPricing(pricer)``."""
    if callable(getattr(pricer, "stepper", None)) and callable(getattr(pricer, "decode_stretch_times", None)):
        return pricer  # type: ignore[return-value]
    return PerStepPricing(pricer)


class SimBackend:
    device: ClassVar[str] = "cpu (simulated)"
    captured: ClassVar[None] = None  # every graph of the grid is priced as captured

    def __init__(self, pricer: StepPricer) -> None:
        self.pricer: StretchPricer = stretch_pricer(pricer)
        self._step_time = pricer.step_time

    def run_step(self, work: StepWork, decodes: Sequence[Request]) -> float:
        if work.attention_pairs is None:
            work.attention_pairs = attention_pairs(work)
        return self._step_time(work)

    def release(self, req: Request) -> None:
        pass

    def token_ids(self, req: Request) -> list[int]:
        return []

    def report(self) -> dict | None:
        return None
