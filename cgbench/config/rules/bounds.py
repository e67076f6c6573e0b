"""A number's range declared beside its field: ``field(default=1, metadata=at_least(1))``. ``check_bounds``
checks every such field of every config section (records inside sections too) before the features'
rules, so a new setting with a range is its field alone, and the rules after it may rely on it."""

from __future__ import annotations

import dataclasses
from typing import Any

from cgbench.config.rules.base import require

MINIMUM = "cgbench_minimum"
MAXIMUM = "cgbench_maximum"
NOTE = "cgbench_bound_note"

# per record class: (field name, minimum, maximum, note) of its bounded fields, and its other fields
_PLANS: dict[type, tuple[tuple[tuple[str, Any, Any, str], ...], tuple[str, ...]]] = {}


def at_least(minimum: float, note: str = "") -> dict[str, Any]:
    """Field metadata: the value is ``>= minimum`` (``note``: what the bound's edge means, ``(0 = auto)``)."""
    return {MINIMUM: minimum, NOTE: note}


def within(minimum: float, maximum: float, note: str = "") -> dict[str, Any]:
    """Field metadata: the value lies in ``[minimum, maximum]``."""
    return {MINIMUM: minimum, MAXIMUM: maximum, NOTE: note}


def _plan(cls: type) -> tuple[tuple[tuple[str, Any, Any, str], ...], tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        bounded, others = [], []
        for f in dataclasses.fields(cls):
            if MINIMUM in f.metadata or MAXIMUM in f.metadata:
                bounded.append((f.name, f.metadata.get(MINIMUM), f.metadata.get(MAXIMUM), f.metadata.get(NOTE, "")))
            else:
                others.append(f.name)
        plan = _PLANS[cls] = (tuple(bounded), tuple(others))
    return plan


def check_bounds(cfg: Any, prefix: str = "") -> None:
    """Every bounded field of ``cfg`` and of the records it holds, named by its dotted key."""
    bounded, others = _plan(type(cfg))
    for name, low, high, note in bounded:
        value = getattr(cfg, name)
        if value >= low if high is None else low <= value <= high:
            continue  # the message is built only for a value out of range (a sweep point checks ~80)
        key = f"{prefix}{name}"
        edge = f" {note}" if note else ""
        if high is None:
            require(False, key, f"must be >= {low}{edge}, got {value}")
        else:
            require(False, key, f"must be in [{low}, {high}]{edge}, got {value}")
    for name in others:
        value = getattr(cfg, name)
        if _is_record(type(value)):
            check_bounds(value, f"{prefix}{name}.")


_RECORDS: dict[type, bool] = {}


def _is_record(cls: type) -> bool:
    """Whether instances of ``cls`` are dataclass records (a class itself is not: its type is ``type``);
    once per class, ``dataclasses.is_dataclass`` being a tenth of the walk."""
    found = _RECORDS.get(cls)
    if found is None:
        found = _RECORDS[cls] = dataclasses.is_dataclass(cls)
    return found
