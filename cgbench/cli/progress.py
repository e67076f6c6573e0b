"""Progress of a long command on stderr: what it is doing, done / total and an estimate of the time
left, never on stdout (``--format json`` output stays one document).

On a terminal it is a Rich bar, cleared when the command ends. Piped (CI logs, ``| tee``) a bar
would be noise and nothing at all leaves a 20-minute ``advise`` silent, so a plain line is printed
whenever ``EVERY_S`` seconds pass without one, progress or not:
``advise: candidates 12/18, 3 m 10 s elapsed, about 1 m 35 s left``. A command that prints a line
per item (a sweep's points, ``note``) gets the heartbeat only while an item takes that long.

The estimate is the stage's own pace (elapsed / done x left), so it holds for stages of like work
(candidate runs, re-pricings) and is absent until one item is done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console

from cgbench.cli.console import print_plain_line

EVERY_S = 10.0  # seconds between two progress lines off a terminal


def duration_text(seconds: float) -> str:
    """``42 s``, ``3 m 05 s``, ``1 h 02 m``: rounded to the second."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} m"


class ProgressReport:
    """``with ProgressReport("advise") as p:`` then ``p.stage("candidates", 18)`` and ``p.advance()``
    per item done (or ``p.update(done, total)``). ``line()`` is the plain line printed off a terminal."""

    def __init__(self, what: str, *, console: Console | None = None, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from cgbench.cli.console import err

        self.what = what
        self.console = console if console is not None else err
        self.every_s = max(0.01, EVERY_S if every_s is None else every_s)
        self.clock = clock
        self.description = ""
        self.done = 0
        self.total: int | None = None
        self._started = self._stage_started = self._last_line = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._bar = None
        self._task = None

    # -- the state -----------------------------------------------------------------------------------

    def stage(self, description: str, total: int | None) -> None:
        """A new stage of ``total`` items (None: not known); its count and pace start again."""
        with self._lock:
            self.description, self.total, self.done = description, total, 0
            self._stage_started = self.clock()
        if self._bar is not None:
            self._bar.reset(self._task, total=total, description=description)

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n)

    def update(self, done: int, total: int | None) -> None:
        """The stage's count and total as they now stand (a total may grow as the work is found)."""
        with self._lock:
            self.done, self.total = done, total
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)

    def left_s(self) -> float | None:
        """Seconds the stage still needs at its pace so far; None before its first item."""
        with self._lock:
            done, total, started = self.done, self.total, self._stage_started
        if not done or total is None:
            return None
        return (self.clock() - started) / done * max(0, total - done)

    def line(self) -> str:
        """``advise: candidates 12/18, 3 m 10 s elapsed, about 1 m 35 s left``."""
        with self._lock:
            description, done, total = self.description, self.done, self.total
        count = f"{done}/{total}" if total is not None else f"{done} done"
        doing = f" {description}" if description else ""
        return f"{self.what}:{doing} {count}, {duration_text(self.clock() - self._started)} elapsed{self.eta_text()}"

    def eta_text(self) -> str:
        """``, about 1 m 35 s left`` (empty before the stage's first item)."""
        left = self.left_s()
        return f", about {duration_text(left)} left" if left is not None else ""

    # -- the display ---------------------------------------------------------------------------------

    def note(self, text: object) -> None:
        """One line of the command's own (a ``str`` or a Rich ``Text``), above the bar on a terminal."""
        with self._lock:
            self._last_line = self.clock()
        print_plain_line(self.console, text)

    def __enter__(self) -> ProgressReport:
        from cgbench.cli.console import print_held

        print_held()  # the work starts: the command's input was accepted
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn(f"{self.what} {{task.description}}", markup=False), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("left"),
                                 TimeRemainingColumn(), console=self.console, transient=True)
            self._task = self._bar.add_task(self.description, total=self.total)
            self._bar.start()
        else:
            self._ticker = threading.Thread(target=self._tick, name="cgbench-progress", daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while True:
            with self._lock:
                due = self._last_line + self.every_s
            if self._stop.wait(max(0.0, due - self.clock())):
                return
            with self._lock:
                quiet = self.clock() >= self._last_line + self.every_s
            if quiet:
                self.note(self.line())

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.stop()
