"""Running a sweep: the thin driver over its plan (``plan``), its folder (``folder``)
and an executor (``executors``).

``run_sweep`` claims the folder (its lock), decides with ``--resume`` which points are kept, hands
the others to the executor as ``execute_point`` tasks (each writes its own result file, atomically)
and records every outcome in the index. Ctrl-C and SIGTERM stop the executor and leave an index
that says ``interrupted``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cgbench.analysis.sweep.executors import Executor, InProcess, Outcome, Task, local_executor
from cgbench.analysis.sweep.folder import (
    DONE,
    FAILED,
    HEADLINE,
    INDEX_KIND,
    INDEX_NAME,
    PENDING,
    SUMMARY_CSV,
    IndexWriter,
    PointResult,
    claim_out_dir,
    complete_result,
    final_status,
    headline,
    health_text,
    index_document,
    load_index,
    point_summary,
    recorded_fingerprints,
    release_out_dir,
    resume_decisions,
    reusable_result,
    running_sweep_alive,
    stale_line,
    summary_columns,
    summary_csv,
    summary_records,
    write_summary_csv,
)
from cgbench.analysis.sweep.plan import (
    FROM_CLI,
    FROM_REPEAT,
    SweepPlan,
    SweepPoint,
    plan_sweep,
    point_file_name,
    point_label,
)
from cgbench.analysis.sweep.workers import SweepTerminated, signals_deferred, sigterm_interrupts
from cgbench.config.schema import BenchConfig
from cgbench.safeio import clean_stale_temps_in

__all__ = ["DONE", "FAILED", "FROM_CLI", "FROM_REPEAT", "HEADLINE", "INDEX_KIND", "INDEX_NAME", "PENDING",
           "SUMMARY_CSV", "PointOutputs", "PointResult", "SweepOutcome", "SweepPlan", "SweepPoint", "SweepTerminated",
           "claim_out_dir", "complete_result", "execute_point", "final_status", "headline", "health_text",
           "index_document", "load_index", "plan_sweep", "point_file_name", "point_label", "point_summary",
           "recorded_fingerprints", "release_out_dir", "resume_decisions", "reusable_result", "run_sweep",
           "running_sweep_alive", "stale_line", "summary_columns", "summary_csv", "summary_records",
           "write_summary_csv"]


@dataclass
class SweepOutcome:
    plan: SweepPlan
    results: list[PointResult]
    interrupted: bool = False
    index_path: Path | None = None
    signal_name: str = "SIGINT"  # what interrupted it (SIGINT: exit 130, SIGTERM: exit 143)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)


@dataclass(frozen=True)
class PointOutputs:
    """What a point's document holds beyond a plain run's: per-step and per-request ``records``
    (``sweep --export``) and the ``sensitivity`` block (``sweep --sensitivity``)."""

    records: bool = False
    sensitivity: bool = False
    launch_line: str | None = None  # --megatron-args (read): a sensitivity baseline of every point
    columns: tuple[str, ...] = ()  # metrics (registry names) each point reports besides its headline
    scope: str = ""  # one sweep run's token: its points' labels read each option file's picks once


def execute_point(cfg: BenchConfig, overrides: tuple[str, ...], path: Path,
                  outputs: PointOutputs = PointOutputs()) -> dict[str, Any]:
    """One point (an executor's task): run it, write its JSON atomically; what it reports to the
    sweep (``point_summary``: headline metrics, health flags, the ``outputs.columns``).

    Not fsynced (``durable=False``): a file a power loss emptied is unreadable, and ``--resume``
    runs its point again; the index, written durably, never vouches for a file it has not read.
    Compact (one line, C-encoded: the same document on reading) and without its own scan for stale
    temporary files: ``run_sweep`` cleans the folder once, before the points run."""
    from cgbench.config.labels import trees_fixed
    from cgbench.pipeline import run_point
    from cgbench.results.document import write_json_atomic

    with trees_fixed(outputs.scope):  # a point run alone (no sweep run's scope) reads the files as they are
        doc = run_point(cfg, list(overrides), trace=outputs.records, requests=outputs.records)
    if outputs.sensitivity:
        from cgbench.analysis.sensitivity import sensitivity

        doc["sensitivity"] = sensitivity(cfg, doc["metrics"], overrides=list(overrides),
                                         launch_line=outputs.launch_line)
    write_json_atomic(path, doc, durable=False, clean=False, layout="compact")
    return point_summary(doc, outputs.columns)


def _result(point: SweepPoint, outcome: Outcome) -> PointResult:
    if outcome.ok:
        v = outcome.value
        return PointResult(point, DONE, v["metrics"], outcome.wall_s, fingerprint=point.fingerprint,
                           health=v["health"], columns=v["columns"])
    return PointResult(point, PENDING if outcome.missing else FAILED, wall_s=outcome.wall_s, error=outcome.error)


def _record_submissions(plan: SweepPlan, ex: Executor, index: IndexWriter, earlier: list[dict[str, Any]]) -> None:
    """Keep the index's ``slurm`` record current: written as each submission is accepted, so a sweep
    whose process ends (detached, or killed) still knows its array tasks (``cgbench.analysis.sweep.slurm``)."""
    from cgbench.analysis.sweep.slurm import SLURM_KEY, record_block

    def on_submitted(_: dict[str, Any]) -> None:
        index.extra[SLURM_KEY] = record_block(plan, ex, earlier)
        index.write("running")

    index.extra[SLURM_KEY] = record_block(plan, ex, earlier)
    ex.on_submitted = on_submitted  # type: ignore[attr-defined]


def run_sweep(plan: SweepPlan, *, jobs: int = 1, resume: bool = False, executor: Executor | None = None,
              on_start: Callable[[int], None] | None = None,
              on_done: Callable[[PointResult], None] | None = None,
              on_note: Callable[[str], None] | None = None, outputs: PointOutputs = PointOutputs()) -> SweepOutcome:
    """Run every point not already complete (with ``resume``: a result whose config fingerprint
    changed runs again, and ``on_note`` is told so in one line). ``executor`` defaults to this
    process (``jobs == 1``) or a pool of ``jobs`` workers. ``on_start(n)`` is told how many points
    will run, ``on_done`` gets each finished point.

    Ctrl-C or SIGTERM stops the sweep: finished points keep their files, sweep.json records which
    finished, and the outcome says ``interrupted`` (KeyboardInterrupt is not re-raised). The folder's
    lock is held until sweep.json and summary.csv are written."""
    ex = executor if executor is not None else local_executor(jobs)
    claim_out_dir(plan, resume=resume)
    # the points write without a scan of their own: a killed earlier run's temporary files go now
    clean_stale_temps_in(plan.out_dir, (p.file for p in plan.points))
    try:
        with sigterm_interrupts():
            return _run_claimed(plan, ex, jobs, resume, on_start, on_done, on_note, outputs)
    finally:
        ex.close()
        release_out_dir(plan)


def _run_claimed(plan: SweepPlan, ex: Executor, jobs: int, resume: bool, on_start: Callable[[int], None] | None,
                 on_done: Callable[[PointResult], None] | None,
                 on_note: Callable[[str], None] | None, outputs: PointOutputs = PointOutputs()) -> SweepOutcome:
    results = [PointResult(p, PENDING) for p in plan.points]
    outputs = replace(outputs, scope=f"{os.getpid()}-{time.time_ns()}")  # this run's, for its points' labels
    notes = list(plan.notes)
    kept, rerun = resume_decisions(plan) if resume else ({}, {})
    todo: list[int] = []
    for i, p in enumerate(plan.points):
        if i in kept:
            v = point_summary(kept[i], outputs.columns)
            results[i] = PointResult(p, DONE, v["metrics"], reused=True, fingerprint=p.fingerprint,
                                     health=v["health"], columns=v["columns"])
        else:
            todo.append(i)
            if i in rerun:
                notes.append(f"point {i + 1}/{len(plan.points)} ({point_label(p)}): {rerun[i]}")
    for note in notes:
        if on_note is not None:
            on_note(note)
    earlier: list[dict[str, Any]] = []
    if resume:  # tasks of an earlier SLURM submission still on the cluster are collected, not run again
        from cgbench.analysis.sweep.slurm import adopt_in_flight

        before = len(todo)
        todo, earlier = adopt_in_flight(plan, ex, todo, on_note or (lambda line: None))
        collecting = before - len(todo)
    else:
        collecting = 0
    if len(todo) <= 1 and ex.name == "pool":
        ex.close()
        ex = InProcess()  # no worker to start for one point
    index = IndexWriter(plan, results, jobs, ex.name)
    if ex.name == "slurm":
        _record_submissions(plan, ex, index, earlier)
    interrupted, signal_name = False, "SIGINT"
    try:
        index.write("running")
        if on_start is not None:
            on_start(len(todo) + collecting)  # the adopted tasks' points report as they end too

        def finish(outcome: Outcome) -> None:
            r = results[outcome.key] = _result(plan.points[outcome.key], outcome)
            index.point_done()
            if on_done is not None:
                on_done(r)

        base = plan.out_dir.resolve() if ex.name == "slurm" else plan.out_dir  # a SLURM task starts elsewhere
        tasks = [Task(i, (plan.points[i].cfg, plan.points[i].overrides, base / plan.points[i].file, outputs))
                 for i in todo]
        ex.run(execute_point, tasks, finish)  # looked up now, so a test can slow execute_point down
    except KeyboardInterrupt as e:
        interrupted = True
        signal_name = "SIGTERM" if isinstance(e, SweepTerminated) else "SIGINT"
    status = final_status(results, interrupted)
    if getattr(ex, "detach", False) and not interrupted and any(r.status == PENDING for r in results):
        from cgbench.analysis.sweep.slurm import SUBMITTED

        status = SUBMITTED  # its tasks run on: --resume collects them
    # a second signal while the final index is written must not leave it saying "running"
    with signals_deferred(reraise=False):
        path = index.write(status)
        write_summary_csv(plan, results)
    return SweepOutcome(plan, results, interrupted, path, signal_name)
