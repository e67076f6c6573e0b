"""Where the runs of a sweep or an advise search are computed: one ``Executor`` protocol.

An executor runs ``fn(*args)`` for each task and reports every task's ``Outcome`` to the caller's
``on_outcome``, in the calling process, as the tasks end (in any order). ``fn`` must be a
module-level function (the pool and SLURM executors pickle it by reference) and returns a small
picklable value; an exception it raises becomes the task's ``error`` (one line), never the
executor's. Ctrl-C or SIGTERM (``KeyboardInterrupt``) in the caller stops the work in flight and
propagates; the outcomes reported before it stand.

* ``InProcess``: one task after the other, in the caller (``--jobs 1``).
* ``LocalPool``: long-lived worker processes (``--jobs N``) that die with their parent
  (``cgbench.analysis.workers``); tasks travel to them in chunks, so a quick task costs the pool a
  fraction of a millisecond rather than a round trip of its own.
* ``cgbench.analysis.executor_slurm.SlurmExecutor``: one SLURM job array per ``run``, through
  submitit's public ``AutoExecutor.map_array`` and job handles (``--executor slurm``).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from cgbench.config.schema import ConfigError

MAX_CHUNK = 16  # tasks per trip to a worker, at most
CHUNKS_PER_WORKER = 4  # at least this many chunks per worker, so the last ones balance the load


@dataclass(frozen=True)
class Task:
    key: int  # the caller's name for it (a point's index)
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Outcome:
    key: int
    value: Any = None
    error: str | None = None  # why it failed (one line); None when it returned ``value``
    missing: bool = False  # it never ran to an end of its own (a cancelled SLURM task): run it again
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


class Executor(Protocol):
    name: str  # in-process | pool | slurm (recorded in sweep.json)

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        """Run ``fn(*task.args)`` for every task, calling ``on_outcome`` once per task as it ends."""

    def close(self, *, abort: bool = False) -> None:
        """Release the workers (``abort``: stop the busy ones now)."""


def describe(e: BaseException) -> str:
    """A task's error in one line: a ConfigError's message, else the exception's type and message."""
    return str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"


def call(fn: Callable[..., Any], task: Task) -> Outcome:
    """One task, its exception caught and described (what a worker runs for each task)."""
    t0 = time.perf_counter()
    try:
        value = fn(*task.args)
    except Exception as e:  # one broken task must not lose the others
        return Outcome(task.key, error=describe(e), wall_s=time.perf_counter() - t0)
    return Outcome(task.key, value, wall_s=time.perf_counter() - t0)


def call_chunk(fn: Callable[..., Any], tasks: Sequence[Task]) -> list[Outcome]:
    return [call(fn, t) for t in tasks]


class InProcess:
    """Every task in the calling process, in order."""

    name = "in-process"

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        from cgbench.analysis.workers import InterruptWatch

        with InterruptWatch() as ctrl_c:
            for task in tasks:
                outcome = call(fn, task)
                if ctrl_c.hit:  # Ctrl-C inside a library that turned it into another error
                    raise KeyboardInterrupt
                on_outcome(outcome)

    def close(self, *, abort: bool = False) -> None:
        pass


def chunk_size(n_tasks: int, workers: int) -> int:
    """Tasks per chunk: up to ``MAX_CHUNK``, leaving ``CHUNKS_PER_WORKER`` chunks per worker."""
    return max(1, min(MAX_CHUNK, n_tasks // (workers * CHUNKS_PER_WORKER)))


class LocalPool:
    """``jobs`` worker processes, started on the first ``run`` and kept until ``close``."""

    name = "pool"

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise ConfigError(f"--jobs: must be >= 1, got {jobs}")
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    def _start(self) -> ProcessPoolExecutor:
        if self._pool is None:
            from cgbench.analysis.workers import worker_init

            # spawn, not fork: the parent may run Rich's refresh thread, and fork with threads is unsafe
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=worker_init, initargs=(os.getpid(),))
        return self._pool

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        from cgbench.analysis.workers import signals_deferred

        if not tasks:
            return
        size = chunk_size(len(tasks), self.jobs)
        running: dict[Future, None] = {}
        try:
            # the workers are spawned while the chunks are submitted: a signal that cut a spawn short
            # would leave a worker reading half its start-up data (a traceback on stderr)
            with signals_deferred():
                pool = self._start()
                for start in range(0, len(tasks), size):
                    running[pool.submit(call_chunk, fn, tasks[start:start + size])] = None
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    del running[fut]
                    for outcome in fut.result():
                        on_outcome(outcome)
        except BaseException:
            # Interrupted (or the pool broke): drop queued chunks and stop the busy workers now rather
            # than after their chunk (their partial work is lost; atomic writes leave no partial files).
            self.close(abort=True)
            raise

    def close(self, *, abort: bool = False) -> None:
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        if abort:
            busy = list((getattr(pool, "_processes", None) or {}).values())  # the stdlib keeps no public list
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in busy:
                proc.terminate()
        else:
            pool.shutdown(wait=True)


def local_executor(jobs: int) -> Executor:
    """``--jobs 1``: in this process; more: a pool of that many workers."""
    if jobs < 1:
        raise ConfigError(f"--jobs: must be >= 1, got {jobs}")
    return InProcess() if jobs == 1 else LocalPool(jobs)
