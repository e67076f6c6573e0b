"""The refinement of ``cgbench advise``: the explicit list re-built on the demand of the best explicit
run (gating changes which shapes run), the candidates without the graphs they never used (but the
backstops), and, when no run was eager-free, the eager-free list re-built on the shapes of the
closest one (a run on another grid can make shapes the profile never made)."""

from __future__ import annotations

import math

from cgbench.analysis.advise.candidates import (
    Candidate,
    Evaluated,
    Tried,
    coverage_candidates,
    explicit_candidate,
    greedy,
)
from cgbench.analysis.advise.demand import Demand
from cgbench.analysis.advise.rank import rank
from cgbench.analysis.advise.runs import Evaluator
from cgbench.analysis.advise.search import Search


def refine(s: Search, demand: Demand, tried: Tried, ev: Evaluator, budget_left: int) -> None:
    """The explicit list rebuilt on what the best explicit run actually ran, and the best candidates
    without the graphs they never used: at most ``budget_left`` of them run."""
    refined: list[Candidate] = []
    ranked = rank(s, tried.evaluated)
    best_exp = next((e for e in ranked if e.cand.space == "explicit"), None)
    if best_exp is not None and budget_left > 0:
        s.progress("shapes of the best explicit list", 1)
        (traced, _), = ev.run([(f"shapes of {best_exp.cand.name}", best_exp.cand.overrides, True)])
        demand2 = demand.merged(Demand.of(traced["shapes"]))
        order2 = greedy(s, demand2, s.goal)
        best_sizes = list(dict.fromkeys(len(e.cand.graphs) for e in ranked if e.cand.space == "explicit"))
        sizes = [min(k, len(order2)) for k in best_sizes[:2]] + [len(order2)]
        refined += tried.fresh([explicit_candidate(s, f"refined-{k}", f"greedy list, first {k} picks on the "
                                                   f"demand of {best_exp.cand.name}'s run", order2[:k])
                                for k in dict.fromkeys(sizes) if k])
    for e in ranked:
        if e.metrics.get("outcome") != "completed":
            continue
        used = {tuple(u["graph"]) for u in e.graph_usage if u["hits"] > 0} | set(s.backstop)
        kept = [g for g in e.cand.graphs if g in used]
        if kept and len(kept) < len(e.cand.graphs):
            refined += tried.fresh([explicit_candidate(s, f"pruned-{e.cand.name}", f"{e.cand.name} without its "
                                                       f"{len(e.cand.graphs) - len(kept)} unused graphs", kept)])
    tried.run(refined[:max(0, budget_left)], "refinement")


def recover_eager_free(s: Search, demand: Demand, tried: Tried, ev: Evaluator) -> None:
    """The eager-free lists again on the demand of their own runs, when none ran without eager steps."""
    if not any(eager_free(e) for e in tried.evaluated):
        near = min((e for e in tried.evaluated if e.cand.name.startswith("cover-")
                    and e.metrics.get("outcome") == "completed"),
                   key=lambda e: (e.metrics.get("eager_steps", math.inf), e.cand.name), default=None)
        if near is not None:
            s.progress("shapes of the eager-free list", 1)
            (traced, _), = ev.run([(f"shapes of {near.cand.name}", near.cand.overrides, True)])
            demand3 = demand.merged(Demand.of(traced["shapes"]))
            tried.run(tried.fresh(coverage_candidates(s, demand3, greedy(s, demand3, "coverage"), "recover",
                                                      f"the demand of {near.cand.name}'s run")),
                      "eager-free refinement")


def eager_free(e: Evaluated) -> bool:
    return e.metrics.get("outcome") == "completed" and e.metrics.get("eager_steps") == 0
