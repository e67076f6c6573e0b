"""A SLURM sweep across processes: what ``sweep.json`` records of its submissions, which array tasks a
``--resume`` adopts, and what it submits with.

Every submission is recorded in the index as soon as its arrays are accepted (``slurm.submissions``:
its folder and, per array task, the task's id and the files of its points), so a sweep whose
submitting process ended (``--detach``, or killed) still knows its tasks. ``--resume`` then:

* keeps every point whose file is complete (as always);
* adopts the tasks of the record that are still on the cluster (``squeue``) and hold points without a
  file: they are watched with the new ones, never submitted twice;
* runs again the points of tasks that ended without writing them (failed, cancelled, timed out).

Without ``--executor`` and ``--slurm``, a resumed SLURM sweep is resumed on SLURM with the settings it
was submitted with (``resume_executor``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cgbench.analysis.sweep.folder import DONE, load_index
from cgbench.analysis.sweep.plan import SweepPlan
from cgbench.config.schema import ConfigError

SLURM_KEY = "slurm"
SUBMITTED = "submitted"  # the index status of a detached sweep whose tasks are on the cluster


def previous_record(out_dir: Path) -> dict[str, Any] | None:
    """The ``slurm`` block of the sweep index in ``out_dir`` (None: no readable index, or not SLURM)."""
    try:
        index = load_index(out_dir)
    except ConfigError:
        return None
    block = index.get(SLURM_KEY)
    return block if isinstance(block, dict) and isinstance(block.get("submissions"), list) else None


def resume_executor(out_dir: Path) -> tuple[str, dict[str, Any], int | None] | None:
    """(executor, settings, jobs) that the sweep in ``out_dir`` ran with, for a ``--resume`` that names
    neither ``--executor`` nor ``--slurm``; None when it is not a SLURM sweep."""
    block = previous_record(out_dir)
    if block is None:
        return None
    settings = block.get("settings") if isinstance(block.get("settings"), dict) else {}
    jobs = block.get("parallelism")
    return "slurm", dict(settings), jobs if isinstance(jobs, int) and not isinstance(jobs, bool) else None


def measured_point_s(out_dir: Path) -> float | None:
    """The median time of the done points recorded in ``out_dir``'s index (None without any)."""
    try:
        points = load_index(out_dir)["points"]
    except ConfigError:
        return None
    times = [p["wall_s"] for p in points if p.get("status") == DONE and not p.get("reused")
             and isinstance(p.get("wall_s"), (int, float)) and p["wall_s"] > 0]
    return statistics.median(times) if times else None


def record_block(plan: SweepPlan, ex: Any, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """The index's ``slurm`` block: the settings, the earlier submissions still of use and the
    executor's own (its points as files, so a resume finds them by name)."""
    files = [p.file for p in plan.points]
    own = [{**{k: v for k, v in sub.items() if k != "tasks"},
            "tasks": [[job_id, [files[k] for k in keys]] for job_id, keys in sub["tasks"]]}
           for sub in ex.submissions if not sub.get("adopted")]
    return {"settings": ex.settings, "parallelism": ex.parallelism, "submissions": [*earlier, *own]}


def adopt_in_flight(plan: SweepPlan, ex: Any, todo: list[int],
                    on_note: Callable[[str], None]) -> tuple[list[int], list[dict[str, Any]]]:
    """``--resume``: the points of ``todo`` whose recorded array task is still on the cluster are given
    to ``ex`` to watch (``SlurmExecutor.adopt``); returns the points left to run and the earlier
    submissions worth keeping in the record (those with adopted tasks)."""
    block = previous_record(plan.out_dir)
    if block is None:
        return todo, []
    index_of = {p.file: i for i, p in enumerate(plan.points)}
    wanted = set(todo)
    candidates: list[tuple[str, str, list[int]]] = []  # (folder, task id, its points still to run)
    for sub in block["submissions"]:
        for entry in sub.get("tasks") or []:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                continue
            keys = [index_of[f] for f in entry[1] if f in index_of and index_of[f] in wanted]
            if keys:
                candidates.append((str(sub.get("folder", "")), entry[0], keys))
    if not candidates:
        return todo, []
    from cgbench.analysis.sweep.executor_slurm import available, queued_tasks

    try:
        available()
    except ConfigError as e:
        raise ConfigError(f"--resume: {len(candidates)} array tasks of this sweep may still be on the cluster, and "
                          f"squeue cannot say: {e}") from None
    arrays = sorted({job_id.partition("_")[0] for _, job_id, _ in candidates}, key=int)
    queued = queued_tasks(arrays)
    if queued is None:
        raise ConfigError(f"--resume: squeue could not list arrays {', '.join(arrays)} (is SLURM_CONF set?); "
                          "scancel them, or resume where the cluster answers")
    in_flight = [c for c in candidates if c[1] in queued]
    if in_flight and getattr(ex, "name", "") != "slurm":
        ids = ", ".join(c[1] for c in in_flight[:5]) + (", ..." if len(in_flight) > 5 else "")
        raise ConfigError(f"--resume: {len(in_flight)} array tasks of this sweep are still on the cluster ({ids}): "
                          "resume with --executor slurm to collect them, or scancel them first")
    by_folder: dict[str, list[tuple[str, list[int]]]] = {}
    for folder, job_id, keys in in_flight:
        by_folder.setdefault(folder, []).append((job_id, keys))
    for folder, tasks in by_folder.items():
        ex.adopt(Path(folder), tasks)
    adopted = {k for _, _, keys in in_flight for k in keys}
    ended = sum(len(keys) for _, job_id, keys in candidates if job_id not in queued)
    if in_flight:
        on_note(f"resume: {len(in_flight)} array tasks ({len(adopted)} points) of the earlier submission are still "
                "on the cluster: collecting them")
    if ended:
        on_note(f"resume: {ended} points of array tasks that ended without writing them run again")
    kept = [sub for sub in block["submissions"] if str(sub.get("folder", "")) in by_folder]
    return [i for i in todo if i not in adopted], kept
