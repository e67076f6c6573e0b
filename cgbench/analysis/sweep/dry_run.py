"""What ``cgbench sweep --dry-run`` shows, as data: the axes (their values and where each came from),
every point (its overrides and file, and with ``--resume`` whether it is kept or runs), the executor's
settings. The command prints it as tables, or as one JSON document, CSV or Markdown (``--format``)."""

from __future__ import annotations

from typing import Any

from cgbench.analysis.sweep.folder import resume_decisions
from cgbench.analysis.sweep.plan import SweepPlan

KEPT, RUN, RUN_AGAIN = "kept", "run", "run again: config changed"


def _on_resume(plan: SweepPlan, resume: bool) -> list[str | None]:
    if not resume:
        return [None] * len(plan.points)
    kept, rerun = resume_decisions(plan)
    return [KEPT if i in kept else RUN_AGAIN if i in rerun else RUN for i in range(len(plan.points))]


def dry_run_document(plan: SweepPlan, resume: bool, slurm: dict[str, Any] | None) -> dict[str, Any]:
    """The dry run as one document: ``name``, ``dir``, ``axes`` (key -> values, source), ``points``."""
    decisions = _on_resume(plan, resume)
    points = []
    for p, decision in zip(plan.points, decisions, strict=True):
        entry: dict[str, Any] = {"index": p.index + 1, "overrides": list(p.overrides), "params": p.params,
                                 "file": p.file}
        if resume:
            entry["on_resume"] = decision
        points.append(entry)
    return {"name": plan.name, "dir": str(plan.out_dir), "repeat": plan.repeat,
            "axes": [{"key": k, "values": v, "from": plan.axis_sources.get(k, "")} for k, v in plan.axes.items()],
            "points": points, "executor": {"slurm": slurm} if slurm is not None else {"local": {}}}


def dry_run_rows(plan: SweepPlan, resume: bool) -> tuple[list[str], list[list[Any]]]:
    """The points as rows (``#``, overrides, file, and with ``resume`` the decision)."""
    columns = ["#", "overrides", "file", *(["on_resume"] if resume else [])]
    rows = []
    for p, decision in zip(plan.points, _on_resume(plan, resume), strict=True):
        rows.append([p.index + 1, " ".join(p.overrides), p.file, *([decision] if resume else [])])
    return columns, rows
