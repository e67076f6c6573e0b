"""Third-party registry entries, found through entry points.

An installed distribution adds a policy, a grid family or a workload source by declaring an entry
point in one of ``ENTRY_POINT_GROUPS`` whose name is the entry's name and whose object is the
entry (a ``PolicySpec``, ``GridKind``, ...; each family's registry says what it must hold)::

    [project.entry-points."cgbench.policies"]
    defer_then_guard = "cgbench_example_plugin:POLICY"

Entry points are read lazily: the names come from installed metadata (nothing imported), and an
entry is loaded only when a config names it and no built-in has that name, or when options are
listed. A plug-in that fails to load, or loads as something that is not an entry of its family, is
one ``PluginError`` naming it (a ``ConfigError``: exit 2, no traceback).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TypeVar

from cgbench.config.errors import ConfigError, did_you_mean

T = TypeVar("T")

ENTRY_POINT_GROUPS = {"policies": "cgbench.policies", "grids": "cgbench.grids", "workloads": "cgbench.workloads"}


class PluginError(ConfigError):
    """A plug-in could not be loaded or is not a valid entry; the message names it."""


@cache  # installed metadata is read once a process (~4 ms a read): configs compose often
def _points(family: str) -> dict[str, EntryPoint]:
    group = ENTRY_POINT_GROUPS[family]
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep)  # the first distribution on the path wins, as for imports
    return found


def plugin_names(family: str) -> tuple[str, ...]:
    """The names the installed plug-ins give ``family`` (read from metadata, nothing imported)."""
    return tuple(sorted(_points(family)))


def names_with_plugins(builtin: Iterable[str], family: str) -> tuple[str, ...]:
    """The built-in names, then the names of ``family``'s installed plug-ins that shadow none of them
    (a plug-in named like a built-in is never loaded)."""
    names = tuple(builtin)
    return names + tuple(n for n in plugin_names(family) if n not in names)


def builtin_or_plugin(builtin: Mapping[str, T], family: str, name: str, key: str,
                      names: Iterable[str]) -> T | object:
    """The built-in entry ``name``, else the entry an installed plug-in of ``family`` registers as
    ``name`` (loaded now, for the family's registry to check); else one ``ConfigError`` naming
    ``key`` with every name of ``names`` and the closest."""
    entry = builtin.get(name)
    if entry is not None:
        return entry
    plugin = load_plugin(family, name) if isinstance(name, str) and name.isidentifier() else None
    if plugin is None:
        known = tuple(names)
        raise ConfigError(f"{key}: {name!r} is not one of {', '.join(known)}{did_you_mean(str(name), known)}")
    return plugin


def describe(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    source = f" from {dist.name} {dist.version}" if dist is not None else ""
    return f"plug-in {ep.name!r} (entry point {ep.group}: {ep.value}{source})"


@cache
def load_plugin(family: str, name: str) -> object | None:
    """The entry an installed plug-in registers as ``name`` in ``family``, or None when none does."""
    ep = _points(family).get(name)
    if ep is None:
        return None
    try:
        entry = ep.load()
    except Exception as e:  # any failure of foreign code is the plug-in's, reported as such
        raise PluginError(f"{describe(ep)}: failed to load: {type(e).__name__}: {e}") from None
    if getattr(entry, "name", None) != name:
        raise PluginError(f"{describe(ep)}: the entry's name is {getattr(entry, 'name', None)!r}, "
                          f"not the entry point's name {name!r}")
    return entry


def plugin_error(family: str, name: str, problem: str) -> PluginError:
    """A ``PluginError`` for the loaded entry ``name`` of ``family`` that is not a valid entry."""
    ep = _points(family).get(name)
    where = describe(ep) if ep is not None else f"plug-in {name!r}"
    return PluginError(f"{where}: {problem}")
