"""The SLURM executor: one job array per ``run``, through submitit's public API.

``AutoExecutor(cluster="slurm").map_array`` submits the tasks as one array (task ``i`` runs the
``i``-th task given); each array task runs ``cgbench.analysis.executors.call``, so its result is an
``Outcome`` read back with ``job.result()``. The loop polls the result files and, every few seconds,
the tasks' states (``job.get_info`` / ``job.state``, which read accounting through sacct). A task
that ends without a result is reported from its state: cancelled (``missing``: ``--resume`` runs it)
or failed, with its log. SLURM keeps no accounting record of a task cancelled while it was still
pending, so a task that sacct does not know and squeue no longer lists is reported as cancelled
(submitit alone would wait for it forever). Ctrl-C cancels the array (scancel).

Only imported with ``--executor slurm``; needs submitit (``pip install 'cgbench[slurm]'``) and the
SLURM clients (sbatch, squeue, sacct, scancel).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from cgbench.analysis.executors import Outcome, Task, call
from cgbench.config.schema import ConfigError

FOLDER = "slurm"  # <sweep folder>/slurm/<time>/<array>_<i>/: submitit's files and each task's logs
# submitit's own names (timeout_min, mem_gb, ...) pass as they are; any other --slurm KEY is a SLURM
# option and goes to submitit as slurm_KEY (partition -> slurm_partition)
GENERIC = frozenset({"timeout_min", "mem_gb", "cpus_per_task", "gpus_per_node", "tasks_per_node", "nodes", "name",
                     "stderr_to_stdout"})
DEFAULTS: dict[str, Any] = {"timeout_min": 60, "nodes": 1, "tasks_per_node": 1, "slurm_array_parallelism": 256}
# states in which a task may still run (or be requeued); anything else is final
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "RESIZING", "READY",
                           "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "UNKNOWN",
                           "PREEMPTED"})
STATE_POLL_S = 3.0  # how often accounting is asked (one sacct call for every task of the array)
UNRECORDED_GRACE_S = 10.0  # how long a task may be in neither squeue nor sacct before it counts as cancelled
RESULT_GRACE_S = 10.0  # how long a finished task's result file may lag behind its state (shared file systems)


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    """``--slurm KEY=VALUE`` pairs -> submitit parameters. VALUE is YAML (``10``, ``[a, b]``,
    ``{mail-type: END}``); KEY is one of submitit's own names or a SLURM option (``partition``)."""
    from cgbench.safeio import load_yaml_text

    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise ConfigError(f"--slurm {pair!r}: expected KEY=VALUE (e.g. --slurm partition=cpu)")
        name = key if key in GENERIC or key.startswith("slurm_") else f"slurm_{key}"
        if name in out:
            raise ConfigError(f"--slurm {key}: given more than once")
        out[name] = load_yaml_text(text, f"--slurm {key}") if text.strip() else ""
    return out


def available() -> None:
    """ConfigError (one line) unless submitit and the SLURM clients are here."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ConfigError("--executor slurm: submitit is not installed (pip install 'cgbench[slurm]')") from None
    if shutil.which("sbatch") is None:
        raise ConfigError("--executor slurm: no 'sbatch' on PATH (run it on a SLURM login node; --jobs N runs the "
                          "sweep in local worker processes)")


class SlurmExecutor:
    """Runs tasks as SLURM array jobs; submitit's files and the logs go under ``folder``."""

    name = "slurm"

    def __init__(self, folder: Path, settings: dict[str, Any], *, parallelism: int | None = None,
                 job_name: str = "cgbench", say: Callable[[str], None] | None = None) -> None:
        available()
        import submitit

        params = {**DEFAULTS, "name": job_name, **settings}
        if parallelism is not None:
            if "slurm_array_parallelism" in settings:
                raise ConfigError("--jobs: sets array_parallelism with --executor slurm; give one of them")
            params["slurm_array_parallelism"] = parallelism
        self.folder = folder
        self.parameters = params
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        try:
            self._ex = submitit.AutoExecutor(folder=str(folder / "%j"), cluster="slurm")
        except RuntimeError as e:  # submitit checks for srun
            raise ConfigError(f"--executor slurm: {str(e).strip().splitlines()[0]}") from None
        try:
            self._ex.update_parameters(**params)
        except (NameError, ValueError, TypeError) as e:
            raise ConfigError(f"--slurm: {str(e).strip().splitlines()[0]}") from None
        self.arrays: list[str] = []

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        if not tasks:
            return
        try:
            jobs = self._ex.map_array(call, [fn] * len(tasks), list(tasks))
        except Exception as e:  # sbatch refused the array (a bad partition, a limit): nothing was submitted
            text = str(e).strip().splitlines()
            raise ConfigError(f"--executor slurm: sbatch refused the array: {text[-1] if text else type(e).__name__}") \
                from None
        arrays = sorted({j.job_id.partition("_")[0] for j in jobs}, key=int)
        self.arrays.extend(arrays)
        self.say(f"SLURM array {', '.join(arrays)}: {len(jobs)} tasks (logs: {self.folder})")
        try:
            _Watch(jobs, list(tasks), arrays, on_outcome).until_done()
        except KeyboardInterrupt:
            self._cancel(arrays)
            raise

    def _cancel(self, arrays: list[str]) -> None:
        subprocess.run(["scancel", *arrays], capture_output=True)
        self.say(f"cancelled SLURM array {', '.join(arrays)}")

    def close(self, *, abort: bool = False) -> None:
        if abort and self.arrays:
            self._cancel(self.arrays)


def _queued(arrays: list[str]) -> set[str] | None:
    """The array tasks still in the queue (pending or running); None if squeue fails."""
    r = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i"], capture_output=True, text=True)
    return set(r.stdout.split()) if r.returncode == 0 else None


class _Watch:
    """Polls an array's tasks until each has reported its outcome."""

    def __init__(self, jobs: list, tasks: list[Task], arrays: list[str], on_outcome: Callable[[Outcome], None],
                 poll_s: float = 0.5) -> None:
        self.pending = dict(zip(jobs, tasks, strict=True))
        self.arrays, self.on_outcome, self.poll_s = arrays, on_outcome, poll_s
        self._since: dict[Any, float] = {}  # job -> when it was first seen without a result and not running

    def until_done(self) -> None:
        last_states = float("-inf")
        while self.pending:
            for job in [j for j in self.pending if j.paths.result_pickle.exists()]:
                self._emit(job, self._result(job))
            if self.pending and time.monotonic() - last_states >= STATE_POLL_S:
                self._check_states()
                last_states = time.monotonic()
            if self.pending:
                time.sleep(self.poll_s)

    def _emit(self, job, outcome: Outcome) -> None:
        del self.pending[job]
        self.on_outcome(outcome)

    def _result(self, job) -> Outcome:
        task = self.pending[job]
        try:
            outcome = job.result()
        except Exception as e:  # the result file holds an error of submitit's own (unpickling, the environment)
            lines = [line for line in str(e).splitlines() if line.strip()]
            return Outcome(task.key, error=f"array task {job.job_id} failed: {lines[-1] if lines else type(e).__name__}"
                                           f" (log: {job.paths.stderr})")
        if isinstance(outcome, Outcome) and not outcome.ok:
            return Outcome(task.key, error=f"{outcome.error} (log: {job.paths.stderr})", wall_s=outcome.wall_s)
        return outcome

    def _check_states(self) -> None:
        first = next(iter(self.pending))
        first.get_info(mode="force")  # one sacct call refreshes every task's state
        queued = _queued(self.arrays)
        now = time.monotonic()
        for job in list(self.pending):
            state = str(job.state).upper()
            unrecorded = state == "UNKNOWN" and queued is not None and job.job_id not in queued
            if state in ACTIVE_STATES and not unrecorded:
                self._since.pop(job, None)
                continue
            since = self._since.setdefault(job, now)
            if job.paths.result_pickle.exists():
                continue  # picked up by the next poll
            if unrecorded and now - since >= UNRECORDED_GRACE_S:
                self._emit(job, self._missing(job, started=False))
            elif not unrecorded and state.startswith("CANCELLED"):
                self._emit(job, self._missing(job, started=self._started(job)))
            elif not unrecorded and now - since >= RESULT_GRACE_S:
                self._emit(job, Outcome(self.pending[job].key, error=f"array task {job.job_id} ended {job.state} "
                                                                     f"without a result (log: {job.paths.stderr})"))

    @staticmethod
    def _started(job) -> bool:
        return job.paths.stdout.exists() or job.paths.stderr.exists()

    def _missing(self, job, *, started: bool) -> Outcome:
        when = "while it ran" if started else "before it started"
        return Outcome(self.pending[job].key, missing=True,
                       error=f"not run: array task {job.job_id} was cancelled {when}")


def slurm_folder(sweep_dir: Path) -> Path:
    """A new folder for one submission's files: ``<sweep>/slurm/<time>``."""
    return (sweep_dir / FOLDER / datetime.now().strftime("%Y%m%d-%H%M%S-%f")).resolve()
