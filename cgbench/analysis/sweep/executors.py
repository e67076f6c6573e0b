"""Where the runs of a sweep or an advise search are computed: one ``Executor`` protocol.

An executor runs ``fn(*args)`` for each task and reports every task's ``Outcome`` to the caller's
``on_outcome``, in the calling process, as the tasks end (in any order). ``fn`` must be a
module-level function (the pool and SLURM executors pickle it by reference) and returns a small
picklable value; an exception it raises becomes the task's ``error`` (one line), never the
executor's. Ctrl-C or SIGTERM (``KeyboardInterrupt``) in the caller stops the work in flight and
propagates; the outcomes reported before it stand.

* ``InProcess``: one task after the other, in the caller (``--jobs 1``).
* ``LocalPool``: long-lived worker processes (``--jobs N``) that die with their parent
  (``cgbench.analysis.sweep.workers``); tasks travel to them in chunks sized from the tasks' measured
  time (one at first, then about ``CHUNK_TARGET_S`` of work each), so a quick task costs the pool a
  fraction of a millisecond rather than a round trip of its own, and slow tasks still balance.
  Where it is safe (``worker_context``: Linux, and no other thread in the caller) the workers are
  forked from the caller once it has imported what the tasks need (``warm``), so no worker pays the
  interpreter's start-up and the imports again (about a second of CPU each, which made ``--jobs 2``
  slower than ``--jobs 1`` for a sweep of small points on a busy machine); elsewhere they are
  spawned, fresh interpreters that import on their own.
* ``cgbench.analysis.sweep.executor_slurm.SlurmExecutor``: SLURM job arrays, a chunk of tasks in each array
  task, through submitit's public ``AutoExecutor.map_array`` and job handles (``--executor slurm``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cgbench.config.schema import ConfigError

if TYPE_CHECKING:  # the pool's modules are imported where a pool starts: ``--jobs 1`` never needs them
    from concurrent.futures import Future, ProcessPoolExecutor
    from multiprocessing.context import BaseContext

MAX_CHUNK = 16  # tasks per trip to a worker, at most
CHUNK_TARGET_S = 0.05  # a chunk's share of work: long enough that a trip costs little, short enough to balance
IN_FLIGHT_PER_WORKER = 2  # chunks queued per worker, so none waits for the parent between chunks

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
    refused: bool = False  # it raised ConfigError (its config is bad input), not a crash

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
        return Outcome(task.key, error=describe(e), wall_s=time.perf_counter() - t0,
                       refused=isinstance(e, ConfigError))
    return Outcome(task.key, value, wall_s=time.perf_counter() - t0)


def call_chunk(fn: Callable[..., Any], tasks: Sequence[Task]) -> list[Outcome]:
    return [call(fn, t) for t in tasks]


def import_modules(names: tuple[str, ...]) -> None:
    """A worker's warm-up task: import what its tasks will need."""
    import importlib

    for name in names:
        importlib.import_module(name)


class InProcess:
    """Every task in the calling process, in order."""

    name = "in-process"

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        from cgbench.analysis.sweep.workers import InterruptWatch

        with InterruptWatch() as ctrl_c:
            for task in tasks:
                outcome = call(fn, task)
                if ctrl_c.hit:  # Ctrl-C inside a library that turned it into another error
                    raise KeyboardInterrupt
                on_outcome(outcome)

    def close(self, *, abort: bool = False) -> None:
        pass


def chunk_size(task_s: float | None, remaining: int, workers: int) -> int:
    """Tasks for the next chunk: one while nothing is measured, else about ``CHUNK_TARGET_S`` of work
    (at most ``MAX_CHUNK``), and never more than an even share of what is left between the workers."""
    if task_s is None:
        return 1
    by_time = int(CHUNK_TARGET_S / max(task_s, 1e-6))
    return max(1, min(MAX_CHUNK, by_time, -(-remaining // workers)))


def worker_context() -> BaseContext:
    """How the pool's workers start: ``fork`` where the caller has no other thread (a fork copies
    only the calling thread, so a lock another thread held, such as Rich's refresh thread's, would
    stay held in the worker forever) and the platform forks (Linux); ``spawn`` otherwise."""
    import multiprocessing

    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class LocalPool:
    """``jobs`` worker processes, started on the first ``run`` (or ``warm``) and kept until ``close``."""

    name = "pool"

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise ConfigError(f"--jobs: must be >= 1, got {jobs}")
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None
        self.start_method: str | None = None  # fork or spawn, once started

    def warm(self, modules: Sequence[str] = ()) -> None:
        """Start the workers now, with ``modules`` imported: forked, this process imports them first
        and the workers start with them (and everything else imported so far); spawned, each worker
        imports them, its start-up overlapping the caller's own work (planning a sweep)."""
        from cgbench.analysis.sweep.workers import signals_deferred

        with signals_deferred():
            context = worker_context()
            if context.get_start_method() == "fork":
                import_modules(tuple(modules))
                modules = ()
            pool = self._start(context)
            for _ in range(self.jobs):  # forked, the first submit starts every worker at once
                pool.submit(import_modules, tuple(modules))

    def _start(self, context: BaseContext | None = None) -> ProcessPoolExecutor:
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor

            from cgbench.analysis.sweep.workers import worker_init

            context = context if context is not None else worker_context()
            if context.get_start_method() == "fork":  # nothing buffered may be written twice
                sys.stdout.flush()
                sys.stderr.flush()
            self.start_method = context.get_start_method()
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=context,
                                             initializer=worker_init, initargs=(os.getpid(),))
        return self._pool

    def run(self, fn: Callable[..., Any], tasks: Sequence[Task], on_outcome: Callable[[Outcome], None]) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        from cgbench.analysis.sweep.workers import signals_deferred

        queue = list(reversed(tasks))
        running: dict[Future, list[Task]] = {}
        done = 0
        spent = 0.0  # the tasks' own seconds so far
        broken = False

        def submit(pool: ProcessPoolExecutor) -> None:
            while queue and len(running) < self.jobs * IN_FLIGHT_PER_WORKER:
                size = chunk_size(spent / done if done else None, len(queue), self.jobs)
                chunk = [queue.pop() for _ in range(min(size, len(queue)))]
                try:
                    running[pool.submit(call_chunk, fn, chunk)] = chunk
                except BrokenProcessPool as e:  # a worker died earlier: nothing more can run in this pool
                    for task in chunk + queue[::-1]:  # in task order (the queue is kept reversed)
                        on_outcome(Outcome(task.key, error=f"not run: the worker pool broke ({describe(e)})"))
                    queue.clear()

        try:
            # the workers are spawned while the first chunks are submitted: a signal that cut a spawn
            # short would leave a worker reading half its start-up data (a traceback on stderr)
            with signals_deferred():
                pool = self._start()
                submit(pool)
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    chunk = running.pop(fut)
                    try:
                        outcomes = fut.result()
                    except Exception as e:  # its worker died (killed, out of memory): the chunk's tasks failed
                        outcomes = [Outcome(t.key, error=f"its worker process died ({describe(e)})") for t in chunk]
                        broken = broken or isinstance(e, BrokenProcessPool)
                    for outcome in outcomes:
                        done += 1
                        spent += outcome.wall_s
                        on_outcome(outcome)
                submit(pool)
            if broken:  # the next run starts a new pool
                self.close(abort=True)
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
