"""The report of ``cgbench advise``: one JSON document (``cgbench docs advise`` lists its keys)."""

from __future__ import annotations

from typing import Any

from cgbench.analysis.advise.candidates import Evaluated
from cgbench.analysis.advise.demand import Demand
from cgbench.analysis.advise.explicit_space import explicit_overrides
from cgbench.analysis.advise.runs import Evaluator
from cgbench.analysis.advise.search import Search
from cgbench.config.megatron_lines import launch_advice
from cgbench.results.names import number_at

REPORT_KIND = "cgbench-advise"


def check_entry(s: Search, label: str, extra: list[str], rec: Evaluated, default: Evaluated,
                rec_here: dict, default_here: dict) -> dict[str, Any]:
    """One robustness check: the recommendation and the default re-run with ``extra`` overrides."""
    obj = s.objective

    def better_by(a: float | None, b: float | None) -> float | None:
        """How much better ``b`` is than ``a`` for the objective, relative to ``a`` (< 0: worse)."""
        if a is None or b is None or a == 0:
            return None
        return round(((b - a) if obj.maximize else (a - b)) / abs(a), 6)

    p, d0 = (number_at(e.metrics, obj.metric) for e in (rec, default))
    r, d = (number_at(m, obj.metric) for m in (rec_here, default_here))
    adv_here, adv_search = better_by(d, r), better_by(d0, p)
    same = rec_here == rec.metrics and default_here == default.metrics
    return {
        "check": label, "overrides": extra,
        "same_as_search": same,  # e.g. a new seed on a trace, which replays the same requests
        "recommended": {"objective": r, "metrics": _headline(rec_here)},
        "default": {"objective": d, "metrics": _headline(default_here)},
        # the workload changed too, so this mixes the grid's fit with the workload's own variation
        "degradation": None if (x := better_by(p, r)) is None else -x,
        "advantage_over_default": adv_here,  # > 0: the recommendation beats the default here
        "advantage_on_search": adv_search,
        "advantage_lost": None if adv_here is None or adv_search is None else round(adv_search - adv_here, 6),
    }


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


def gating_of_candidate(overrides: tuple[str, ...] | list[str]) -> dict[str, Any] | None:
    """Whether a candidate's run gates admission, and why (None when its config is refused: a failed run)."""
    from cgbench.config.compose import load_config
    from cgbench.config.schema import ConfigError
    from cgbench.pipeline import gating_of

    try:
        return gating_of(load_config(list(overrides))).to_json()
    except ConfigError:
        return None


def _entry(s: Search, e: Evaluated) -> dict[str, Any]:
    c = e.cand
    return {
        "rank": e.rank, "name": c.name, "space": c.space, "origin": c.origin, "feasible": e.feasible,
        "violations": e.violations, "num_graphs": len(c.graphs),
        "objective": number_at(e.metrics, s.objective.metric), "estimate": c.estimate.to_dict(),
        "megatron_args": c.knobs.megatron_args() if c.knobs else None,
        "megatron_command": c.knobs.command if c.knobs else None,
        "overrides": list(c.overrides), "graphs": [list(g) for g in c.graphs], "reused": e.reused,
        "gating": gating_of_candidate(c.overrides), "metrics": e.metrics,
    }


def pareto_names(s: Search, ranked: list[Evaluated]) -> list[str]:
    """Completed candidates no other beats on both graph count and objective (fewest graphs first)."""
    from cgbench.analysis.plots.plot import pareto_front

    pts = [e for e in ranked if e.metrics.get("outcome") == "completed"
           and number_at(e.metrics, s.objective.metric) is not None]
    xy = [(float(len(e.cand.graphs)), number_at(e.metrics, s.objective.metric)) for e in pts]
    front = [pts[i] for i in pareto_front(xy, s.objective.maximize)]
    return [e.cand.name for e in sorted(front, key=lambda e: (len(e.cand.graphs), e.rank))]


def _improvement(s: Search, rec: Evaluated, default: Evaluated) -> dict[str, Any]:
    obj = s.objective
    a, b = number_at(default.metrics, obj.metric), number_at(rec.metrics, obj.metric)
    better = None if a is None or b is None else ((b - a) if obj.maximize else (a - b))
    return {
        "objective": {"default": a, "recommended": b, "better_by": better,
                      "better_by_fraction": round(better / abs(a), 6) if better is not None and a else None},
        "num_graphs": {"default": len(default.cand.graphs), "recommended": len(rec.cand.graphs)},
        "eager_step_fraction": {"default": default.metrics.get("eager_step_fraction"),
                                "recommended": rec.metrics.get("eager_step_fraction")},
        "estimate": {"default": default.cand.estimate.to_dict(), "recommended": rec.cand.estimate.to_dict()},
    }


def _notes(s: Search, rec: Evaluated | None, default: Evaluated, best_meg: Evaluated | None,
           checks: list[dict[str, Any]]) -> list[str]:
    notes = []
    if rec is None:
        notes.append("no candidate completed within the budgets and SLOs: raise a budget or relax an SLO")
        return notes
    if rec is default:
        notes.append("the default grid is already the best candidate found: no grid within the budgets "
                     f"had a better {s.objective.name} (ties go to fewer graphs)")
        if s.default_kind not in ("megatron", "explicit", "decode_only", "none"):
            notes.append(f"the default is a cg={s.default_kind} grid: its graphs as an explicit list are "
                         "matched Megatron's way and need not run the same")
    elif default.violations:
        notes.append("the default grid does not meet the budgets/SLOs (" + "; ".join(default.violations) + ")")
    if best_meg is None:
        notes.append("no Megatron knob setting met the budgets and SLOs")
    elif rec.cand.space == "explicit":
        notes.append(f"Megatron's knobs cannot express the recommended list; the best Megatron setting is "
                     f"{best_meg.cand.name} (rank {best_meg.rank})")
    for c in checks:
        if c["same_as_search"]:
            notes.append(f"the re-check {c['check']} ran exactly as the search did (a trace replays the same "
                         "requests whatever the seed): re-check on another workload with --check-workload")
    notes.append("memory and capture time are estimates (see cgbench docs advise), not simulated")
    return notes


def baseline_entries(s: Search, rec: Evaluated | None, runs: list[tuple[Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each baseline (analysis/baselines.py) run on the workload, and how much better the
    recommendation is than it for the objective (relative to the baseline; < 0: worse)."""
    obj = s.objective
    b_rec = None if rec is None else number_at(rec.metrics, obj.metric)
    out = []
    for base, metrics in runs:
        a = number_at(metrics, obj.metric)
        better = None if a is None or b_rec is None or a == 0 else round(
            ((b_rec - a) if obj.maximize else (a - b_rec)) / abs(a), 6)
        out.append({**base.to_json(), "objective": a, "recommended_better_by_fraction": better,
                    "gating": gating_of_candidate(base.overrides), "metrics": _headline(metrics)})
    return out


def build_report(s: Search, ranked: list[Evaluated], rec: Evaluated | None, default: Evaluated,
                 checks: list[dict[str, Any]], demand: Demand, ev: Evaluator,
                 baseline_runs: list[tuple[Any, dict[str, Any]]] = ()) -> dict[str, Any]:
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
            "megatron_command": meg_src.cand.knobs.command if meg_src and meg_src.cand.knobs else None,
            "megatron_line": launch_advice(meg_src.cand.knobs.launch_args(), s.req.launch_line).to_json()
            if meg_src and meg_src.cand.knobs else None,
            "megatron_args_from": meg_src.cand.name if meg_src else None,
            "estimate": rec.cand.estimate.to_dict(), "gating": gating_of_candidate(rec.cand.overrides),
            "metrics": rec.metrics,
        }
        doc["improvement"] = _improvement(s, rec, default)
    else:
        doc["recommended"] = None
        doc["improvement"] = None
    doc["default"] = {"name": "default", "num_graphs": len(default.cand.graphs), "rank": default.rank,
                      "feasible": default.feasible, "violations": default.violations,
                      "estimate": default.cand.estimate.to_dict(),
                      "gating": gating_of_candidate(default.cand.overrides), "metrics": default.metrics}
    free = next((e for e in ranked if e.feasible and _no_eager(e)), None)
    doc["baselines"] = baseline_entries(s, rec, list(baseline_runs))
    doc["baseline_notes"] = list(s.baseline_notes)
    doc["eager_free"] = _eager_free_entry(s, free, rec)
    doc["megatron"] = _entry(s, best_meg) if best_meg else None
    doc["explicit"] = _entry(s, best_exp) if best_exp else None
    doc["pareto"] = pareto_names(s, ranked)
    doc["robustness"] = checks
    doc["notes"] = _notes(s, rec, default, best_meg, checks)
    if (line := eager_free_note(s, doc["eager_free"], rec)) is not None:
        doc["notes"].insert(0, line)  # the CLI prints it next to the recommendation
    doc["candidates"] = [_entry(s, e) for e in ranked]
    return doc


def _no_eager(e: Evaluated) -> bool:
    return e.metrics.get("outcome") == "completed" and e.metrics.get("eager_steps") == 0


def _eager_free_entry(s: Search, free: Evaluated | None, rec: Evaluated | None) -> dict[str, Any] | None:
    """The best candidate within the budgets and SLOs that ran no step eager, next to the recommendation."""
    if free is None:
        return None
    entry = _entry(s, free)
    entry["explicit_overrides"] = _explicit_line(s, free)
    entry["is_recommended"] = rec is not None and free is rec
    a = number_at(free.metrics, s.objective.metric)
    b = None if rec is None else number_at(rec.metrics, s.objective.metric)
    entry["objective_vs_recommended"] = None if a is None or b is None or b == 0 else round(
        ((a - b) if s.objective.maximize else (b - a)) / abs(b), 6)  # < 0: the eager-free grid is worse
    return entry


def eager_free_note(s: Search, free: dict[str, Any] | None, rec: Evaluated | None) -> str | None:
    """The trade-off in words when the recommendation runs eager steps."""
    if rec is None or _no_eager(rec):
        return None
    unit = f" {s.objective.unit}" if s.objective.unit else ""
    n_eager = rec.metrics.get("eager_steps")
    if free is None:
        return (f"no candidate within the budgets and SLOs ran without eager steps; the recommendation runs "
                f"{n_eager} steps eager")

    def val(v: float | None) -> str:
        return "n/a" if v is None else f"{v:g}{unit}"

    def graphs(n: int) -> str:
        return f"{n} graph{'' if n == 1 else 's'}"

    rec_value = val(number_at(rec.metrics, s.objective.metric))
    return (f"eager-free grid: {free['name']}, {graphs(free['num_graphs'])}, 0 eager steps, "
            f"{s.objective.name} {val(free['objective'])}; recommended: {rec.cand.name}, "
            f"{graphs(len(rec.cand.graphs))}, {s.objective.name} {rec_value} with {n_eager} eager steps: "
            "the time model prices these steps cheaper eager than padded into a graph")


def _explicit_line(s: Search, e: Evaluated) -> list[str]:
    """The ``cg`` overrides that run the recommended graphs as an explicit list."""
    all_prefills = e.cand.knobs.all_prefills if e.cand.knobs else s.all_prefills
    return explicit_overrides(e.cand.graphs, all_prefills)
