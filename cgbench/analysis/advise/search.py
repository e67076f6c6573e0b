"""What one ``cgbench advise`` search is asked (``AdviseRequest``, checked by ``check_request``)
and what it derives from the base config (``Search``): the records the search (``advise.py``) and
its report (``report.py``) share."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgbench.analysis.advise.capture import CaptureEstimate, CaptureEstimator
from cgbench.analysis.advise.goals import OBJECTIVES, Objective, Slo
from cgbench.analysis.advise.runs import Candidate, explicit_overrides
from cgbench.analysis.advise.space import (
    Demand,
    MegatronKnobs,
    Shape,
    ShapePrices,
    candidate_pool,
    greedy_order,
    stored_order,
)
from cgbench.config.schema import ConfigError


@dataclass
class AdviseRequest:
    overrides: list[str]
    budget_graphs: int
    budget_memory_gb: float | None = None
    budget_capture_s: float | None = None
    objective: str = "throughput"
    slos: list[str] = field(default_factory=list)
    candidates: int = 24
    jobs: int = 1
    check_seed: int | None = None
    check_workload: list[str] = field(default_factory=list)
    out_dir: Path | None = None
    resume: bool = False
    # the user's own launch line (--megatron-args, read): its translation is in ``overrides``; the
    # recommendation says what to add to it and remove from it, and it is a baseline
    launch_line: str | None = None
    executor: str = "local"  # local (in process or --jobs workers) or slurm (array tasks under out_dir/slurm/)
    slurm: dict[str, Any] = field(default_factory=dict)  # --slurm settings, parsed (executor_slurm.parse_settings)


def check_request(req: AdviseRequest) -> tuple[Objective, list[Slo]]:
    """Budgets, objective and search settings; ConfigError naming the option."""
    if isinstance(req.budget_graphs, bool) or not isinstance(req.budget_graphs, int) or req.budget_graphs < 1:
        raise ConfigError(f"--budget-graphs: must be an integer >= 1, got {req.budget_graphs}")
    if req.budget_graphs > 2**63 - 1:  # the report records it: refused here, before any run is written
        raise ConfigError(f"--budget-graphs: must be at most {2**63 - 1} (a report holds 64-bit integers), "
                          f"got {req.budget_graphs}")
    for name, v in (("--budget-memory", req.budget_memory_gb), ("--budget-capture-s", req.budget_capture_s)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{name}: must be > 0, got {v}")
    if req.objective not in OBJECTIVES:
        raise ConfigError(f"--objective: {req.objective!r} is not one of {', '.join(OBJECTIVES)}")
    if req.candidates < 2:
        raise ConfigError(f"--candidates: must be >= 2, got {req.candidates}")
    if req.jobs < 1:
        raise ConfigError(f"--jobs: must be >= 1, got {req.jobs}")
    if req.resume and req.out_dir is None:
        raise ConfigError("--resume: needs --out DIR (the folder of the search to resume)")
    if req.executor not in ("local", "slurm"):
        raise ConfigError(f"--executor: {req.executor!r} is not one of local, slurm")
    if req.slurm and req.executor != "slurm":
        raise ConfigError("--slurm: settings for --executor slurm (add --executor slurm)")
    slos = [Slo.parse(s) for s in req.slos]
    names = [s.name for s in slos]
    if len(set(names)) != len(names):
        raise ConfigError("--slo: a metric is given more than once")
    return OBJECTIVES[req.objective], slos


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

    def greedy(self, demand: Demand, goal: str) -> list[Shape]:
        return greedy_order(demand, candidate_pool(demand, self.engine), self.prices, strict=self.strict,
                            max_requests=self.engine.max_requests, limit=self.req.budget_graphs, fits=self.fits,
                            required=self.backstop, gated=self.all_prefills, goal=goal)

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

    def candidate(self, name: str, space: str, origin: str, cg_overrides: list[str], graphs: Sequence[Shape],
                  knobs: MegatronKnobs | None = None, want_shapes: bool = False) -> Candidate:
        gs = tuple(tuple(g) for g in graphs)
        return Candidate(name, space, origin, tuple(self.base_no_cg + cg_overrides), gs,
                         self.estimator.estimate(gs), knobs, want_shapes)

    def explicit(self, name: str, origin: str, graphs: Sequence[Shape]) -> Candidate:
        gs = stored_order(graphs, self.num_speculative_tokens)
        return self.candidate(name, "explicit", origin, explicit_overrides(gs, self.all_prefills), gs)
