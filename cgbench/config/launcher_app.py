"""Hand a sweep to a Hydra launcher plugin (joblib, submitit_local, submitit_slurm, ...).

Only ``cgbench sweep --launcher`` imports this module. The Compose API (``cgbench.config.compose``) cannot
launch, so this is the one place that enters Hydra's real ``@hydra.main`` entry point: ``sys.argv``
is rewritten to a ``--multirun`` command line, every job writes ``result.json`` into its Hydra job
folder, and once the launcher returns (basic, joblib and submitit all block until their jobs end)
the results are collected into the same sweep layout as the in-process sweep.

On SLURM (``submitit_slurm``) the sweep is one job array, array task ``i`` running Hydra job ``i``
(the sweep's point ``i``). When a task is cancelled or fails, Hydra's submitit launcher stops
waiting at that task; this module then waits for the rest of the array itself (``cgbench.config.
slurm_array``), so the sweep is collected only once no task of it can still write a result.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from omegaconf import DictConfig

from cgbench.analysis.sweep import (
    DONE,
    FAILED,
    INDEX_NAME,
    PENDING,
    PointResult,
    SweepOutcome,
    SweepPlan,
    SweepTerminated,
    final_status,
    headline,
    index_document,
    point_file_name,
    point_label,
    recorded_fingerprints,
    resume_decisions,
    reusable_result,
    sigterm_interrupts,
)
from cgbench.config.overrides import override_key
from cgbench.config.schema import BenchConfig, ConfigError

if TYPE_CHECKING:
    from cgbench.config.slurm_array import ArrayTask

RESULT_NAME = "result.json"
ERROR_NAME = "error.json"
STARTED_NAME = "started.json"  # written when a job starts computing its point (not when --resume skips it)
JOBS_FOLDER = "launcher"  # <sweep dir>/launcher/<time>/<job num>/ holds Hydra's job folders
RESUME_ENV = "CGBENCH_RESUME_DIR"  # set per job through hydra.job.env_set: skip points already done


def available_launchers() -> list[str]:
    Plugins.instance()  # discovering plugins registers their launcher configs
    return sorted(name.removesuffix(".yaml") for name in ConfigStore.instance().list("hydra/launcher"))


def check_launcher(launcher: str) -> None:
    names = available_launchers()
    if launcher not in names:
        raise ConfigError(f"--launcher: {launcher!r} is not installed (available: {', '.join(names)}; "
                          "pip install hydra-joblib-launcher / hydra-submitit-launcher)")
    # submitit would fail deep inside Hydra with a traceback; say it in one line instead
    if launcher == "submitit_slurm" and shutil.which("srun") is None:
        raise ConfigError("--launcher submitit_slurm: no 'srun' on PATH (run it on a SLURM login node; "
                          "submitit_local tries the same sweep on this machine)")


# where Hydra puts the jobs' folders: cgbench chooses it (<sweep>/launcher/<time>/<job>) and collects from there
OWNED_HYDRA_KEYS = ("hydra.sweep.dir", "hydra.sweep.subdir")


def check_hydra_overrides(overrides: list[str]) -> None:
    """Refuse hydra.* overrides that would move the jobs' results where the collector does not look."""
    for o in overrides:
        key = override_key(o).lstrip("+~")
        if key in OWNED_HYDRA_KEYS:
            raise ConfigError(f"{key}: cgbench sets it (the jobs write into <sweep folder>/{JOBS_FOLDER}/<time>/"
                              "<job number>, where their results are collected); choose the sweep folder "
                              "with --out instead")


def _to_bench_config(cfg: DictConfig) -> BenchConfig:
    from cgbench.config.compose import to_bench_config

    return to_bench_config(cfg)


def run_job(cfg: DictConfig) -> float:
    """One Hydra job: run the point, write result.json (or error.json) into the job folder.

    Returns the eager-step fraction (an objective for sweepers such as optuna; NaN on failure)."""
    from cgbench.pipeline import run_point
    from cgbench.results.document import write_json_atomic

    hc = HydraConfig.get()
    overrides = [str(o) for o in hc.overrides.task]
    job_dir = Path(hc.runtime.output_dir)
    resume_dir = os.environ.get(RESUME_ENV)
    bench_cfg = _to_bench_config(cfg)
    if resume_dir:
        from cgbench.analysis.fingerprint import config_fingerprint

        done, _ = reusable_result(Path(resume_dir) / point_file_name(overrides), tuple(overrides),
                                  config_fingerprint(bench_cfg), recorded_fingerprints(Path(resume_dir)))
        if done is not None:
            return float(done["metrics"]["eager_step_fraction"])
    write_json_atomic(job_dir / STARTED_NAME, {"overrides": overrides, "task": _slurm_task_id(),
                                               "host": socket.gethostname(), "pid": os.getpid(),
                                               "started_at": datetime.now(UTC).isoformat(timespec="seconds")})
    t0 = time.perf_counter()
    try:
        doc = run_point(bench_cfg, overrides)
    except Exception as e:  # recorded for the collector; one failed job must not stop the others
        msg = str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
        write_json_atomic(job_dir / ERROR_NAME, {"overrides": overrides, "error": msg,
                                                 "wall_s": time.perf_counter() - t0})
        return math.nan
    write_json_atomic(job_dir / RESULT_NAME, doc)
    return float(doc["metrics"]["eager_step_fraction"])


def _slurm_task_id() -> str | None:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def _quote(value: str) -> str:
    """A Hydra override value that survives the override grammar (paths with any characters)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_argv(plan: SweepPlan, launcher: str, job_root: Path, *, jobs: int, resume: bool,
               parallel: int | None = None) -> list[str]:
    """``parallel``: an explicit ``--jobs``; on SLURM it caps the array (``array_parallelism``)."""
    argv = ["cgbench", "--multirun", f"hydra/launcher={launcher}", "hydra/job_logging=disabled",
            "hydra/hydra_logging=disabled", f"hydra.sweep.dir={_quote(str(job_root))}",
            "hydra.sweep.subdir=${hydra.job.num}"]
    user_keys = {override_key(o) for o in plan.hydra_overrides}
    if launcher == "joblib" and "hydra.launcher.n_jobs" not in user_keys:
        argv.append(f"hydra.launcher.n_jobs={jobs}")
    check_hydra_overrides(list(plan.hydra_overrides))
    if launcher == "submitit_slurm" and "hydra.launcher.submitit_folder" in user_keys:
        raise ConfigError("hydra.launcher.submitit_folder: cgbench keeps submitit's files in <sweep folder>/"
                          f"{JOBS_FOLDER}/<time>/.submitit, where it finds the array's tasks and logs")
    if launcher == "submitit_slurm" and parallel is not None:
        if "hydra.launcher.array_parallelism" in user_keys:
            raise ConfigError("--jobs: sets hydra.launcher.array_parallelism with submitit_slurm; give one of them")
        argv.append(f"hydra.launcher.array_parallelism={parallel}")
    if resume:
        argv.append(f"++hydra.job.env_set.{RESUME_ENV}={_quote(str(plan.out_dir.resolve()))}")
    return argv + list(plan.hydra_overrides) + list(plan.sweep_args)


def launch(plan: SweepPlan, launcher: str, *, jobs: int = 1, resume: bool = False,
           parallel: int | None = None) -> SweepOutcome:
    """Run the sweep through ``hydra/launcher=<launcher>`` and collect it into ``plan.out_dir``.

    On SLURM a cancelled or failed array task does not end the sweep early: the other tasks are
    awaited, then the points without a result are reported (missing or failed, with the task's log)."""
    from cgbench.config import slurm_array

    check_launcher(launcher)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    job_root = (plan.out_dir / JOBS_FOLDER / stamp).resolve()
    entry = hydra.main(config_path=str(_config_dir()), config_name="config", version_base="1.3")(run_job)
    saved, interrupted, stopped_early, signal_name = sys.argv, False, False, "SIGINT"
    sys.argv = hydra_argv(plan, launcher, job_root, jobs=jobs, resume=resume, parallel=parallel)
    try:
        with sigterm_interrupts(), _hydra_raises(), _watching(launcher):
            entry()
    except SystemExit as e:
        if e.code not in (None, 0):
            raise ConfigError(f"--launcher {launcher}: Hydra stopped (exit code {e.code}); "
                              "its message is above") from None
    except KeyboardInterrupt as e:
        interrupted = True
        signal_name = "SIGTERM" if isinstance(e, SweepTerminated) else "SIGINT"
    except Exception as e:
        # submitit raises the same error type when sbatch refuses the array: nothing was submitted then
        if not slurm_array.is_job_error(e) or (launcher == "submitit_slurm"
                                               and not slurm_array.array_job_ids(job_root)):
            raise ConfigError(f"--launcher {launcher}: {_first_line(e)}") from None
        stopped_early = True  # a task ended without a result; the rest of the array may still run
    finally:
        sys.argv = saved
        if GlobalHydra.instance().is_initialized():
            GlobalHydra.instance().clear()
    tasks: dict[int, slurm_array.ArrayTask] = {}
    if launcher == "submitit_slurm" and (stopped_early or interrupted):  # else every task returned its result
        tasks = slurm_array.settle(job_root, cancel=interrupted, wait=True)
    results = collect(plan, job_root, resume=resume, finished=not interrupted, tasks=tasks)
    outcome = _write_index(plan, results, launcher, jobs, interrupted)
    outcome.signal_name = signal_name
    return outcome


@contextmanager
def _hydra_raises() -> Iterator[None]:
    """Hydra prints a launcher's exception with a stack trace and exits 1; this makes it raise instead,
    so a failed array task is told apart from a configuration error."""
    saved = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved


@contextmanager
def _watching(launcher: str) -> Iterator[None]:
    if launcher != "submitit_slurm":
        yield
        return
    from cgbench.config.slurm_array import queue_aware_watcher

    with queue_aware_watcher():
        yield


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _config_dir() -> Path:
    from cgbench.config.compose import config_dir

    return config_dir()


def collect(plan: SweepPlan, job_root: Path, *, resume: bool, finished: bool = True,
            tasks: dict[int, ArrayTask] | None = None) -> list[PointResult]:
    """Copy every job's result into ``<out_dir>/<point file>`` and return the point records.

    ``tasks`` (SLURM: Hydra job number -> its array task) explains the points left without a result."""
    from cgbench.results.document import load_result, write_json_atomic

    where = {p.overrides: i for i, p in enumerate(plan.points)}
    results = [PointResult(p, PENDING) for p in plan.points]
    if resume:
        kept, rerun = resume_decisions(plan)
        for i, doc in kept.items():
            p = plan.points[i]
            results[i] = PointResult(p, DONE, headline(doc["metrics"]), reused=True, fingerprint=p.fingerprint)
        plan.notes.extend(f"point {i + 1}/{len(plan.points)} ({point_label(plan.points[i])}): {why}"
                          for i, why in sorted(rerun.items()))
    job_dirs = sorted((d for d in job_root.iterdir() if d.is_dir()), key=lambda d: d.name) \
        if job_root.is_dir() else []
    started: set[int] = set()
    for d in job_dirs:
        if (d / STARTED_NAME).is_file():
            i = where.get(tuple(_read_json(d / STARTED_NAME).get("overrides") or ()))
            if i is not None:
                started.add(i)
                if d.name != str(i):  # job number != point index: the tasks cannot be matched to points
                    tasks = None
        if (d / RESULT_NAME).is_file():
            try:
                doc = load_result(d / RESULT_NAME)
            except ConfigError:
                continue
            i = where.get(tuple(doc.get("overrides") or ()))
            if i is None:
                continue
            write_json_atomic(plan.out_dir / plan.points[i].file, doc)
            results[i] = PointResult(plan.points[i], DONE, headline(doc["metrics"]),
                                     fingerprint=plan.points[i].fingerprint)
        elif (d / ERROR_NAME).is_file():
            info = _read_json(d / ERROR_NAME)
            i = where.get(tuple(info.get("overrides") or ()))
            if i is not None:
                task = (tasks or {}).get(i)
                log = f" (log: {task.log})" if task is not None else ""
                results[i] = PointResult(plan.points[i], FAILED, wall_s=float(info.get("wall_s", 0.0)),
                                         error=f"{info.get('error')}{log}")
    for i, r in enumerate(results):
        if r.status != PENDING:
            continue
        if tasks and i in tasks:
            results[i] = _unfinished_task(r, tasks[i], started=i in started)
        elif finished:
            results[i] = PointResult(r.point, FAILED, error=f"no result in {job_root}")
    return results


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _unfinished_task(r: PointResult, task: ArrayTask, *, started: bool) -> PointResult:
    """A point whose array task left no result: missing (cancelled: --resume runs it) or failed (with its log)."""
    from cgbench.config.slurm_array import was_cancelled

    if was_cancelled(task.state):
        when = "while it ran" if started else "before it started"
        return PointResult(r.point, PENDING, error=f"not run: array task {task.job_id} was cancelled {when}")
    return PointResult(r.point, FAILED, error=f"array task {task.job_id} ended {task.state} without a result "
                                              f"(log: {task.log})")


def _write_index(plan: SweepPlan, results: list[PointResult], launcher: str, jobs: int,
                 interrupted: bool) -> SweepOutcome:
    from cgbench.results.document import write_json_atomic

    created = datetime.now(UTC).isoformat(timespec="seconds")
    doc = index_document(plan, results, status=final_status(results, interrupted), created_at=created,
                         jobs=jobs, launcher=launcher)
    path = write_json_atomic(plan.out_dir / INDEX_NAME, doc)
    return SweepOutcome(plan, results, interrupted, path)
