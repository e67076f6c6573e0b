"""What one ``cgbench advise`` search derives from its request and base config (``Search``, made by
``setup.py``): the state every stage reads, the backstop graphs every explicit list keeps, and the
budgets a graph list is checked against (``fits``, ``budget_violations``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cgbench.analysis.advise.capture import CaptureEstimate, CaptureEstimator
from cgbench.analysis.advise.demand import Demand, Shape
from cgbench.analysis.advise.goals import Objective, Slo
from cgbench.analysis.advise.prices import ShapePrices
from cgbench.analysis.advise.request import AdviseRequest


@dataclass
class Search:
    """Everything the search needs from the base config."""

    req: AdviseRequest
    objective: Objective
    slos: list[Slo]
    base: list[str]  # the given overrides
    base_no_cg: list[str]
    strict: bool
    all_prefills: bool
    num_speculative_tokens: int
    estimator: CaptureEstimator
    prices: ShapePrices
    engine: Any
    seed: int
    progress: Callable[[str, int | None], None]
    gating: bool = False
    default_kind: str = "megatron"
    backstop: list[Shape] = field(default_factory=list)
    # the lines users run, each simulated on the workload too (analysis/baselines.py), and why others are not
    baselines: list[Any] = field(default_factory=list)
    baseline_notes: list[str] = field(default_factory=list)

    def set_backstop(self, demand: Demand) -> None:
        """Graphs every explicit list keeps, used or not, so another run of the workload does not
        fall off the list: decode graphs doubling from above the largest decode batch seen up to
        ``max_requests`` (a decode graph serves every smaller decode step, with at most 2x padding;
        one per 16 graphs of budget, the nearest first),
        and, under gating, a graph for one prefill alone (without it gating would defer a long
        prompt forever on an idle engine)."""
        e, q = self.engine, self.num_speculative_tokens + 1
        top = max((D for T, P, D in demand.counts if P == 0), default=0)
        d, sizes = 1, []
        while d < e.max_requests:
            if d > top:
                sizes.append(d)
            d *= 2
        sizes.append(e.max_requests)
        sizes = sizes[:max(1, self.req.budget_graphs // 16)]  # a small budget keeps the nearest only
        self.backstop = [(D * q, 0, D) for D in sizes if D > top]
        if self.gating:
            self.backstop.append((min(e.max_tokens, e.max_sequence_length), 1, 0))

    @property
    def goal(self) -> str:
        """What the explicit lists are built for: eager steps served for ``eager_fraction``, else time."""
        return "coverage" if self.objective.name == "eager_fraction" else "time"

    def fits(self, graphs: Sequence[Shape]) -> bool:
        if len(graphs) > self.req.budget_graphs:
            return False
        if self.req.budget_memory_gb is None and self.req.budget_capture_s is None:
            return True  # only the graph count is budgeted: no estimate needed
        return not self.budget_violations(len(graphs), self.estimator.estimate(graphs))

    def budget_violations(self, n: int, est: CaptureEstimate) -> list[str]:
        r = self.req
        out = []
        if n > r.budget_graphs:
            out.append(f"{n} graphs > budget {r.budget_graphs}")
        if r.budget_memory_gb is not None and est.memory_gb > r.budget_memory_gb:
            out.append(f"est. memory {est.memory_gb:.2f} GB > {r.budget_memory_gb:g}")
        if r.budget_capture_s is not None and est.capture_s > r.budget_capture_s:
            out.append(f"est. capture {est.capture_s:.1f} s > {r.budget_capture_s:g}")
        if not est.fits_device:
            out.append(f"est. device memory {est.total_gb:.1f} GB > {est.device_gb:g} GB")
        return out


def quiet(text: str, total: int | None) -> None:
    """The progress of a search run without one: nothing shown."""
