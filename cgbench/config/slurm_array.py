"""The SLURM job array behind a ``--launcher submitit_slurm`` sweep: its tasks, their end, their states.

Hydra's submitit launcher submits one array and waits for its tasks in order; the first task that
ends without a result (cancelled, failed) makes it raise while later tasks may still be queued or
running. ``settle`` then waits for the whole array to leave the queue (or cancels it, after Ctrl-C)
and reads every task's final state from accounting, so that the sweep is collected only once no
task can still write a result, and each missing point can be explained.

Only imported on the SLURM path; uses the SLURM clients (squeue, sacct, scancel) and submitit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NOT_RECORDED = "CANCELLED (no accounting record)"  # see queue_aware_watcher
SUBMITIT_FOLDER = ".submitit"  # the launcher's default submitit_folder: ${hydra.sweep.dir}/.submitit/%j
_TASK_FOLDER = re.compile(r"(\d+)_(\d+)")
# states in which a task may still run (or be requeued); anything else is final
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "RESIZING",
                           "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "UNKNOWN"})


@dataclass(frozen=True)
class ArrayTask:
    job_id: str  # "<array id>_<task index>"
    job_num: int  # the Hydra job number it ran (= the sweep point's index)
    state: str  # final SLURM state as sacct reports it: COMPLETED, CANCELLED by 0, FAILED, TIMEOUT, ...
    log: Path  # the task's stderr as submitit writes it


def is_job_error(e: BaseException) -> bool:
    """submitit's error for a task that ended without a result (not a submission or config error)."""
    try:
        from submitit.core.utils import FailedJobError, UncompletedJobError
    except ImportError:
        return False
    return isinstance(e, (FailedJobError, UncompletedJobError))


def was_cancelled(state: str) -> bool:
    return state.upper().startswith("CANCELLED")


def array_job_ids(job_root: Path) -> dict[int, str]:
    """Hydra job number -> SLURM job id, from submitit's per-task folders (made at submission).

    Hydra submits its jobs in order, one array per batch, so the arrays' tasks in id order are
    the jobs 0, 1, 2, ..."""
    folder = job_root / SUBMITIT_FOLDER
    tasks: dict[int, list[int]] = {}
    for d in folder.iterdir() if folder.is_dir() else ():
        m = _TASK_FOLDER.fullmatch(d.name)
        if m and d.is_dir():
            tasks.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    out: dict[int, str] = {}
    offset = 0
    for array in sorted(tasks):
        for index in sorted(tasks[array]):
            out[offset + index] = f"{array}_{index}"
        offset += max(tasks[array]) + 1
    return out


def _queued() -> set[str] | None:
    """This user's jobs and array tasks in the queue (pending or running); None if squeue fails."""
    r = subprocess.run(["squeue", "-h", "-r", "-u", str(os.getuid()), "-o", "%i"], capture_output=True, text=True)
    return set(r.stdout.split()) if r.returncode == 0 else None


def _active(arrays: list[str]) -> set[str]:
    queued = _queued() or set()
    return {j for j in queued if j.partition("_")[0] in arrays}


def _watcher(delay_s: int = 30):
    """submitit's sacct watcher, plus: an array task cancelled while it was still pending never reaches
    accounting (SLURM drops it from the array), so submitit would wait for it forever. A task that
    sacct does not know and squeue no longer lists is reported as ``NOT_RECORDED`` (cancelled)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class QueueAwareWatcher(SlurmInfoWatcher):
        def update(self) -> None:
            super().update()
            unknown = [j for j in self._registered - self._finished if j not in self._info_dict]
            queued = _queued() if unknown else None
            for j in unknown if queued is not None else ():
                if j not in queued:
                    self._info_dict[j] = {"JobID": j, "State": NOT_RECORDED}
                    self._finished.add(j)

    return QueueAwareWatcher(delay_s=delay_s)


@contextmanager
def queue_aware_watcher() -> Iterator[None]:
    """While Hydra's submitit launcher waits for the array, its jobs use ``_watcher``."""
    from submitit.slurm.slurm import SlurmJob

    saved = SlurmJob.watcher
    SlurmJob.watcher = _watcher()
    try:
        yield
    finally:
        SlurmJob.watcher = saved


def _states(job_ids: list[str]) -> dict[str, str]:
    watcher = _watcher()
    for j in job_ids:
        watcher.register_job(j)
    watcher.update()
    return {j: watcher.get_state(j, mode="cache") for j in job_ids}


def _log_path(job_root: Path, job_id: str) -> Path:
    from submitit.core.utils import JobPaths

    return JobPaths(job_root / SUBMITIT_FOLDER / "%j", job_id=job_id, task_id=0).stderr


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def settle(job_root: Path, *, cancel: bool, wait: bool, poll_s: float = 1.0,
           accounting_s: float = 30.0) -> dict[int, ArrayTask]:
    """Wait for the sweep's array to end (``cancel``: scancel it first), then read its tasks' states.

    Returns Hydra job number -> task. ``accounting_s`` bounds how long sacct may lag behind the queue."""
    ids = array_job_ids(job_root)
    if not ids:
        return {}
    arrays = sorted({j.partition("_")[0] for j in ids.values()}, key=int)
    if cancel:
        subprocess.run(["scancel", *arrays], capture_output=True)
        _say(f"cancelled SLURM array {', '.join(arrays)}")
    if wait or cancel:
        told = False
        while left := _active(arrays):
            if not told:
                _say(f"waiting for {len(left)} unfinished task(s) of SLURM array {', '.join(arrays)} "
                     f"(scancel {' '.join(arrays)} stops them)")
                told = True
            try:
                time.sleep(poll_s)
            except KeyboardInterrupt:
                subprocess.run(["scancel", *arrays], capture_output=True)
                _say(f"cancelled SLURM array {', '.join(arrays)}")
    # sacct may lag a moment behind the queue: ask again while a task is not final (a task it has no
    # record of for a few seconds was dropped from the array: cancelled while pending)
    t0 = time.monotonic()
    states = _states(list(ids.values()))
    while time.monotonic() - t0 < accounting_s:
        active = any(s.upper() in ACTIVE_STATES for s in states.values())
        unrecorded = NOT_RECORDED in states.values() and time.monotonic() - t0 < 5
        if not (active or unrecorded):
            break
        time.sleep(poll_s)
        states = _states(list(ids.values()))
    return {num: ArrayTask(j, num, states[j], _log_path(job_root, j)) for num, j in ids.items()}
