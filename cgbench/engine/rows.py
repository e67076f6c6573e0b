"""Megatron's request-row order under KV pressure: where rows move when requests finish, pause,
resume and are evicted.

The context keeps one row array, paused rows on the left and active rows on the right. Which request
resumes or is evicted depends on where each row sits, so these moves are reproduced exactly. Each
function takes rows in order (left to right) and returns them in their new order; none touches
KV blocks (``Context`` does that).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

R = TypeVar("R")


def compact_finished(active: list[R], finished: Collection[int]) -> list[int]:
    """Remove the rows at positions ``finished`` from ``active`` in place: the survivors right of the
    new boundary ``k`` (the survivor count) move, in order, into the finished slots left of it;
    survivors already left of ``k`` keep their places. Returns the positions that got a new row."""
    k = len(active) - len(finished)
    if len(finished) == 1:  # the common case, without the general bookkeeping: the last row fills the hole
        (i,) = finished
        last = active.pop()
        if i < k:
            active[i] = last
            return [i]
        return []
    holes = sorted(i for i in finished if i < k)
    movers = [active[i] for i in range(k, len(active)) if i not in finished]
    for hole, row in zip(holes, movers, strict=True):
        active[hole] = row
    del active[k:]
    return holes


def pause_swap(active: Sequence[R], pausing: Collection[int]) -> tuple[list[R], list[R]]:
    """Split the active rows into (newly paused, still active). With ``m`` rows pausing, the rows left
    of position ``m`` that stay active swap pairwise, in order, with the rows right of it that pause;
    the first ``m`` rows then join the paused region on its right."""
    m = len(pausing)
    rows = list(active)
    move_pausing_left(rows, pausing)
    return rows[:m], rows[m:]


def move_pausing_left(rows: list[R], pausing: Collection[int]) -> None:
    """``pause_swap``'s swaps, in place: the rows at positions ``pausing`` end up at positions
    ``0 .. m-1``. When every one of them resumes at once, this is the whole net move (they leave the
    active region on its left and rejoin it there, in the same order)."""
    m = len(pausing)
    if m == 1:  # the common case: the one pausing row swaps with the first row
        (i,) = pausing
        rows[0], rows[i] = rows[i], rows[0]
        return
    staying_left = [i for i in range(m) if i not in pausing]
    pausing_right = sorted(i for i in pausing if i >= m)  # O(m), not a scan of every row
    for a, b in zip(staying_left, pausing_right, strict=True):
        rows[a], rows[b] = rows[b], rows[a]


def evict_count(paused_blocks: Sequence[int], budget: int, held: int = -1) -> int:
    """How many right-most paused rows are evicted. Nothing is evicted while the paused rows hold no
    more than ``budget`` blocks (``held``: what they hold together, when shared blocks make it less
    than their sum). Otherwise the rows past the longest left run that fits the budget overflow, and
    the fewest ``e`` right-most rows go whose blocks cover the ``overflow - e`` rows that then stay
    paused."""
    if (held if held >= 0 else sum(paused_blocks)) <= budget:
        return 0
    held = valid = 0
    for b in paused_blocks:
        if held + b > budget:
            break
        held += b
        valid += 1
    overflow = len(paused_blocks) - valid
    if overflow == 0:
        return 0
    freed = 0
    for e in range(1, overflow + 1):
        freed += paused_blocks[-e]
        if freed >= overflow - e:
            return e
    return overflow


def rotate_into_evicted(active: Sequence[R], evicted: int) -> list[R]:
    """The active rows after ``evicted`` paused slots next to them are vacated: the right-most rows
    move into those slots, in order, and so become the left-most active rows."""
    m = min(evicted, len(active))
    if m == 0 or m == len(active):
        return list(active)
    return list(active[-m:]) + list(active[:-m])
