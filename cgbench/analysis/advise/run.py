"""``cgbench advise``: the captured-graph grid a workload needs, under a graph, memory and capture budget.

The search (``docs/advise.md`` explains it):

1. **profile**: run the given config (its grid is "the default") and, when it gates, the
   same config without gating (``policy=budget``), recording every step's real shape: the demand.
2. **candidates**: Megatron's own knobs (every distinct grid they produce, ranked by the time the
   demand would take on it, spread over graph counts), and explicit lists, greedily built from the
   demand's shapes, as prefixes of several sizes: by time saved per graph against padding (or, for
   the ``eager_fraction`` objective, by steps served), and always the eager-free lists (greedy by
   steps served, then padding), so the search holds a grid without eager steps whenever the budget
   allows one, even where the time model prices some steps cheaper eager.
3. **refine**: re-build the explicit list on the demand of the best explicit run (gating changes
   which shapes run), drop the graphs a candidate never used (but the backstops), and, when no run
   was eager-free, re-build the eager-free list on the shapes of the closest one.
4. **rank** every candidate the simulator ran on the workload: feasible ones (completed, within the
   budgets and SLOs) by the objective, then fewer graphs; the Pareto front is objective vs graphs;
   the best feasible candidate without eager steps is reported next to the recommendation.
5. **robustness**: re-run the recommendation and the default on a second seed (and workload).

Every candidate is a plain ``cgbench run`` of ``OVERRIDES`` plus its ``cg`` overrides, so its
figures are exactly what that run prints. The search is deterministic for a seed; ``jobs``
workers give the same results as one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from cgbench.analysis.advise.capture import CaptureEstimator
from cgbench.analysis.advise.goals import OBJECTIVES, Slo
from cgbench.analysis.advise.report import build_report, check_entry
from cgbench.analysis.advise.runs import (
    Candidate,
    Evaluated,
    Evaluator,
    explicit_overrides,
    is_cg,
    without_keys,
)
from cgbench.analysis.advise.search import AdviseRequest, Search, check_request
from cgbench.analysis.advise.space import (
    Demand,
    MegatronKnobs,
    Shape,
    ShapePrices,
    cover_matrix,
    megatron_space,
    prefix_sizes,
    shape_columns,
    spread_pick,
)
from cgbench.analysis.baselines import GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT, baseline_overrides, baselines
from cgbench.config.overrides import override_key
from cgbench.config.schema import ConfigError
from cgbench.results.names import number_at

# what the recommendation is compared with besides the default grid (analysis/baselines.py)
ADVISE_BASELINES = (GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT)

__all__ = ["OBJECTIVES", "AdviseRequest", "Slo", "check_request", "explicit_overrides", "run_advise"]


def _setup(req: AdviseRequest, progress: Callable[[str, int | None], None]) -> tuple[Search, Candidate]:
    from cgbench.backends.sim.factory import make_cost_model
    from cgbench.config.compose import load_config
    from cgbench.engine.policy_registry import make_policy
    from cgbench.grids.build import build_grid

    objective, slos = check_request(req)
    cfg = load_config(list(req.overrides))
    if cfg.backend.name != "sim":
        raise ConfigError(f"backend: advise runs every candidate in the simulator; backend={cfg.backend.name} "
                          "is not supported (use backend=sim)")
    if req.check_workload:
        keys = {override_key(o) for o in req.check_workload}
        grid_keys = sorted(k for k in keys if k == "cg" or k.startswith("cg."))
        if grid_keys:  # the re-check runs the recommended grid: a grid of its own would replace it
            raise ConfigError(f"--check-workload: {', '.join(grid_keys)} sets the grid, which is what advise "
                              "recommends; a re-check changes the workload (workload=..., workload.*, seed, "
                              "engine limits), not the grid")
        try:
            other = load_config(without_keys(req.overrides, keys) + list(req.check_workload))
        except ConfigError as e:
            raise ConfigError(f"--check-workload: {e}") from None
        if asdict(other) == asdict(cfg):
            raise ConfigError(f"--check-workload: {' '.join(req.check_workload)} changes nothing "
                              "(it is the searched workload)")
    if req.check_seed is not None and req.check_seed == cfg.seed:
        raise ConfigError(f"--check-seed: {req.check_seed} is the search's own seed; give another")
    # the re-check's config is the user's: refused now, before any candidate runs, not as failed rows
    seed = req.check_seed if req.check_seed is not None else cfg.seed + 1
    try:
        load_config(without_keys(req.overrides, {"seed"}) + [f"seed={seed}"])
    except ConfigError as e:
        option = "--check-seed" if req.check_seed is not None else f"seed (the re-check runs seed={seed})"
        raise ConfigError(f"{option}: {e}") from None
    pricer = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    search = Search(req=req, objective=objective, slos=slos, base=list(req.overrides),
                    base_no_cg=[o for o in req.overrides if not is_cg(o)], strict=cfg.model.kind == "hybrid",
                    all_prefills=cfg.cg.all_prefills, num_speculative_tokens=cfg.engine.num_speculative_tokens,
                    estimator=CaptureEstimator(cfg.model, cfg.hardware, cfg.engine),
                    prices=ShapePrices(pricer, gating=make_policy(cfg.policy).gates),
                    engine=cfg.engine, seed=cfg.seed, progress=progress)
    search.gating = make_policy(cfg.policy).gates and cfg.cg.all_prefills
    search.default_kind = cfg.cg.kind
    search.baselines, search.baseline_notes = baselines(
        cfg, list(req.overrides), launch_line=req.launch_line, kinds=ADVISE_BASELINES, subject="the default")
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    gs = tuple(tuple(g) for g in grid.graphs)
    c = cfg.cg
    knobs = None
    if c.kind == "megatron" and c.sizes_per_octave == 1 and c.p_per_octave == 1 and c.num_cuda_graphs is not None:
        knobs = MegatronKnobs(c.num_cuda_graphs, c.distribution, c.mixed_prefill_count, c.all_prefills,
                              c.cuda_graph_max_tokens, c.non_decode)
    default = Candidate("default", "default", f"the given config's grid (cg={c.kind})", tuple(req.overrides),
                        gs, search.estimator.estimate(gs), knobs=knobs, want_shapes=True)
    return search, default


def _key(c: Candidate) -> tuple:
    gating = next((o for o in c.overrides if override_key(o) == "cg.all_prefills"), "")
    return (c.graphs, gating) if c.space != "default" else ("default",)


def run_advise(req: AdviseRequest, *, progress: Callable[[str, int | None], None] | None = None,
               note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the search and return the report document (see ``docs/advise.md``); ``note`` gets one-line
    messages of the executor (a SLURM submission)."""
    say = progress or (lambda text, total: None)
    search, default = _setup(req, say)
    ev = Evaluator(req.jobs, req.out_dir, req.resume, on_done=lambda label, reused: say(label, None),
                   executor=_executor(req, note))
    try:
        return _search(search, default, ev)
    except BaseException:
        ev.close(abort=True)
        raise
    finally:
        ev.close()


def _executor(req: AdviseRequest, note: Callable[[str], None] | None):
    """``--executor slurm``: the candidates run as SLURM array tasks (their files under ``<out>/slurm/``,
    which the compute nodes must share); None: the local executor of ``--jobs``."""
    if req.executor != "slurm":
        return None
    from cgbench.analysis.sweep.executor_slurm import SlurmExecutor, slurm_folder

    assert req.out_dir is not None
    return SlurmExecutor(slurm_folder(req.out_dir), req.slurm, parallelism=req.jobs if req.jobs > 1 else None,
                         job_name="cgbench-advise", say=note, unit="candidate")


def _evaluated(c: Candidate, rec: dict[str, Any], reused: bool) -> Evaluated:
    return Evaluated(c, rec["metrics"], rec.get("graph_usage") or [], rec.get("shapes"), reused)


def _search(s: Search, default: Candidate, ev: Evaluator) -> dict[str, Any]:
    n = s.req.candidates
    # 1. profile: the default run and, when it gates, the same workload without gating
    profile_jobs = [("default", default.overrides, True)]
    if s.gating:
        profile_jobs.append(("profile without gating", tuple(baseline_overrides(GATING_OFF, s.base)), True))
    s.progress("profile", len(profile_jobs))
    recs = ev.run(profile_jobs)
    for (label, _, _), (rec, _) in zip(profile_jobs, recs, strict=True):
        if "shapes" not in rec:
            raise ConfigError(f"advise: the {label} run failed: {rec['metrics'].get('diagnosis')}")
    # the baselines on the same workload (the gating-off one is the profile's second run)
    ran = {ovr: rec for (_, ovr, _), (rec, _) in zip(profile_jobs, recs, strict=True)}
    todo = [(f"baseline: {b.name}", b.overrides, False) for b in s.baselines if b.overrides not in ran]
    if todo:
        s.progress("baselines", len(todo))
        ran.update({ovr: rec for (_, ovr, _), (rec, _) in zip(todo, ev.run(todo), strict=True)})
    baseline_runs = [(b, ran[b.overrides]["metrics"]) for b in s.baselines]
    default_ev = _evaluated(default, *recs[0])
    demand = Demand.of(recs[0][0]["shapes"])
    for rec, _ in recs[1:]:
        demand = demand.merged(Demand.of(rec["shapes"]))

    s.set_backstop(demand)
    seen = {_key(default)}
    evaluated: list[Evaluated] = [default_ev]

    def fresh(cands: list[Candidate]) -> list[Candidate]:
        out = []
        for c in cands:
            if c.graphs and _key(c) not in seen and s.fits(c.graphs):
                seen.add(_key(c))
                out.append(c)
        return out

    def run(cands: list[Candidate], stage: str) -> list[Evaluated]:
        s.progress(stage, len(cands))
        res = [_evaluated(c, rec, reused) for c, (rec, reused) in
               zip(cands, ev.run([(c.name, c.overrides, c.want_shapes) for c in cands]), strict=True)]
        evaluated.extend(res)
        return res

    # 2. candidates of both spaces
    n_stage1 = max(2, (3 * n + 3) // 4)
    megatron = _megatron_candidates(s, demand, n_stage1 - n_stage1 // 2)
    explicit_order = s.greedy(demand, s.goal)
    explicit = [s.explicit(f"greedy-{k}", f"greedy list ({_GOAL_WORDS[s.goal]}), first {k} picks on the "
                           "profile demand", explicit_order[:k]) for k in prefix_sizes(len(explicit_order), n_stage1)]
    # the eager-free lists: greedy by steps served, so the search holds a grid without eager steps
    # whenever the budget allows one, whatever the objective (the report shows the trade-off)
    cover_order = explicit_order if s.goal == "coverage" else s.greedy(demand, "coverage")
    eager_free = fresh(_coverage_candidates(s, demand, cover_order, "cover", "the profile demand"))
    explicit = fresh(explicit)
    n_meg = min(len(megatron), max(n_stage1 // 2, n_stage1 - len(explicit) - len(eager_free)))
    megatron = fresh(megatron[:n_meg])
    stage1 = megatron + eager_free + _spread(explicit, n_stage1 - len(megatron) - len(eager_free))
    for c in explicit:
        if c not in stage1:
            seen.discard(_key(c))
    run(stage1, "candidates")

    # 3. refine: the explicit list rebuilt on what the best explicit run actually ran, and the best
    # candidates without the graphs they never used
    budget_left = n - len(stage1)
    refined: list[Candidate] = []
    ranked = _rank(s, evaluated)
    best_exp = next((e for e in ranked if e.cand.space == "explicit"), None)
    if best_exp is not None and budget_left > 0:
        s.progress("shapes of the best explicit list", 1)
        (traced, _), = ev.run([(f"shapes of {best_exp.cand.name}", best_exp.cand.overrides, True)])
        demand2 = demand.merged(Demand.of(traced["shapes"]))
        order2 = s.greedy(demand2, s.goal)
        best_sizes = list(dict.fromkeys(len(e.cand.graphs) for e in ranked if e.cand.space == "explicit"))
        sizes = [min(k, len(order2)) for k in best_sizes[:2]] + [len(order2)]
        refined += fresh([s.explicit(f"refined-{k}", f"greedy list, first {k} picks on the demand of "
                                     f"{best_exp.cand.name}'s run", order2[:k]) for k in dict.fromkeys(sizes) if k])
    for e in ranked:
        if e.metrics.get("outcome") != "completed":
            continue
        used = {tuple(u["graph"]) for u in e.graph_usage if u["hits"] > 0} | set(s.backstop)
        kept = [g for g in e.cand.graphs if g in used]
        if kept and len(kept) < len(e.cand.graphs):
            refined += fresh([s.explicit(f"pruned-{e.cand.name}", f"{e.cand.name} without its "
                                         f"{len(e.cand.graphs) - len(kept)} unused graphs", kept)])
    run(refined[:max(0, budget_left)], "refinement")

    # the eager-free lists again on the demand of their own runs, when none ran without eager steps
    # (a run on another grid can make shapes the profile never made)
    if not any(_eager_free(e) for e in evaluated):
        near = min((e for e in evaluated if e.cand.name.startswith("cover-")
                    and e.metrics.get("outcome") == "completed"),
                   key=lambda e: (e.metrics.get("eager_steps", math.inf), e.cand.name), default=None)
        if near is not None:
            s.progress("shapes of the eager-free list", 1)
            (traced, _), = ev.run([(f"shapes of {near.cand.name}", near.cand.overrides, True)])
            demand3 = demand.merged(Demand.of(traced["shapes"]))
            run(fresh(_coverage_candidates(s, demand3, s.greedy(demand3, "coverage"), "recover",
                                           f"the demand of {near.cand.name}'s run")), "eager-free refinement")

    # 4. rank, 5. robustness
    ranked = _rank(s, evaluated)
    recommended = next((e for e in ranked if e.feasible), None)
    checks = _robustness(s, ev, recommended, default_ev)
    return build_report(s, ranked, recommended, default_ev, checks, demand, ev, baseline_runs)


_GOAL_WORDS = {"time": "most time saved first", "coverage": "most steps served first"}


def _eager_free(e: Evaluated) -> bool:
    return e.metrics.get("outcome") == "completed" and e.metrics.get("eager_steps") == 0


def _coverage_candidates(s: Search, demand: Demand, order: list[Shape], prefix: str,
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

    return [s.explicit(f"{prefix}-{k}", f"greedy list (most steps served first), first {k} picks on {source}"
                       + why(k), order[:k]) for k in sizes]


def _spread(cands: list[Candidate], n: int) -> list[Candidate]:
    """``n`` of the candidates (ordered by size), spread evenly, always with the largest."""
    if n >= len(cands):
        return list(cands)
    if n <= 0:
        return []
    idx = sorted({round(i * (len(cands) - 1) / max(1, n - 1)) for i in range(n)})
    return [cands[i] for i in idx]


def _megatron_candidates(s: Search, demand: Demand, n: int) -> list[Candidate]:
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
        out.append(s.candidate(label, "megatron", "Megatron's arguments: " + k.command,
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


def _rank(s: Search, evaluated: list[Evaluated]) -> list[Evaluated]:
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


# ---------------------------------------------------------------------------------------------- robustness


def _robustness(s: Search, ev: Evaluator, rec: Evaluated | None, default: Evaluated) -> list[dict[str, Any]]:
    if rec is None:
        return []
    checks: list[tuple[str, list[str], str]] = []  # (label, overrides, the option of the request that asks)
    seed = s.req.check_seed if s.req.check_seed is not None else s.seed + 1
    checks.append((f"seed={seed}", [f"seed={seed}"],
                   "--check-seed" if s.req.check_seed is not None else f"seed (the re-check runs seed={seed})"))
    if s.req.check_workload:
        checks.append((" ".join(s.req.check_workload), list(s.req.check_workload),
                       f"--check-workload {' '.join(s.req.check_workload)}"))
    jobs, options = [], []
    for _, extra, option in checks:
        keys = {override_key(o) for o in extra}
        for e in (rec, default):
            jobs.append((f"check {e.cand.name} {' '.join(extra)}",
                         tuple(without_keys(e.cand.overrides, keys) + extra), False))
            options.append(option)
    if rec is default:
        jobs, options = jobs[::2], options[::2]
    s.progress("robustness", len(jobs))
    # every re-check is the user's request: a config it refuses is bad input, not a failed row
    results = ev.run(jobs, requested_by=options.__getitem__)
    out = []
    step = 1 if rec is default else 2
    for i, (label, extra, _) in enumerate(checks):
        r = results[i * step][0]["metrics"]
        d = results[i * step + step - 1][0]["metrics"]
        out.append(check_entry(s, label, extra, rec, default, r, d))
    return out
