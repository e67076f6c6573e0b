"""A config as plain containers: what ``dataclasses.asdict`` returns, about five times faster.

A sweep converts each point's config several times (its result's ``config``, its fingerprint, its
gating key), and ``asdict``'s generic walk (every value through ``is_dataclass``, ``deepcopy`` for every
scalar) was a tenth of a tiny point. The config records hold dataclasses, lists, dicts, tuples and
scalars only; anything else (a plug-in's section holding another kind of value) takes ``asdict`` itself,
so the result is always ``asdict``'s."""

from __future__ import annotations

import dataclasses
from typing import Any

_SCALARS = frozenset({int, float, str, bool, type(None)})
_FIELDS: dict[type, tuple[str, ...]] = {}


class _Unusual(Exception):
    """A value this walk does not copy as ``asdict`` would."""


def config_dict(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict(obj)`` for a config record."""
    try:
        return _record(obj)
    except _Unusual:
        return dataclasses.asdict(obj)


def _record(obj: Any) -> dict[str, Any]:
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return {name: _value(getattr(obj, name)) for name in names}


def _value(v: Any) -> Any:
    kind = type(v)
    if kind in _SCALARS:
        return v
    if kind is list:
        return [_value(x) for x in v]
    if kind is dict:
        return {_value(k): _value(x) for k, x in v.items()}
    if kind is tuple:
        return tuple(_value(x) for x in v)
    if kind in _FIELDS or (dataclasses.is_dataclass(kind) and not isinstance(v, type)):
        return _record(v)
    raise _Unusual(kind)
