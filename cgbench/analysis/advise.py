"""``cgbench advise``: the captured-graph grid a workload needs, under a graph, memory and capture budget.

The search (``docs/advise.md`` explains it):

1. **profile**: run the given config (its grid is "the default") and, when its policy gates, the
   same config without gating (``policy=budget``), recording every step's real shape: the demand.
2. **candidates**: Megatron's own knobs (every distinct grid they produce, ranked by the time the
   demand would take on it, spread over graph counts), and explicit lists, greedily built from the
   demand's shapes (time saved per graph against padding), as prefixes of several sizes.
3. **refine**: re-build the explicit list on the demand of the best explicit run (gating changes
   which shapes run), and drop the graphs a candidate never used (but the backstops).
4. **rank** every candidate the simulator ran on the workload: feasible ones (completed, within the
   budgets and SLOs) by the objective, then fewer graphs; the Pareto front is objective vs graphs.
5. **robustness**: re-run the recommendation and the default on a second seed (and workload).

Every candidate is a plain ``cgbench run`` of ``OVERRIDES`` plus its ``cg`` overrides, so its
figures are exactly what that run prints. The search is deterministic for a seed; ``jobs``
workers give the same results as one.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cgbench.analysis.advise_capture import CaptureEstimate, CaptureEstimator
from cgbench.analysis.advise_space import (
    Demand,
    MegatronKnobs,
    Shape,
    ShapePrices,
    candidate_pool,
    command_line,
    greedy_order,
    megatron_space,
    prefix_sizes,
    shape_counts,
    spread_pick,
    stored_order,
)
from cgbench.config.schema import ConfigError

REPORT_KIND = "cgbench-advise"
RUN_KIND = "cgbench-advise-run"


@dataclass(frozen=True)
class Objective:
    name: str
    metric: str  # dotted path in the run JSON's metrics
    maximize: bool
    unit: str


OBJECTIVES = {
    "throughput": Objective("throughput", "output_throughput_tok_s", True, "tok/s"),
    "ttft_p99": Objective("ttft_p99", "ttft_ms.p99", False, "ms"),
    "tpot_p99": Objective("tpot_p99", "tpot_ms.p99", False, "ms"),
    "eager_fraction": Objective("eager_fraction", "eager_step_fraction", False, ""),
}

# --slo NAME=VALUE: (metric, True when VALUE is an upper bound)
SLO_METRICS = {
    "ttft_p99": ("ttft_ms.p99", True),
    "tpot_p99": ("tpot_ms.p99", True),
    "eager_fraction": ("eager_step_fraction", True),
    "max_wait": ("max_cg_wait_iters", True),
    "throughput": ("output_throughput_tok_s", False),
}


@dataclass(frozen=True)
class Slo:
    name: str
    metric: str
    bound: float
    upper: bool

    @classmethod
    def parse(cls, text: str) -> Slo:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or name not in SLO_METRICS:
            raise ConfigError(f"--slo: {text!r} must be NAME=VALUE with NAME one of {', '.join(SLO_METRICS)}")
        try:
            bound = float(value)
        except ValueError:
            raise ConfigError(f"--slo {name}: {value!r} is not a number") from None
        if not math.isfinite(bound) or bound < 0:
            raise ConfigError(f"--slo {name}: must be a finite number >= 0, got {value}")
        metric, upper = SLO_METRICS[name]
        return cls(name, metric, bound, upper)

    def violated_by(self, metrics: dict[str, Any]) -> str | None:
        v = metric_value(metrics, self.metric)
        if v is None:
            return f"{self.name}: no {self.metric}"
        if (v > self.bound) if self.upper else (v < self.bound):
            return f"{self.name} {v:g} {'>' if self.upper else '<'} {self.bound:g}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "bound": self.bound,
                "kind": "at most" if self.upper else "at least"}


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


def check_request(req: AdviseRequest) -> tuple[Objective, list[Slo]]:
    """Budgets, objective and search settings; ConfigError naming the option."""
    if isinstance(req.budget_graphs, bool) or not isinstance(req.budget_graphs, int) or req.budget_graphs < 1:
        raise ConfigError(f"--budget-graphs: must be an integer >= 1, got {req.budget_graphs}")
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
    slos = [Slo.parse(s) for s in req.slos]
    names = [s.name for s in slos]
    if len(set(names)) != len(names):
        raise ConfigError("--slo: a metric is given more than once")
    return OBJECTIVES[req.objective], slos


def metric_value(metrics: dict[str, Any], dotted: str) -> float | None:
    v: Any = metrics
    for part in dotted.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# ---------------------------------------------------------------------------------------------- overrides


def override_key(o: str) -> str:
    return o.partition("=")[0].lstrip("+~")


def _is_cg(o: str) -> bool:
    k = override_key(o)
    return k == "cg" or k.startswith("cg.")


def without_keys(overrides: Sequence[str], keys: set[str]) -> list[str]:
    return [o for o in overrides if override_key(o) not in keys]


def graphs_override(graphs: Sequence[Shape]) -> str:
    return "cg.graphs=[" + ",".join(f"[{T},{P},{D}]" for T, P, D in graphs) + "]"


def explicit_overrides(graphs: Sequence[Shape], all_prefills: bool) -> list[str]:
    return ["cg=explicit", f"cg.all_prefills={str(all_prefills).lower()}", "cg.non_decode=true",
            graphs_override(graphs)]


# ---------------------------------------------------------------------------------------------- candidates


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


def evaluate(overrides: tuple[str, ...], want_shapes: bool) -> dict[str, Any]:
    """One candidate: a plain run of ``overrides`` (worker-process entry point)."""
    from cgbench.config.compose import load_config
    from cgbench.pipeline import run_point

    doc = run_point(load_config(list(overrides)), list(overrides), trace=want_shapes)
    rec = {"kind": RUN_KIND, "overrides": list(overrides), "metrics": doc["metrics"],
           "graph_usage": doc["graph_usage"]}
    if want_shapes:
        rec["shapes"] = shape_counts(doc["steps"])
    return rec


def _failed(overrides: tuple[str, ...], e: BaseException) -> dict[str, Any]:
    text = str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
    return {"kind": RUN_KIND, "overrides": list(overrides), "graph_usage": [],
            "metrics": {"outcome": "failed", "diagnosis": text}}


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


class Evaluator:
    """Runs candidates (in worker processes when ``jobs > 1``), keeps each result under
    ``out_dir/runs/`` and, with ``resume``, reuses a kept result of the same overrides."""

    def __init__(self, jobs: int, out_dir: Path | None, resume: bool,
                 on_done: Callable[[str, bool], None] | None = None) -> None:
        self.jobs, self.out_dir, self.resume, self.on_done = jobs, out_dir, resume, on_done
        self._pool: ProcessPoolExecutor | None = None
        self.ran = self.reused = 0

    def path(self, overrides: tuple[str, ...]) -> Path | None:
        if self.out_dir is None:
            return None
        digest = hashlib.sha256("\n".join(overrides).encode()).hexdigest()[:16]
        return self.out_dir / "runs" / f"{digest}.json"

    def _kept(self, overrides: tuple[str, ...], want_shapes: bool) -> dict[str, Any] | None:
        path = self.path(overrides)
        if not self.resume or path is None or not path.is_file():
            return None
        from cgbench.config.jsonio import read_json

        try:
            rec = read_json(path)
        except ConfigError:
            return None
        ok = (isinstance(rec, dict) and rec.get("kind") == RUN_KIND and rec.get("overrides") == list(overrides)
              and isinstance(rec.get("metrics"), dict) and (not want_shapes or "shapes" in rec))
        return rec if ok else None

    def _store(self, rec: dict[str, Any]) -> None:
        path = self.path(tuple(rec["overrides"]))
        if path is not None:
            from cgbench.results.document import write_json_atomic

            write_json_atomic(path, rec)

    def run(self, jobs: list[tuple[str, tuple[str, ...], bool]]) -> list[tuple[dict[str, Any], bool]]:
        """``[(label, overrides, want_shapes)]`` -> ``[(record, reused)]`` in the same order."""
        out: list[tuple[dict[str, Any], bool] | None] = [None] * len(jobs)
        todo = []
        for i, (label, ovr, shapes) in enumerate(jobs):
            rec = self._kept(ovr, shapes)
            if rec is not None:
                out[i] = (rec, True)
                self.reused += 1
                if self.on_done:
                    self.on_done(label, True)
            else:
                todo.append(i)
        if self.jobs == 1 or len(todo) <= 1:
            for i in todo:
                label, ovr, shapes = jobs[i]
                try:
                    rec = evaluate(ovr, shapes)
                except Exception as e:  # one broken candidate must not lose the search
                    rec = _failed(ovr, e)
                out[i] = (self._finish(label, rec), False)
        else:
            pool = self._get_pool()
            running: dict[Future, int] = {pool.submit(evaluate, jobs[i][1], jobs[i][2]): i for i in todo}
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = running.pop(fut)
                    try:
                        rec = fut.result()
                    except Exception as e:
                        rec = _failed(jobs[i][1], e)
                    out[i] = (self._finish(jobs[i][0], rec), False)
        return [o for o in out if o is not None]

    def _finish(self, label: str, rec: dict[str, Any]) -> dict[str, Any]:
        if rec["metrics"]["outcome"] != "failed":  # a failed run is retried by --resume
            self._store(rec)
        self.ran += 1
        if self.on_done:
            self.on_done(label, False)
        return rec

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the parent may run Rich's refresh thread
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_worker_init)
        return self._pool

    def close(self, *, abort: bool = False) -> None:
        if self._pool is None:
            return
        if abort:
            busy = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            for proc in busy:
                proc.terminate()
        else:
            self._pool.shutdown(wait=True)
        self._pool = None


# ---------------------------------------------------------------------------------------------- search


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
    policy: str
    progress: Callable[[str, int | None], None]
    gating: bool = False
    backstop: list[Shape] = field(default_factory=list)

    def set_backstop(self, demand: Demand) -> None:
        """Graphs every explicit list keeps, used or not, so another run of the workload does not
        fall off the list: decode graphs doubling from above the largest decode batch seen up to
        ``max_requests`` (a decode graph serves every smaller decode step, with at most 2x padding),
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
        self.backstop = [(D * q, 0, D) for D in sizes]
        if self.gating:
            self.backstop.append((min(e.max_tokens, e.max_sequence_length), 1, 0))

    def fits(self, graphs: Sequence[Shape]) -> bool:
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
        return out

    def candidate(self, name: str, space: str, origin: str, cg_overrides: list[str], graphs: Sequence[Shape],
                  knobs: MegatronKnobs | None = None, want_shapes: bool = False) -> Candidate:
        gs = tuple(tuple(g) for g in graphs)
        return Candidate(name, space, origin, tuple(self.base_no_cg + cg_overrides), gs,
                         self.estimator.estimate(gs), knobs, want_shapes)

    def explicit(self, name: str, origin: str, graphs: Sequence[Shape]) -> Candidate:
        gs = stored_order(graphs, self.num_speculative_tokens)
        return self.candidate(name, "explicit", origin, explicit_overrides(gs, self.all_prefills), gs)


def _setup(req: AdviseRequest, progress: Callable[[str, int | None], None]) -> tuple[Search, Candidate]:
    from cgbench.backends.sim.factory import make_cost_model
    from cgbench.config.compose import load_config
    from cgbench.engine.policies import make_policy
    from cgbench.grids.build import build_grid

    objective, slos = check_request(req)
    cfg = load_config(list(req.overrides))
    if cfg.backend.name != "sim":
        raise ConfigError(f"backend: advise runs every candidate in the simulator; backend={cfg.backend.name} "
                          "is not supported (use backend=sim)")
    if req.check_workload:
        keys = {override_key(o) for o in req.check_workload}
        try:
            other = load_config(without_keys(req.overrides, keys) + list(req.check_workload))
        except ConfigError as e:
            raise ConfigError(f"--check-workload: {e}") from None
        if asdict(other) == asdict(cfg):
            raise ConfigError(f"--check-workload: {' '.join(req.check_workload)} changes nothing "
                              "(it is the searched workload)")
    if req.check_seed is not None and req.check_seed == cfg.seed:
        raise ConfigError(f"--check-seed: {req.check_seed} is the search's own seed; give another")
    pricer = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    search = Search(req=req, objective=objective, slos=slos, base=list(req.overrides),
                    base_no_cg=[o for o in req.overrides if not _is_cg(o)], strict=cfg.model.kind == "hybrid",
                    all_prefills=cfg.cg.all_prefills, num_speculative_tokens=cfg.engine.num_speculative_tokens,
                    estimator=CaptureEstimator(cfg.model, cfg.engine, pricer),
                    prices=ShapePrices(pricer, gating=make_policy(cfg.policy).gates and cfg.cg.all_prefills),
                    engine=cfg.engine, seed=cfg.seed, policy=cfg.policy.name, progress=progress)
    search.gating = make_policy(cfg.policy).gates and cfg.cg.all_prefills
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


def run_advise(req: AdviseRequest, *, progress: Callable[[str, int | None], None] | None = None) -> dict[str, Any]:
    """Run the search and return the report document (see ``docs/advise.md``)."""
    say = progress or (lambda text, total: None)
    search, default = _setup(req, say)
    ev = Evaluator(req.jobs, req.out_dir, req.resume, on_done=lambda label, reused: say(label, None))
    try:
        return _search(search, default, ev)
    except BaseException:
        ev.close(abort=True)
        raise
    finally:
        ev.close()


def _evaluated(c: Candidate, rec: dict[str, Any], reused: bool) -> Evaluated:
    return Evaluated(c, rec["metrics"], rec.get("graph_usage") or [], rec.get("shapes"), reused)


def _search(s: Search, default: Candidate, ev: Evaluator) -> dict[str, Any]:
    n = s.req.candidates
    # 1. profile: the default run and, when the policy gates, the same workload without gating
    profile_jobs = [("default", default.overrides, True)]
    if s.policy != "budget":
        profile_jobs.append(("profile without gating",
                             tuple(without_keys(s.base, {"policy"}) + ["policy=budget"]), True))
    s.progress("profile", len(profile_jobs))
    recs = ev.run(profile_jobs)
    for (label, _, _), (rec, _) in zip(profile_jobs, recs, strict=True):
        if "shapes" not in rec:
            raise ConfigError(f"advise: the {label} run failed: {rec['metrics'].get('diagnosis')}")
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
    explicit_order = greedy_order(demand, candidate_pool(demand, s.engine), s.prices, strict=s.strict,
                                  max_requests=s.engine.max_requests, limit=s.req.budget_graphs, fits=s.fits,
                                  required=s.backstop)
    explicit = [s.explicit(f"greedy-{k}", f"greedy list, first {k} picks on the profile demand",
                           explicit_order[:k]) for k in prefix_sizes(len(explicit_order), n_stage1)]
    explicit = fresh(explicit)
    n_meg = min(len(megatron), max(n_stage1 // 2, n_stage1 - len(explicit)))
    megatron = fresh(megatron[:n_meg])
    stage1 = megatron + _spread(explicit, n_stage1 - len(megatron))
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
        order2 = greedy_order(demand2, candidate_pool(demand2, s.engine), s.prices, strict=s.strict,
                              max_requests=s.engine.max_requests, limit=s.req.budget_graphs, fits=s.fits,
                                  required=s.backstop)
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

    # 4. rank, 5. robustness
    ranked = _rank(s, evaluated)
    recommended = next((e for e in ranked if e.feasible), None)
    checks = _robustness(s, ev, recommended, default_ev)
    return _report(s, ranked, recommended, default_ev, checks, demand, ev)


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
    space = [(k, gs) for k, gs, _ in megatron_space(s.engine) if s.fits(gs)]
    score = s.prices.scorer(demand, strict=s.strict)
    scored = [(score(gs), len(gs), i) for i, (_, gs) in enumerate(space)]
    first = spread_pick(scored, n)
    order = first + [i for _, _, i in sorted(scored) if i not in set(first)]
    out = []
    for i in order:
        k, gs = space[i]
        label = knobs_label(k)
        out.append(s.candidate(label, "megatron", "Megatron's arguments: " + command_line(k.megatron_args()),
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
        val = metric_value(e.metrics, obj.metric)
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
    checks: list[tuple[str, list[str]]] = []
    seed = s.req.check_seed if s.req.check_seed is not None else s.seed + 1
    checks.append((f"seed={seed}", [f"seed={seed}"]))
    if s.req.check_workload:
        checks.append((" ".join(s.req.check_workload), list(s.req.check_workload)))
    jobs = []
    for _, extra in checks:
        keys = {override_key(o) for o in extra}
        for e in (rec, default):
            jobs.append((f"check {e.cand.name} {' '.join(extra)}",
                         tuple(without_keys(e.cand.overrides, keys) + extra), False))
    if rec is default:
        jobs = jobs[::2]
    s.progress("robustness", len(jobs))
    results = ev.run(jobs)
    out = []
    step = 1 if rec is default else 2
    for i, (label, extra) in enumerate(checks):
        r = results[i * step][0]["metrics"]
        d = results[i * step + step - 1][0]["metrics"]
        out.append(_check_entry(s, label, extra, rec, default, r, d))
    return out


def _check_entry(s: Search, label: str, extra: list[str], rec: Evaluated, default: Evaluated,
                 rec_here: dict, default_here: dict) -> dict[str, Any]:
    obj = s.objective

    def better_by(a: float | None, b: float | None) -> float | None:
        """How much better ``b`` is than ``a`` for the objective, relative to ``a`` (< 0: worse)."""
        if a is None or b is None or a == 0:
            return None
        return round(((b - a) if obj.maximize else (a - b)) / abs(a), 6)

    p, d0 = (metric_value(e.metrics, obj.metric) for e in (rec, default))
    r, d = (metric_value(m, obj.metric) for m in (rec_here, default_here))
    adv_here, adv_search = better_by(d, r), better_by(d0, p)
    return {
        "check": label, "overrides": extra,
        "recommended": {"objective": r, "metrics": _headline(rec_here)},
        "default": {"objective": d, "metrics": _headline(default_here)},
        # the workload changed too, so this mixes the grid's fit with the workload's own variation
        "degradation": None if (x := better_by(p, r)) is None else -x,
        "advantage_over_default": adv_here,  # > 0: the recommendation beats the default here
        "advantage_on_search": adv_search,
        "advantage_lost": None if adv_here is None or adv_search is None else round(adv_search - adv_here, 6),
    }


# ---------------------------------------------------------------------------------------------- report

HEADLINE = ("outcome", "eager_step_fraction", "eager_steps", "deferral_events", "deferred_requests",
            "max_cg_wait_iters", "padded_token_fraction", "ttft_ms.p99", "tpot_ms.p99", "output_throughput_tok_s")


def _headline(m: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k in HEADLINE:
        v: Any = m
        for part in k.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        out[k] = v
    return out


def _entry(s: Search, e: Evaluated) -> dict[str, Any]:
    c = e.cand
    return {
        "rank": e.rank, "name": c.name, "space": c.space, "origin": c.origin, "feasible": e.feasible,
        "violations": e.violations, "num_graphs": len(c.graphs),
        "objective": metric_value(e.metrics, s.objective.metric), "estimate": c.estimate.to_dict(),
        "megatron_args": c.knobs.megatron_args() if c.knobs else None,
        "megatron_command": command_line(c.knobs.megatron_args()) if c.knobs else None,
        "overrides": list(c.overrides), "graphs": [list(g) for g in c.graphs], "reused": e.reused,
        "metrics": e.metrics,
    }


def pareto_names(s: Search, ranked: list[Evaluated]) -> list[str]:
    """Completed candidates no other beats on both graph count and objective (fewest graphs first)."""
    from cgbench.analysis.plots import pareto_front

    pts = [e for e in ranked if e.metrics.get("outcome") == "completed"
           and metric_value(e.metrics, s.objective.metric) is not None]
    xy = [(float(len(e.cand.graphs)), metric_value(e.metrics, s.objective.metric)) for e in pts]
    front = [pts[i] for i in pareto_front(xy, s.objective.maximize)]
    return [e.cand.name for e in sorted(front, key=lambda e: (len(e.cand.graphs), e.rank))]


def _improvement(s: Search, rec: Evaluated, default: Evaluated) -> dict[str, Any]:
    obj = s.objective
    a, b = metric_value(default.metrics, obj.metric), metric_value(rec.metrics, obj.metric)
    better = None if a is None or b is None else ((b - a) if obj.maximize else (a - b))
    return {
        "objective": {"default": a, "recommended": b, "better_by": better,
                      "better_by_fraction": round(better / abs(a), 6) if better is not None and a else None},
        "num_graphs": {"default": len(default.cand.graphs), "recommended": len(rec.cand.graphs)},
        "eager_step_fraction": {"default": default.metrics.get("eager_step_fraction"),
                                "recommended": rec.metrics.get("eager_step_fraction")},
        "estimate": {"default": default.cand.estimate.to_dict(), "recommended": rec.cand.estimate.to_dict()},
    }


def _notes(s: Search, rec: Evaluated | None, default: Evaluated, best_meg: Evaluated | None) -> list[str]:
    notes = []
    if rec is None:
        notes.append("no candidate completed within the budgets and SLOs: raise a budget or relax an SLO")
        return notes
    if rec is default:
        notes.append("the default grid is already the best candidate found: no grid within the budgets "
                     f"had a better {s.objective.name} (ties go to fewer graphs)")
    elif default.violations:
        notes.append("the default grid does not meet the budgets/SLOs (" + "; ".join(default.violations) + ")")
    if best_meg is None:
        notes.append("no Megatron knob setting met the budgets and SLOs")
    elif rec.cand.space == "explicit":
        notes.append(f"Megatron's knobs cannot express the recommended list; the best Megatron setting is "
                     f"{best_meg.cand.name} (rank {best_meg.rank})")
    notes.append("memory and capture time are estimates (see docs/advise.md), not simulated")
    return notes


def _report(s: Search, ranked: list[Evaluated], rec: Evaluated | None, default: Evaluated,
            checks: list[dict[str, Any]], demand: Demand, ev: Evaluator) -> dict[str, Any]:
    from cgbench.results.document import provenance

    best_meg = next((e for e in ranked if e.feasible and e.cand.knobs is not None), None)
    best_exp = next((e for e in ranked if e.feasible and e.cand.space == "explicit"), None)
    doc = provenance()
    doc.update({
        "kind": REPORT_KIND,
        "overrides": s.base,
        "objective": {"name": s.objective.name, "metric": s.objective.metric,
                      "direction": "max" if s.objective.maximize else "min", "unit": s.objective.unit},
        "budgets": {"graphs": s.req.budget_graphs, "memory_gb": s.req.budget_memory_gb,
                    "capture_s": s.req.budget_capture_s},
        "slo": [x.to_dict() for x in s.slos],
        "demand": {"steps": demand.steps, "distinct_shapes": len(demand.counts)},
        "runs": {"ran": ev.ran, "reused": ev.reused},
    })
    if rec is not None:
        meg_src = rec if rec.cand.knobs is not None else best_meg
        doc["recommended"] = {
            "name": rec.cand.name, "space": rec.cand.space, "num_graphs": len(rec.cand.graphs),
            "graphs": [list(g) for g in rec.cand.graphs],
            "all_prefills": rec.cand.knobs.all_prefills if rec.cand.knobs else s.all_prefills,
            "overrides": list(rec.cand.overrides), "explicit_overrides": _explicit_line(s, rec),
            "megatron_args": meg_src.cand.knobs.megatron_args() if meg_src and meg_src.cand.knobs else None,
            "megatron_command": command_line(meg_src.cand.knobs.megatron_args())
            if meg_src and meg_src.cand.knobs else None,
            "megatron_args_from": meg_src.cand.name if meg_src else None,
            "estimate": rec.cand.estimate.to_dict(), "metrics": rec.metrics,
        }
        doc["improvement"] = _improvement(s, rec, default)
    else:
        doc["recommended"] = None
        doc["improvement"] = None
    doc["default"] = {"name": "default", "num_graphs": len(default.cand.graphs), "rank": default.rank,
                      "feasible": default.feasible, "violations": default.violations,
                      "estimate": default.cand.estimate.to_dict(), "metrics": default.metrics}
    doc["megatron"] = _entry(s, best_meg) if best_meg else None
    doc["explicit"] = _entry(s, best_exp) if best_exp else None
    doc["pareto"] = pareto_names(s, ranked)
    doc["robustness"] = checks
    doc["notes"] = _notes(s, rec, default, best_meg)
    doc["candidates"] = [_entry(s, e) for e in ranked]
    return doc


def _explicit_line(s: Search, e: Evaluated) -> list[str]:
    """The ``cg`` overrides that run the recommended graphs as an explicit list."""
    all_prefills = e.cand.knobs.all_prefills if e.cand.knobs else s.all_prefills
    return explicit_overrides(e.cand.graphs, all_prefills)
