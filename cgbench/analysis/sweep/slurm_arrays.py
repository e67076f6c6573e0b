"""How a sweep's points become SLURM job arrays, and how often the cluster is asked about them: pure
rules, checked without a cluster (``tests/analysis/test_slurm_arrays.py``).

* **Points per array task.** Each array task runs a chunk of consecutive points (one Python start and
  one scheduling slot for many points), sized as the local pool sizes its chunks: an even share of the
  points between the array's slots (``array_parallelism``), ``TASKS_PER_SLOT`` tasks per slot so that
  the slots stay balanced at the end. 10,000 points at the default 256 slots are 500 tasks of 20
  points. ``--slurm points_per_task=K`` sets it; a measured point time (a resumed sweep's) caps a chunk
  at half the task's time limit.
* **Arrays split at the cluster's MaxArraySize.** SLURM refuses an array whose largest index reaches
  ``MaxArraySize`` (``scontrol show config``; 1001 by default), so the tasks go into as many arrays as
  that takes, each of at most ``MaxArraySize`` tasks (indices 0 .. MaxArraySize - 1).
* **Polling backs off.** The result files are looked at every ``RESULT_POLL_S``, and the states
  (one sacct call for every task) asked every ``executor_slurm.STATE_POLL_S``; each interval grows by
  ``BACKOFF`` while nothing changes, up to its maximum (``RESULT_POLL_MAX_S``, ``STATE_POLL_MAX_S``),
  and starts again at its minimum as soon as something does.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

TASKS_PER_SLOT = 2  # array tasks per slot of array_parallelism (the pool's IN_FLIGHT_PER_WORKER)
SLURM_DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's own default, used only when the cluster does not say
TIME_LIMIT_SHARE = 0.5  # a chunk's measured work stays within this share of the task's time limit
RESULT_POLL_S, RESULT_POLL_MAX_S = 0.5, 10.0  # how often the result files are looked at
STATE_POLL_MAX_S = 60.0  # the longest wait between two looks at accounting (sacct) and the queue (squeue)
BACKOFF = 1.5


def points_per_task(points: int, parallelism: int, *, explicit: int | None = None, point_s: float | None = None,
                    timeout_min: float | None = None) -> int:
    """Points in each array task: ``explicit``, else an even share between ``parallelism`` slots times
    ``TASKS_PER_SLOT``, at most what fits ``TIME_LIMIT_SHARE`` of ``timeout_min`` at ``point_s`` a point."""
    if explicit is not None:
        return explicit
    size = max(1, math.ceil(points / (max(1, parallelism) * TASKS_PER_SLOT)))
    if point_s is not None and point_s > 0 and timeout_min is not None:
        size = min(size, max(1, int(timeout_min * 60.0 * TIME_LIMIT_SHARE / point_s)))
    return size


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    """``items`` in consecutive chunks of ``size`` (the last one shorter)."""
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def array_batches(items: Sequence[T], max_array_size: int) -> list[list[T]]:
    """``items`` (one per array task) split into arrays of at most ``max_array_size`` tasks."""
    return chunks(items, max(1, max_array_size))


_MAX_ARRAY = re.compile(r"^\s*MaxArraySize\s*=\s*(\d+)\s*$", re.MULTILINE)


def parse_max_array_size(scontrol_config: str) -> int | None:
    """``MaxArraySize`` from the text of ``scontrol show config`` (None when it is not there)."""
    m = _MAX_ARRAY.search(scontrol_config)
    return int(m.group(1)) if m else None


def cluster_max_array_size() -> tuple[int, str]:
    """The cluster's ``MaxArraySize`` and where it came from (``scontrol show config``, or SLURM's
    default when scontrol does not answer)."""
    try:
        r = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        r = None
    value = parse_max_array_size(r.stdout) if r is not None and r.returncode == 0 else None
    if value is None:
        return SLURM_DEFAULT_MAX_ARRAY_SIZE, "SLURM's default: scontrol show config did not say"
    return value, "scontrol show config"


@dataclass
class Backoff:
    """An interval that starts at ``low``, grows by ``factor`` each time nothing changed, up to
    ``high``, and starts again at ``low`` after a change."""

    low: float
    high: float
    factor: float = BACKOFF

    def __post_init__(self) -> None:
        self.now = self.low

    def idle(self) -> float:
        """Nothing changed: the next interval (grown)."""
        self.now = min(self.high, self.now * self.factor)
        return self.now

    def changed(self) -> float:
        self.now = self.low
        return self.now
