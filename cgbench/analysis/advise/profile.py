"""The profile of one ``cgbench advise`` search: the default run and, when it gates, the same workload
without gating, recording every step's real shape (the demand), and the baselines run on the same
workload (the gating-off one is the profile's second run)."""

from __future__ import annotations

from typing import Any

from cgbench.analysis.advise.candidates import Candidate, Evaluated, evaluated_from
from cgbench.analysis.advise.demand import Demand
from cgbench.analysis.advise.runs import Evaluator
from cgbench.analysis.advise.search import Search
from cgbench.analysis.baselines import GATING_OFF, baseline_overrides
from cgbench.config.schema import ConfigError


def profile(s: Search, default: Candidate, ev: Evaluator) -> tuple[Evaluated, Demand, list[tuple[Any, dict[str, Any]]]]:
    """The default's run, the demand of the profile's runs, and each baseline with its run's metrics."""
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
    default_ev = evaluated_from(default, *recs[0])
    demand = Demand.of(recs[0][0]["shapes"])
    for rec, _ in recs[1:]:
        demand = demand.merged(Demand.of(rec["shapes"]))

    return default_ev, demand, baseline_runs
