"""The comparison's records and classes: a metric check (``Delta``), a point of either side
(``Point``), a BASE point and what became of it (``PointResult``), the whole comparison
(``Comparison``), a rule (``Rule``), and the classes a check gets, worst first (``SEVERITY``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAILED, MISSING, REGRESSED, CHANGED, IMPROVED, WITHIN, SAME, SKIPPED = (
    "failed", "missing", "regressed", "changed", "improved", "within", "same", "skipped")
# Worst first: a point's class is its worst check's, and every list is sorted this way.
SEVERITY = (FAILED, MISSING, REGRESSED, CHANGED, IMPROVED, WITHIN, SAME, SKIPPED)
CLASSES = (REGRESSED, MISSING, FAILED, CHANGED, IMPROVED, WITHIN)  # what --fail-on can name
DEFAULT_FAIL_ON = (REGRESSED, MISSING, FAILED, CHANGED)
CLASS_TEXT = {WITHIN: "within tolerance"}
WORST_SHOWN = 3  # metrics named on a point's summary line


def severity(status: str) -> int:
    return SEVERITY.index(status)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Rule:
    pattern: str  # a metric name, dotted for nested values (ttft_ms.p99); fnmatch wildcards allowed
    better: str | None = None  # lower | higher (from the registry); None for exact rules
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    deterministic: bool = False
    missing_as_zero: bool = False  # counters keyed by name (eager_steps_by_reason.*): absent = 0
    exact: bool = False  # any difference is `changed`

    def describe(self) -> str:
        tol = []
        if self.rel_tol:
            tol.append(f"±{100 * self.rel_tol:g}%")
        if self.abs_tol:
            tol.append(f"±{self.abs_tol:g}")
        return " ".join(["exact" if self.exact else f"{self.better} is better", *tol])


@dataclass
class Point:
    label: str
    overrides: list[str]
    source: Path
    doc: dict[str, Any] | None  # None: the sweep recorded this point as failed / not run
    error: str | None = None


@dataclass
class Delta:
    point: str
    metric: str
    base: Any
    new: Any
    status: str
    rule: str = ""
    note: str = ""
    trend: str = ""  # better | worse | "" (no numeric change, or the registry gives no direction)

    @property
    def changed(self) -> bool:
        return self.base != self.new


def _size(d: Delta) -> float:
    """How large a change is, for ordering: relative where the base is non-zero."""
    if not (is_number(d.base) and is_number(d.new)) or d.base == d.new:
        return 0.0 if d.base == d.new else math.inf
    if math.isnan(d.base) or math.isnan(d.new):
        return math.inf
    return abs(d.new - d.base) / abs(d.base) if d.base else math.inf


@dataclass
class PointResult:
    """One BASE point and what became of it in NEW."""

    label: str  # short: the keys that vary between points (model=hybrid policy=megatron)
    overrides: list[str]
    status: str  # the worst class of its checks (or failed / missing)
    deltas: list[Delta] = field(default_factory=list)
    error: str = ""
    health: dict[str, list[str] | None] = field(default_factory=dict)  # base / new: flag codes (None: no result)
    differs: list[str] = field(default_factory=list)  # config keys that differ from NEW's pair (--pair-by)

    def classes(self) -> set[str]:
        return {self.status} | {d.status for d in self.deltas}

    def worst(self, n: int = WORST_SHOWN) -> list[Delta]:
        """The few checks that explain the point's class: worst class first, then the largest change."""
        moved = [d for d in self.deltas if d.status not in (SAME, SKIPPED)]
        return sorted(moved, key=lambda d: (severity(d.status), -_size(d)))[:n]


@dataclass
class Comparison:
    base: Path
    new: Path
    points: list[PointResult] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pair_by: list[str] = field(default_factory=list)  # the override keys points were paired by ([]: all)

    @property
    def deltas(self) -> list[Delta]:
        return [d for p in self.points for d in p.deltas]

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.status == REGRESSED]

    def count(self, status: str) -> int:
        """Metric checks of this class."""
        return sum(d.status == status for d in self.deltas)

    def points_in(self, status: str) -> list[PointResult]:
        return [p for p in self.points if p.status == status]

    def failing(self, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON) -> list[PointResult]:
        """Points with a check (or a point status) in one of the ``fail_on`` classes."""
        chosen = set(fail_on)
        return [p for p in self.points if p.classes() & chosen]

    def sorted_points(self) -> list[PointResult]:
        return sorted(self.points, key=lambda p: severity(p.status))
