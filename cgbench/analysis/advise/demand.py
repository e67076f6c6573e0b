"""The demand a search is fitted to: how often each real step shape ``(T, P, D)`` ran in the runs it
was taken from (``Demand``), read from a traced run's steps (``shape_counts``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Shape = tuple[int, int, int]


@dataclass
class Demand:
    """How often each real step shape ``(T, P, D)`` ran in the runs it was taken from."""

    counts: Counter

    @classmethod
    def of(cls, shape_counts: Iterable[Sequence[int]]) -> Demand:
        """From ``[[T, P, D, n], ...]`` records."""
        c: Counter = Counter()
        for T, P, D, n in shape_counts:
            c[(int(T), int(P), int(D))] += int(n)
        return cls(c)

    def merged(self, other: Demand) -> Demand:
        return Demand(self.counts + other.counts)

    @property
    def steps(self) -> int:
        return sum(self.counts.values())


def shape_counts(steps: Iterable[dict]) -> list[list[int]]:
    """A run's per-step records -> ``[[T, P, D, n], ...]`` sorted by shape."""
    c = Counter(tuple(s["real"]) for s in steps)
    return [[*k, n] for k, n in sorted(c.items())]
