"""The ranking of ``cgbench advise``: every candidate the simulator ran on the workload, feasible ones
(completed, within the budgets and SLOs) first, by the objective, then fewer graphs."""

from __future__ import annotations

import math

from cgbench.analysis.advise.candidates import Evaluated
from cgbench.analysis.advise.search import Search
from cgbench.results.names import number_at


def rank(s: Search, evaluated: list[Evaluated]) -> list[Evaluated]:
    """Every candidate the simulator ran, ranked (1 first); its violations of the budgets and SLOs set."""
    obj = s.objective
    for e in evaluated:
        v = []
        if e.metrics.get("outcome") != "completed":
            v.append(f"run {e.metrics.get('outcome')}")
        v += s.budget_violations(len(e.cand.graphs), e.cand.estimate)
        v += [msg for slo in s.slos if (msg := slo.violated_by(e.metrics)) is not None]
        e.violations = v

    def key(e: Evaluated) -> tuple:
        val = number_at(e.metrics, obj.metric)
        signed = math.inf if val is None else (-val if obj.maximize else val)
        return (not e.feasible, signed, len(e.cand.graphs), e.metrics.get("eager_step_fraction", 1.0), e.cand.name)

    ranked = sorted(evaluated, key=key)
    for i, e in enumerate(ranked):
        e.rank = i + 1
    return ranked
