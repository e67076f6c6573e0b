"""The SLURM executor: job arrays through submitit's public API, many points per array task.

``AutoExecutor(cluster="slurm").map_array`` submits the array tasks; each task runs
``cgbench.analysis.sweep.executors.call_chunk`` over a chunk of consecutive points, so its result is a list
of ``Outcome`` read back with ``job.result()``. Chunks are sized and arrays split at the cluster's
``MaxArraySize`` by ``cgbench.analysis.sweep.slurm_arrays`` (10,000 points are a few hundred tasks in as many
arrays as the cluster allows). The loop polls the result files and the tasks' states
(``job.get_info`` / ``job.state``, which read accounting through sacct), each less often while nothing
changes. A task that ends without a result is reported, for every point of its chunk, from its state:
cancelled (``missing``: ``--resume`` runs it) or failed, with its log. SLURM keeps no accounting record
of a task cancelled while it was still pending, so a task that sacct does not know and squeue no
longer lists is reported as cancelled (submitit alone would wait for it forever). Ctrl-C cancels the
arrays (scancel).

Detached (``detach=True``), ``run`` submits and returns: the submission (``record``: each task's id and
points) goes into the sweep's index, and a later ``--resume`` adopts the tasks still on the cluster
(``adopt``) and collects them with the new ones.

Only imported with ``--executor slurm``; needs submitit (``pip install 'cgbench[slurm]'``) and the
SLURM clients (sbatch, squeue, sacct, scancel, scontrol).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cgbench.analysis.sweep.executors import Outcome, Task, call_chunk
from cgbench.analysis.sweep.slurm_arrays import (
    RESULT_POLL_MAX_S,
    RESULT_POLL_S,
    STATE_POLL_MAX_S,
    Backoff,
    array_batches,
    chunks,
    cluster_max_array_size,
    points_per_task,
)
from cgbench.config.schema import ConfigError

FOLDER = "slurm"  # <sweep folder>/slurm/<time>/<array>_<i>/: submitit's files and each task's logs
# submitit's own names (timeout_min, mem_gb, ...) pass as they are; any other --slurm KEY is a SLURM
# option and goes to submitit as slurm_KEY (partition -> slurm_partition)
GENERIC = frozenset({"timeout_min", "mem_gb", "cpus_per_task", "gpus_per_node", "tasks_per_node", "nodes", "name",
                     "stderr_to_stdout"})
DEFAULTS: dict[str, Any] = {"timeout_min": 60, "nodes": 1, "tasks_per_node": 1, "slurm_array_parallelism": 256}
OWN = frozenset({"points_per_task"})  # --slurm keys cgbench reads itself (not submitit's, not sbatch's)
# states in which a task may still run (or be requeued); anything else is final
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "RESIZING", "READY",
                           "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "UNKNOWN",
                           "PREEMPTED"})
STATE_POLL_S = 3.0  # how often accounting is asked at first (one sacct call for every task); backs off to 60 s
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
        name = key if key in GENERIC or key in OWN or key.startswith("slurm_") else f"slurm_{key}"
        if name in out:
            raise ConfigError(f"--slurm {key}: given more than once")
        out[name] = load_yaml_text(text, f"--slurm {key}") if text.strip() else ""
    k = out.get("points_per_task")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ConfigError(f"--slurm points_per_task: must be an integer >= 1, got {k!r}")
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


@dataclass(eq=False)
class ArrayTask:
    """One submitted array task: its submitit job handle and the keys (points) of its chunk."""

    job: Any
    keys: tuple[int, ...]


class SlurmExecutor:
    """Runs tasks as SLURM array jobs; submitit's files and the logs go under ``folder``."""

    name = "slurm"

    def __init__(self, folder: Path, settings: dict[str, Any], *, parallelism: int | None = None,
                 job_name: str = "cgbench", say: Callable[[str], None] | None = None, detach: bool = False,
                 point_s: float | None = None, unit: str = "point") -> None:
        available()
        import submitit

        settings = dict(settings)
        self.chunk_size: int | None = settings.pop("points_per_task", None)
        params = {**DEFAULTS, "name": job_name, **settings}
        if parallelism is not None:
            if "slurm_array_parallelism" in settings:
                raise ConfigError("--jobs: sets array_parallelism with --executor slurm; give one of them")
            params["slurm_array_parallelism"] = parallelism
        self.folder = folder
        self.parallelism = parallelism  # --jobs as given (None: the settings' or the default)
        self.parameters = params
        # as given (without the defaults): what a resume submits with again
        self.settings = {**settings, **({"points_per_task": self.chunk_size} if self.chunk_size else {})}
        self.detach = detach
        self.unit = unit  # what a task runs, in the lines said: a sweep's point, advise's candidate
        self.point_s = point_s  # a point's measured time, when known (a resumed sweep's)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.on_submitted: Callable[[dict[str, Any]], None] | None = None  # told each submission's record
        try:
            self._ex = submitit.AutoExecutor(folder=str(folder / "%j"), cluster="slurm")
        except RuntimeError as e:  # submitit checks for srun
            raise ConfigError(f"--executor slurm: {str(e).strip().splitlines()[0]}") from None
        try:
            self._ex.update_parameters(**params)
        except (NameError, ValueError, TypeError) as e:
            raise ConfigError(f"--slurm: {str(e).strip().splitlines()[0]}") from None
        self.arrays: list[str] = []
        self.submissions: list[dict[str, Any]] = []  # every submission's record, oldest first
        self._adopted: list[ArrayTask] = []

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        """Submit ``tasks`` (in chunks, in arrays), then, unless detached, watch them and the adopted
        tasks of an earlier submission until every one has ended."""
        submitted = self.submit(fn, tasks) if tasks else []
        watched, self._adopted = submitted + self._adopted, []
        if not watched or self.detach:
            return
        arrays = sorted({t.job.job_id.partition("_")[0] for t in watched}, key=int)
        try:
            _Watch(watched, arrays, on_outcome).until_done()
        except KeyboardInterrupt:
            self._cancel(arrays)
            raise

    def submit(self, fn: Callable[..., Any], tasks: Sequence[Task]) -> list[ArrayTask]:
        """Submit ``tasks`` as array tasks of ``points_per_task`` points, split into arrays of at most
        the cluster's ``MaxArraySize`` tasks; returns them, and records the submission."""
        t0 = time.monotonic()
        size = points_per_task(len(tasks), int(self.parameters["slurm_array_parallelism"]), explicit=self.chunk_size,
                               point_s=self.point_s, timeout_min=float(self.parameters["timeout_min"]))
        parts = chunks(list(tasks), size)
        limit, source = cluster_max_array_size()
        submitted: list[ArrayTask] = []
        for batch in array_batches(parts, limit):
            try:
                jobs = self._ex.map_array(call_chunk, [fn] * len(batch), batch)
            except Exception as e:  # sbatch refused an array (a bad partition, a limit): none of it was submitted
                if submitted:
                    self._cancel(sorted({t.job.job_id.partition("_")[0] for t in submitted}, key=int))
                text = str(e).strip().splitlines()
                raise ConfigError(f"--executor slurm: sbatch refused the array: "
                                  f"{text[-1] if text else type(e).__name__}") from None
            submitted += [ArrayTask(j, tuple(t.key for t in chunk)) for j, chunk in zip(jobs, batch, strict=True)]
        arrays = sorted({t.job.job_id.partition("_")[0] for t in submitted}, key=int)
        self.arrays.extend(arrays)
        seconds = time.monotonic() - t0
        record = {"folder": str(self.folder), "submitted_at": datetime.now().isoformat(timespec="seconds"),
                  "points_per_task": size, "max_array_size": limit, "seconds": round(seconds, 3),
                  "tasks": [[t.job.job_id, list(t.keys)] for t in submitted]}
        self.submissions.append(record)
        self.say(f"SLURM: {_n(len(tasks), self.unit)} in {_n(len(submitted), 'array task')} of up to "
                 f"{_n(size, self.unit)}, {_n(len(arrays), 'array')} ({', '.join(arrays)}; MaxArraySize {limit} from "
                 f"{source}), submitted in {seconds:.1f} s (logs: {self.folder})")
        if self.on_submitted is not None:
            self.on_submitted(record)
        return submitted

    def adopt(self, folder: Path, tasks: Sequence[tuple[str, Sequence[int]]]) -> None:
        """Array tasks of an earlier submission (their files under ``folder``), still on the cluster:
        the next ``run`` watches them with its own (or, detached, records them again)."""
        import submitit

        for job_id, keys in tasks:
            self._adopted.append(ArrayTask(submitit.SlurmJob(folder=str(folder / "%j"), job_id=job_id), tuple(keys)))
        if tasks:
            self.submissions.append({"folder": str(folder), "adopted": True,
                                     "tasks": [[job_id, list(keys)] for job_id, keys in tasks]})

    def _cancel(self, arrays: list[str]) -> None:
        subprocess.run(["scancel", *arrays], capture_output=True)
        self.say(f"cancelled SLURM array {', '.join(arrays)}")

    def close(self, *, abort: bool = False) -> None:
        if abort and self.arrays and not self.detach:
            self._cancel(self.arrays)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def queued_tasks(arrays: list[str]) -> set[str] | None:
    """The array tasks still in the queue (pending or running); None if squeue fails."""
    r = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i"], capture_output=True, text=True)
    return set(r.stdout.split()) if r.returncode == 0 else None


class _Watch:
    """Polls array tasks until each has reported the outcome of every point of its chunk; the polls
    back off while nothing changes (``slurm_arrays.Backoff``)."""

    def __init__(self, tasks: list[ArrayTask], arrays: list[str], on_outcome: Callable[[Outcome], None],
                 poll_s: float | None = None) -> None:
        self.pending = {t.job: t for t in tasks}
        self.arrays, self.on_outcome = arrays, on_outcome
        self.results = Backoff(RESULT_POLL_S if poll_s is None else poll_s,
                               RESULT_POLL_MAX_S if poll_s is None else poll_s)
        self.states = Backoff(STATE_POLL_S, max(STATE_POLL_S, STATE_POLL_MAX_S))
        self._since: dict[Any, float] = {}  # job -> when it was first seen without a result and not running
        self._last_states: dict[Any, str] = {}

    def until_done(self) -> None:
        next_states = time.monotonic()
        while self.pending:
            done = [j for j in self.pending if j.paths.result_pickle.exists()]
            for job in done:
                self._emit(job, self._results(job))
            if self.pending and time.monotonic() >= next_states:
                changed = self._check_states()
                next_states = time.monotonic() + (self.states.changed() if changed or done else self.states.idle())
            if self.pending:
                time.sleep(self.results.changed() if done else self.results.idle())

    def _emit(self, job, outcomes: list[Outcome]) -> None:
        keys = set(self.pending.pop(job).keys)
        for outcome in outcomes:
            if outcome.key in keys:  # an adopted task's chunk may hold points kept since
                self.on_outcome(outcome)

    def _each(self, job, **fields: Any) -> list[Outcome]:
        return [Outcome(key, **fields) for key in self.pending[job].keys]

    def _results(self, job) -> list[Outcome]:
        try:
            value = job.result()
        except Exception as e:  # the result file holds an error of submitit's own (unpickling, the environment)
            lines = [line for line in str(e).splitlines() if line.strip()]
            return self._each(job, error=f"array task {job.job_id} failed: {lines[-1] if lines else type(e).__name__}"
                                         f" (log: {job.paths.stderr})")
        outcomes = value if isinstance(value, list) else [value]
        out = []
        for outcome in outcomes:
            if isinstance(outcome, Outcome) and not outcome.ok:
                outcome = Outcome(outcome.key, error=f"{outcome.error} (log: {job.paths.stderr})",
                                  wall_s=outcome.wall_s, refused=outcome.refused)
            out.append(outcome)
        return out

    def _check_states(self) -> bool:
        """Read every task's state (one sacct call) and report the tasks that ended without a result;
        True when any state changed since the last look."""
        first = next(iter(self.pending))
        first.get_info(mode="force")  # one sacct call refreshes every task's state
        queued = queued_tasks(self.arrays)
        now = time.monotonic()
        changed = False
        for job in list(self.pending):
            state = str(job.state).upper()
            if self._last_states.get(job) != state:
                self._last_states[job] = state
                changed = True
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
                self._emit(job, self._each(job, error=f"array task {job.job_id} ended {job.state} without a result "
                                                      f"(log: {job.paths.stderr})"))
        return changed

    @staticmethod
    def _started(job) -> bool:
        return job.paths.stdout.exists() or job.paths.stderr.exists()

    def _missing(self, job, *, started: bool) -> list[Outcome]:
        when = "while it ran" if started else "before it started"
        return self._each(job, missing=True, error=f"not run: array task {job.job_id} was cancelled {when}")


def slurm_folder(sweep_dir: Path) -> Path:
    """A new folder for one submission's files: ``<sweep>/slurm/<time>``."""
    return (sweep_dir / FOLDER / datetime.now().strftime("%Y%m%d-%H%M%S-%f")).resolve()
