"""The candidates of ``cgbench advise``: what a candidate is (``Candidate``, and ``Evaluated``: one with
its run), how one is made from the search's state (``make_candidate``, ``explicit_candidate``),
which were tried (``Tried``: a grid is run once), and the first candidates of both spaces
(``first_candidates``): Megatron's knobs (every distinct grid they produce, ranked by the time the
demand would take on it, spread over graph counts) and explicit lists greedily built from the
demand's shapes, as prefixes of several sizes, with the eager-free lists (greedy by steps served)
always among them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cgbench.analysis.advise.capture import CaptureEstimate
from cgbench.analysis.advise.demand import Demand, Shape
from cgbench.analysis.advise.explicit_space import (
    candidate_pool,
    explicit_overrides,
    greedy_order,
    prefix_sizes,
    stored_order,
)
from cgbench.analysis.advise.megatron_space import MegatronKnobs, megatron_space, spread_pick
from cgbench.analysis.advise.prices import cover_matrix, shape_columns
from cgbench.analysis.advise.runs import Evaluator
from cgbench.analysis.advise.search import Search
from cgbench.config.overrides import override_key


@dataclass(frozen=True)
class Candidate:
    name: str
    space: str  # default | megatron | explicit
    origin: str  # how it was built, in words
    overrides: tuple[str, ...]  # the full override list of its run
    graphs: tuple[Shape, ...]  # stored order
    estimate: CaptureEstimate
    knobs: MegatronKnobs | None = None
    want_shapes: bool = False


@dataclass
class Evaluated:
    cand: Candidate
    metrics: dict[str, Any]
    graph_usage: list[dict[str, Any]]
    shapes: list[list[int]] | None
    reused: bool
    violations: list[str] = field(default_factory=list)
    rank: int = 0

    @property
    def feasible(self) -> bool:
        return not self.violations


def evaluated_from(c: Candidate, rec: dict[str, Any], reused: bool) -> Evaluated:
    return Evaluated(c, rec["metrics"], rec.get("graph_usage") or [], rec.get("shapes"), reused)


def make_candidate(s: Search, name: str, space: str, origin: str, cg_overrides: list[str], graphs: Sequence[Shape],
                   knobs: MegatronKnobs | None = None, want_shapes: bool = False) -> Candidate:
    gs = tuple(tuple(g) for g in graphs)
    return Candidate(name, space, origin, tuple(s.base_no_cg + cg_overrides), gs,
                     s.estimator.estimate(gs), knobs, want_shapes)


def explicit_candidate(s: Search, name: str, origin: str, graphs: Sequence[Shape]) -> Candidate:
    gs = stored_order(graphs, s.num_speculative_tokens)
    return make_candidate(s, name, "explicit", origin, explicit_overrides(gs, s.all_prefills), gs)


def greedy(s: Search, demand: Demand, goal: str) -> list[Shape]:
    return greedy_order(demand, candidate_pool(demand, s.engine), s.prices, strict=s.strict,
                        max_requests=s.engine.max_requests, limit=s.req.budget_graphs, fits=s.fits,
                        required=s.backstop, gated=s.all_prefills, goal=goal)


def candidate_key(c: Candidate) -> tuple:
    gating = next((o for o in c.overrides if override_key(o) == "cg.all_prefills"), "")
    return (c.graphs, gating) if c.space != "default" else ("default",)


class Tried:
    """The candidates of one search so far: the keys of those tried (``seen``: a grid runs once) and
    every run, in the order they ran (``evaluated``)."""

    def __init__(self, s: Search, ev: Evaluator, default: Candidate, default_ev: Evaluated) -> None:
        self.s, self.ev = s, ev
        self.seen = {candidate_key(default)}
        self.evaluated: list[Evaluated] = [default_ev]

    def fresh(self, cands: list[Candidate]) -> list[Candidate]:
        """The candidates not tried yet that have graphs and fit the budgets (now marked tried)."""
        out = []
        for c in cands:
            if c.graphs and candidate_key(c) not in self.seen and self.s.fits(c.graphs):
                self.seen.add(candidate_key(c))
                out.append(c)
        return out

    def run(self, cands: list[Candidate], stage: str) -> list[Evaluated]:
        self.s.progress(stage, len(cands))
        res = [evaluated_from(c, rec, reused) for c, (rec, reused) in
               zip(cands, self.ev.run([(c.name, c.overrides, c.want_shapes) for c in cands]), strict=True)]
        self.evaluated.extend(res)
        return res


def first_candidates(s: Search, demand: Demand, tried: Tried) -> list[Candidate]:
    """The first candidates of both spaces, run: ``3/4`` of ``--candidates``, at least 2."""
    n = s.req.candidates
    n_stage1 = max(2, (3 * n + 3) // 4)
    megatron = megatron_candidates(s, demand, n_stage1 - n_stage1 // 2)
    explicit_order = greedy(s, demand, s.goal)
    explicit = [explicit_candidate(s, f"greedy-{k}", f"greedy list ({GOAL_WORDS[s.goal]}), first {k} picks on the "
                                   "profile demand", explicit_order[:k])
                for k in prefix_sizes(len(explicit_order), n_stage1)]
    # the eager-free lists: greedy by steps served, so the search holds a grid without eager steps
    # whenever the budget allows one, whatever the objective (the report shows the trade-off)
    cover_order = explicit_order if s.goal == "coverage" else greedy(s, demand, "coverage")
    eager_free = tried.fresh(coverage_candidates(s, demand, cover_order, "cover", "the profile demand"))
    explicit = tried.fresh(explicit)
    n_meg = min(len(megatron), max(n_stage1 // 2, n_stage1 - len(explicit) - len(eager_free)))
    megatron = tried.fresh(megatron[:n_meg])
    stage1 = megatron + eager_free + spread(explicit, n_stage1 - len(megatron) - len(eager_free))
    for c in explicit:
        if c not in stage1:
            tried.seen.discard(candidate_key(c))
    tried.run(stage1, "candidates")
    return stage1


GOAL_WORDS = {"time": "most time saved first", "coverage": "most steps served first"}


def coverage_candidates(s: Search, demand: Demand, order: list[Shape], prefix: str,
                         source: str) -> list[Candidate]:
    """Prefixes of a coverage-greedy list that serve every step of ``demand``: the shortest such
    prefix and the whole list (the rest of the list only lowers padding)."""
    if not order:
        return []
    shapes = sorted(demand.counts)
    served = cover_matrix(order, shape_columns(shapes), s.strict)
    first_full = next((k for k in range(1, len(order) + 1) if served[:k].any(axis=0).all()), None)
    sizes = [k for k in dict.fromkeys([first_full, len(order)]) if k]
    def why(k: int) -> str:
        if first_full is None:
            return " (serves as many steps as the budgets allow, not all)"
        return " (the shortest that serves every step)" if k == first_full else " (later picks lower padding)"

    return [explicit_candidate(s, f"{prefix}-{k}", f"greedy list (most steps served first), first {k} picks on "
                               f"{source}" + why(k), order[:k]) for k in sizes]


def spread(cands: list[Candidate], n: int) -> list[Candidate]:
    """``n`` of the candidates (ordered by size), spread evenly, always with the largest."""
    if n >= len(cands):
        return list(cands)
    if n <= 0:
        return []
    idx = sorted({round(i * (len(cands) - 1) / max(1, n - 1)) for i in range(n)})
    return [cands[i] for i in idx]


def megatron_candidates(s: Search, demand: Demand, n: int) -> list[Candidate]:
    """Distinct Megatron grids within the budgets, ordered so that the first ``n`` are the
    best-predicted of bands of graph counts, then the rest best-predicted first."""
    space = [(k, gs, gating) for k, gs, gating in megatron_space(s.engine) if s.fits(gs)]
    score = s.prices.scorer(demand, strict=s.strict)
    scored = [(score(gs, gating), len(gs), i) for i, (_, gs, gating) in enumerate(space)]
    first = spread_pick(scored, n)
    order = first + [i for _, _, i in sorted(scored) if i not in set(first)]
    out = []
    for i in order:
        k, gs, _ = space[i]
        label = knobs_label(k)
        out.append(make_candidate(s, label, "megatron", "Megatron's arguments: " + k.command,
                                  k.overrides(), gs, knobs=k))
    return out


def knobs_label(k: MegatronKnobs) -> str:
    """A short name: ``n16-exp-allpf``, ``n8-lin-m4-c1024``, ``n6-exp-decode``."""
    parts = [f"n{k.num_cuda_graphs}", k.distribution[:3]]
    if not k.non_decode:
        return "-".join(parts + ["decode"])
    if k.distribution == "linear":
        parts.append(f"m{k.mixed_prefill_count}")
    parts.append("allpf" if k.all_prefills else f"c{k.cuda_graph_max_tokens}")
    return "-".join(parts)
