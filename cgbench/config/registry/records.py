"""What a registry record names without importing the package that acts on it: the config fields it
reads (a dataclass of them: ``field_names``) and its builder (``"module:function"``: ``builder``).

The config layer lists and validates records without importing the engine, the workload generators or
the backends; the builders half (``cgbench.workload.sources``, ``cgbench.backends.sim.factory``)
resolves a record's builder here when it builds, importing its module then."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from functools import cache
from typing import Any


def field_names(fields: type | None) -> tuple[str, ...]:
    """The names of ``fields``'s dataclass fields, in declaration order (none for None)."""
    return tuple(f.name for f in dataclasses.fields(fields)) if fields is not None else ()


@cache
def builder(ref: str) -> Callable[..., Any]:
    """The function ``ref`` (``"package.module:function"``) names, its module imported now."""
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"a builder is named 'module:function', got {ref!r}")
    found = getattr(importlib.import_module(module), name)
    if not callable(found):
        raise TypeError(f"builder {ref!r} is a {type(found).__name__}, not a function")
    return found
