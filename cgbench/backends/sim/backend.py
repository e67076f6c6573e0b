"""The ``sim`` backend: no model, a cost model gives each step's duration (never imports torch)."""

from __future__ import annotations

from cgbench.engine.context import Admission
from cgbench.engine.contract import StepPricer, StepWork
from cgbench.engine.request import Request


class SimBackend:
    has_clock = True
    device = "cpu (simulated)"

    def __init__(self, cost_model: StepPricer) -> None:
        self.cost_model = cost_model

    def run_step(self, work: StepWork, admitted: list[Admission], decodes: list[Request]) -> float:
        return self.cost_model.step_time(work)

    def release(self, req: Request) -> None:
        pass
