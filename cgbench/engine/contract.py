"""The contract between the engine and whatever runs or prices a step.

The engine decides *what* a step computes (``StepWork``); a backend runs it and says how long it
took (``StepBackend``); the simulator's cost model prices it (``StepPricer``). The event-proportional
engine also asks the pricer for whole decode stretches, so those methods are part of the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)  # not frozen: one is built per simulated step, and frozen init costs 4x
class StepWork:
    """What one engine step computes. ``graph`` is the replayed graph ``(Tg, Pg, Dg)`` or ``None``
    when the step ran eager; ``attention_pairs`` is Σ over requests of new tokens × mean attended KV
    length (causal), or ``None`` to let the cost model estimate it."""

    tokens: int
    prefills: int
    decodes: int
    context_tokens: int
    graph: tuple[int, int, int] | None
    attention_pairs: int | None = None


class StepPricer(Protocol):
    name: str

    def step_time(self, work: StepWork) -> float:
        """Seconds the step takes."""
        ...


