"""Third-party registry entries, found through entry points.

An installed distribution adds a policy, a grid family or a workload source by declaring an entry
point in one of ``ENTRY_POINT_GROUPS`` whose name is the entry's name and whose object is the
entry (a ``PolicySpec``, ``GridKind``, ...; each family's registry says what it must hold)::

    [project.entry-points."cgbench.policies"]
    defer_then_guard = "cgbench_example_plugin:POLICY"

Entry points are read lazily: the names come from installed metadata (nothing imported), and an
entry is loaded only when a config names it and no built-in has that name, or when options are
listed. A plug-in that fails to load, or loads as something that is not an entry of its family, is
one ``PluginError`` naming it (a ``ConfigError``: exit 2, no traceback). Every call into a plug-in's
code (its import, its build, its draws, its policy's answers) goes through ``plugin_source.foreign``:
whatever it raises but Ctrl-C (``SystemExit`` included) is that one line.

A module that is merely importable (no distribution, no entry points) joins the same way through a
``plugins.yaml`` in a user config folder, each entry a Hydra ``_target_``
(``cgbench.config.registry.plugin_files``). Both routes become ``PluginSource`` records behind
``_points``: what follows (loading, the family's checks, the messages) is one code path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from cgbench.config.registry.plugin_files import declared, folders_in_effect
from cgbench.config.registry.plugin_source import ENTRY_POINT_GROUPS, PluginError, PluginSource, foreign
from cgbench.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["ENTRY_POINT_GROUPS", "PluginError", "PluginSource", "builtin_or_plugin", "clear_caches", "describe",
           "load_plugin", "loaded_count", "names_with_plugins", "plugin_error", "plugin_names", "plugins_among",
           "plugin_where"]

T = TypeVar("T")

@cache  # installed metadata is read once a process (~4 ms a read): configs compose often
def _entry_points(family: str) -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points  # ~40 ms to import: only once a plug-in name is asked for

    group = ENTRY_POINT_GROUPS[family]
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep)  # the first distribution on the path wins, as for imports
    return found


def _from_entry_point(ep: EntryPoint) -> PluginSource:
    dist = getattr(ep, "dist", None)
    source = f" from {dist.name} {dist.version}" if dist is not None else ""
    return PluginSource(ep.name, ep.group, ep.value, f"entry point {ep.group}: {ep.value}{source}", loader=ep.load)


@cache
def _entry_sources(points: tuple[EntryPoint, ...]) -> dict[str, PluginSource]:
    return {ep.name: _from_entry_point(ep) for ep in points}


def _points(family: str) -> dict[str, PluginSource]:
    """Every plug-in of ``family`` in effect: the installed entry points, and the entries that the
    ``plugins.yaml`` of the config folders in effect declare (``plugin_files``); a name both give is
    refused (one of them could never take effect, and which one would be a guess)."""
    installed = _entry_sources(tuple(_entry_points(family).values()))
    folders = folders_in_effect()
    if not folders:
        return installed
    files = declared(folders)[family]
    both = sorted(set(installed) & set(files))
    if both:
        name = both[0]
        raise PluginError(f"plug-in {name!r} is declared twice: {files[name].origin} and "
                          f"{installed[name].origin}; remove one of them")
    return {**installed, **files}


def plugin_names(family: str) -> tuple[str, ...]:
    """The names the installed plug-ins give ``family`` (read from metadata, nothing imported)."""
    return tuple(sorted(_points(family)))


def plugins_among(family: str, names: Iterable[str], builtin: Iterable[str]) -> tuple[str, ...]:
    """The names of ``names`` that a plug-in of ``family`` gives and no built-in has, sorted. The installed
    metadata (~40 ms to read) is read only when some name could be a plug-in's or a config folder's
    ``plugins.yaml`` is in effect (its declarations are refused here, as on every lookup)."""
    wanted = set(names) - set(builtin)
    if not wanted and not folders_in_effect():
        return ()
    return tuple(sorted(wanted & set(plugin_names(family))))


def names_with_plugins(builtin: Iterable[str], family: str) -> tuple[str, ...]:
    """The built-in names, then the names of ``family``'s plug-ins that shadow none of them (an entry
    point named like a built-in is never loaded; a ``plugins.yaml`` entry so named is refused)."""
    names = tuple(builtin)
    points = _points(family)
    for name in names:
        source = points.get(name)
        if source is not None and source.declared:  # written on purpose: say it cannot work
            raise PluginError(f"{describe(source)}: {name!r} is a built-in name, which always takes precedence, so "
                              "this plug-in could never take effect; give it another name")
    return names + tuple(n for n in sorted(points) if n not in names)


def builtin_or_plugin(builtin: Mapping[str, T], family: str, name: str, key: str,
                      names: Callable[[], Iterable[str]]) -> T | object:
    """The built-in entry ``name``, else the entry an installed plug-in of ``family`` registers as
    ``name`` (loaded now, for the family's registry to check); else one ``ConfigError`` naming
    ``key`` with every name ``names()`` gives and the closest.

    ``names()`` also refuses what the user's ``plugins.yaml`` files declare wrongly (a built-in's name,
    a name declared twice), so it runs whenever config folders are in effect; with none, a built-in
    name needs no installed metadata (~40 ms to read)."""
    entry = builtin.get(name)
    if entry is not None:
        if folders_in_effect():
            names()
        return entry
    plugin = load_plugin(family, name) if isinstance(name, str) and name.isidentifier() else None
    if plugin is None:
        known = tuple(names())
        raise ConfigError(f"{key}: {name!r} is not one of {', '.join(known)}{did_you_mean(str(name), known)}")
    return plugin


def describe(source: PluginSource) -> str:
    return f"plug-in {source.name!r} ({source.origin})"


def load_plugin(family: str, name: str) -> object | None:
    """The entry the plug-in of ``family`` in effect registers as ``name``, or None when none does."""
    source = _points(family).get(name)
    return None if source is None else _loaded(source)


@cache  # by source, not by name: the config folders in effect decide which source a name means
def _loaded(source: PluginSource) -> object:
    where = describe(source)
    entry = foreign(where, "failed to load", source.load)
    name = foreign(where, "failed to load (its name)", getattr, entry, "name", None)
    if not isinstance(name, str) or name != source.name:
        raise PluginError(f"{where}: the entry's name is {name!r}, not {source.called} {source.name!r}")
    return entry


def clear_caches() -> None:
    """Forget the plug-ins loaded so far (tests that fake installed entry points)."""
    _loaded.cache_clear()


def loaded_count() -> int:
    """How many plug-in entries this process has loaded (each once per source)."""
    return _loaded.cache_info().currsize


def plugin_where(family: str, name: str) -> str:
    """How messages name the plug-in ``name`` of ``family``: ``plug-in 'NAME' (where it comes from)``."""
    source = _points(family).get(name)
    return describe(source) if source is not None else f"plug-in {name!r}"


def plugin_error(family: str, name: str, problem: str) -> PluginError:
    """A ``PluginError`` for the loaded entry ``name`` of ``family`` that is not a valid entry."""
    return PluginError(f"{plugin_where(family, name)}: {problem}")
