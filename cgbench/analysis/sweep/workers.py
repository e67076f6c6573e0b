"""Sweep worker processes die with the sweep that started them.

A killed parent (SIGKILL, OOM killer) cannot stop its workers, and orphans would keep computing
points into a folder nobody indexes. Each worker therefore asks the kernel for SIGKILL when its
parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``) and, where that is unavailable or the parent died
before the request, a watchdog thread ends the worker once its parent PID changes. The atomic
writes mean a worker killed mid-point leaves no partial file. ``InterruptWatch`` keeps a Ctrl-C
in the parent a Ctrl-C when a library converts the KeyboardInterrupt into another error;
``sigterm_interrupts`` makes SIGTERM a ``KeyboardInterrupt`` too, and ``signals_deferred`` holds
both back while a block (starting workers, writing a final index) must not be cut short.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5
ORPHAN_EXIT = 3


def _request_parent_death_signal() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # a worker's only (the sweep process itself never asks)
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    stop = threading.Event()
    while not stop.wait(WATCH_INTERVAL_S):
        if os.getppid() != parent_pid:
            os._exit(ORPHAN_EXIT)  # no cleanup to run: the point's temporary file is removed by the next writer


def worker_init(parent_pid: int) -> None:
    """ProcessPoolExecutor initializer: quiet on Ctrl-C (the parent decides), ended by SIGTERM (the
    pool's abort), dead with the parent."""
    # Ctrl-C goes to the whole process group: the parent decides what happens, workers stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a forked worker starts with its parent's handlers (which may hold SIGTERM back: signals_deferred)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _request_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(ORPHAN_EXIT)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="cgbench-parent-watch", daemon=True).start()


class InterruptWatch:
    """Remembers a Ctrl-C (SIGINT) that arrived while a run was in progress, so a library that
    caught the KeyboardInterrupt and raised something else cannot turn it into a failed run (a sweep
    point, an advise candidate)."""

    def __init__(self) -> None:
        self.hit = False
        self._old = None

    def _on_sigint(self, signum, frame) -> None:
        self.hit = True
        raise KeyboardInterrupt

    def __enter__(self) -> InterruptWatch:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class SweepTerminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (the index says ``interrupted``); the command exits 143."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``SweepTerminated`` (a KeyboardInterrupt) in the main thread, so a terminated
    sweep is handled like Ctrl-C."""
    if not _main_thread():
        yield
        return

    def stop(signum, frame):
        raise SweepTerminated()

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def signals_deferred(reraise: bool = True) -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done, then interrupt as usual (``reraise=False``:
    they are dropped, for a block that already handles an interruption)."""
    if not _main_thread():
        yield
        return
    caught: list[int] = []
    saved = [(s, signal.signal(s, lambda signum, frame: caught.append(signum)))
             for s in (signal.SIGINT, signal.SIGTERM)]
    try:
        yield
    finally:
        for s, old in saved:
            signal.signal(s, old)
    if caught and reraise:
        raise SweepTerminated() if caught[0] == signal.SIGTERM else KeyboardInterrupt()
