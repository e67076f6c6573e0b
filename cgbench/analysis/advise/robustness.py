"""The robustness checks of ``cgbench advise``: the recommendation and the default re-run on a second
seed (``--check-seed``, else the search's seed + 1) and, with ``--check-workload``, on a second
workload; a config a re-check refuses is the user's bad input, not a failed row."""

from __future__ import annotations

from typing import Any

from cgbench.analysis.advise.candidates import Evaluated
from cgbench.analysis.advise.report import check_entry
from cgbench.analysis.advise.request import without_keys
from cgbench.analysis.advise.runs import Evaluator
from cgbench.analysis.advise.search import Search
from cgbench.config.overrides import override_key


def robustness(s: Search, ev: Evaluator, rec: Evaluated | None, default: Evaluated) -> list[dict[str, Any]]:
    """The re-checks' entries of the report (none without a recommendation)."""
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
