"""The verdict: which classes fail the gate (``parse_fail_on``), the one-line verdict and health
summary, and the comparison as JSON data and back (``to_dict``, ``comparison_from_dict``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from cgbench.analysis.compare.records import (
    CLASS_TEXT,
    CLASSES,
    DEFAULT_FAIL_ON,
    SEVERITY,
    SKIPPED,
    WITHIN,
    Comparison,
    Delta,
    PointResult,
)
from cgbench.config.schema import ConfigError


def health_summary(comp: Comparison) -> str:
    """``health: base 12 of 48 points flagged (memory 12); new 14 of 48 (memory 12, overload 2)``."""
    from collections import Counter

    def side(which: str) -> str:
        codes = [p.health.get(which) for p in comp.points]
        known = [c for c in codes if c is not None]
        flagged = [c for c in known if c]
        counts = Counter(code for c in flagged for code in c)
        detail = f" ({', '.join(f'{k} {v}' for k, v in counts.most_common())})" if counts else ""
        return f"{len(flagged)} of {len(known)} point{'s' if len(known) != 1 else ''} flagged{detail}"

    return f"health: base {side('base')}; new {side('new')}"


def parse_fail_on(text: str) -> tuple[str, ...]:
    """``regressed,missing`` -> the classes; ``none`` -> no class fails. ConfigError on a typo."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if items == ["none"]:
        return ()
    aliases = {"within_tolerance": WITHIN, "within-tolerance": WITHIN}
    out = []
    for t in items:
        t = aliases.get(t, t)
        if t not in CLASSES:
            raise ConfigError(f"--fail-on: {t!r} is not one of {', '.join(CLASSES)} (or none)")
        out.append(t)
    if not out:
        raise ConfigError("--fail-on: name at least one class (or none)")
    return tuple(dict.fromkeys(out))


def class_text(status: str) -> str:
    return CLASS_TEXT.get(status, status)


def verdict(comp: Comparison, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON) -> str:
    """``FAIL: 2 of 48 points (1 missing, 1 regressed); 46 same`` or ``OK: ...``."""
    failing = comp.failing(fail_on)
    counts = [f"{len(comp.points_in(s))} {class_text(s)}" for s in SEVERITY if comp.points_in(s)]
    n = len(comp.points)
    rule = f"fail on: {', '.join(fail_on) or 'none'}"
    checks = sum(d.status != SKIPPED for d in comp.deltas)
    tail = f"{checks} metric checks; {rule}"
    if failing:
        return f"FAIL: {len(failing)} of {n} points ({', '.join(counts)}; {tail})"
    return f"OK: {n} point{'s' if n != 1 else ''} ({', '.join(counts) or 'nothing compared'}; {tail})"


def to_dict(comp: Comparison, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON) -> dict[str, Any]:
    """The whole comparison as plain JSON data (``comparison_from_dict`` reads it back)."""
    return {"kind": "cgbench-compare", "base": str(comp.base), "new": str(comp.new),
            "fail_on": list(fail_on), "failed": bool(comp.failing(fail_on)), "verdict": verdict(comp, fail_on),
            "pair_by": comp.pair_by,
            "points": [{"label": p.label, "overrides": p.overrides, "status": p.status, "error": p.error,
                        "health": p.health, "differs": p.differs,
                        "deltas": [asdict(d) for d in p.deltas]} for p in comp.points],
            "only_new": comp.only_new, "notes": comp.notes, "warnings": comp.warnings}


def comparison_from_dict(data: dict[str, Any]) -> Comparison:
    comp = Comparison(Path(data["base"]), Path(data["new"]), only_new=list(data["only_new"]),
                      notes=list(data["notes"]), warnings=list(data["warnings"]),
                      pair_by=list(data.get("pair_by") or []))
    for p in data["points"]:
        comp.points.append(PointResult(p["label"], list(p["overrides"]), p["status"],
                                       [Delta(**d) for d in p["deltas"]], p["error"],
                                       health=dict(p.get("health") or {}), differs=list(p.get("differs") or [])))
    return comp
