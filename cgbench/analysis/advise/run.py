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

This module is the stage order; each stage is a module of the package, in the order the data walks
them: ``request`` (what is asked) and ``setup`` (checked against its config; the state, ``search``)
-> ``profile`` (the default's runs -> ``demand``) -> the spaces (``prices``: the estimate both are
ranked by; ``megatron_space``; ``explicit_space``) -> ``candidates`` (made, tried, the first ones)
-> ``runs`` (on the executors) -> ``refine`` -> ``rank`` -> ``robustness`` -> ``report``
(``goals`` and ``capture`` are read throughout). ``scripts/advise_flow.py`` measures the walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cgbench.analysis.advise.candidates import Candidate, Tried, first_candidates
from cgbench.analysis.advise.profile import profile
from cgbench.analysis.advise.rank import rank
from cgbench.analysis.advise.refine import recover_eager_free, refine
from cgbench.analysis.advise.report import build_report
from cgbench.analysis.advise.request import AdviseRequest
from cgbench.analysis.advise.robustness import robustness
from cgbench.analysis.advise.runs import Evaluator, progress_of
from cgbench.analysis.advise.search import Search, quiet
from cgbench.analysis.advise.setup import setup

__all__ = ["run_advise"]


def run_advise(req: AdviseRequest, *, progress: Callable[[str, int | None], None] | None = None,
               note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the search and return the report document (see ``docs/advise.md``); ``note`` gets one-line
    messages of the executor (a SLURM submission)."""
    say = progress or quiet
    search, default = setup(req, say)
    ev = Evaluator(req.jobs, req.out_dir, req.resume, on_done=progress_of(say), executor=_executor(req, note))
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


def _search(s: Search, default: Candidate, ev: Evaluator) -> dict[str, Any]:
    """The stages in order (the module docstring's numbers)."""
    default_ev, demand, baseline_runs = profile(s, default, ev)  # 1.
    s.set_backstop(demand)
    tried = Tried(s, ev, default, default_ev)
    stage1 = first_candidates(s, demand, tried)  # 2.
    refine(s, demand, tried, ev, s.req.candidates - len(stage1))  # 3.
    recover_eager_free(s, demand, tried, ev)
    ranked = rank(s, tried.evaluated)  # 4.
    recommended = next((e for e in ranked if e.feasible), None)
    checks = robustness(s, ev, recommended, default_ev)  # 5.
    return build_report(s, ranked, recommended, default_ev, checks, demand, ev, baseline_runs)
