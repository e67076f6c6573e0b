"""Plug-ins declared in a user config folder's ``plugins.yaml``, each a Hydra ``_target_``.

The second route in (the first: installed entry points, ``plugins.py``), for a module that is
merely importable (on ``PYTHONPATH``), no distribution needed::

    policies:
      defer_then_guard: {_target_: cgbench_defer_then_guard.POLICY}
    grids:
      pow2_from8: {_target_: cgbench_defer_then_guard.pow2_decode_kind, name: pow2_from8, smallest: 8}

A node holding only ``_target_`` names the entry itself (``hydra.utils.get_object``); a node with
more keys names a factory, called with them (``hydra.utils.instantiate``), which returns the entry.
The names come from the file, read under the limits of every user option file; nothing is imported
(Hydra neither) until a config names an entry. The folders are those in effect for the command:
``$CGBENCH_CONFIG_DIR`` (which ``sweep`` and ``advise`` pass to their workers) and the
``--config-dir`` folders that ``plugin_folders`` holds while a config is composed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import Any

from cgbench.config.paths import ENV_CONFIG_DIR, MAX_CONFIG_FILE_BYTES, check_option_file, config_dir
from cgbench.config.registry.plugin_source import ENTRY_POINT_GROUPS, PluginError, PluginSource
from cgbench.errors import did_you_mean
from cgbench.safeio import check_tree, read_text

FILE_NAME = "plugins.yaml"
TARGET = "_target_"
_EXAMPLE = "{_target_: my_module.POLICY}"

_extra: ContextVar[tuple[str, ...]] = ContextVar("cgbench_plugin_folders", default=())


@contextmanager
def plugin_folders(dirs: Sequence[str | Path]) -> Iterator[None]:
    """While the block runs, ``dirs`` (``--config-dir`` folders) are in effect too."""
    token = _extra.set((*_extra.get(), *(str(d) for d in dirs)))
    try:
        yield
    finally:
        _extra.reset(token)


def folders_in_effect() -> tuple[Path, ...]:
    """The user config folders whose ``plugins.yaml`` count now: ``$CGBENCH_CONFIG_DIR``'s, then
    those ``plugin_folders`` holds (a missing one is skipped: composing names it)."""
    raw = tuple(p for p in os.environ.get(ENV_CONFIG_DIR, "").split(os.pathsep) if p.strip()) + _extra.get()
    if not raw:
        return ()
    return _resolved(raw, os.getcwd() if any(not os.path.isabs(p) for p in raw) else "")


_resolved_memo: dict[tuple[tuple[str, ...], str], tuple[Path, ...]] = {}


def _resolved(raw: tuple[str, ...], cwd: str) -> tuple[Path, ...]:
    found = _resolved_memo.get((raw, cwd))
    if found is None:
        primary = config_dir().resolve()
        dirs = (Path(p).expanduser().resolve() for p in raw)
        found = tuple(dict.fromkeys(d for d in dirs if d != primary and d.is_dir()))
        _resolved_memo[(raw, cwd)] = found
    return found


def declared(folders: tuple[Path, ...]) -> dict[str, dict[str, PluginSource]]:
    """family -> name -> source, over the ``plugins.yaml`` of ``folders``; a name declared in two
    folders is refused (which one a config means would be a guess)."""
    merged: dict[str, dict[str, PluginSource]] = {family: {} for family in ENTRY_POINT_GROUPS}
    for folder in folders:
        for family, entries in _declared_in(folder).items():
            for name, source in entries.items():
                other = merged[family].get(name)
                if other is not None:
                    raise PluginError(f"plug-in {name!r} is declared twice: {other.origin} and {source.origin}; "
                                      "remove one of them")
                merged[family][name] = source
    return merged


# a folder's declarations, by the (inode, size, mtime) of its plugins.yaml: re-read when it changes
_read: dict[Path, tuple[tuple[int, int, int], dict[str, dict[str, PluginSource]]]] = {}


def _declared_in(folder: Path) -> dict[str, dict[str, PluginSource]]:
    path = folder / FILE_NAME
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    except OSError:
        st = None  # read_text below names why it cannot be read
    signature = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else (0, 0, 0)
    held = _read.get(folder)
    if held is not None and held[0] == signature:
        return held[1]
    entries = _parse(path, _load_yaml(path))
    _read[folder] = (signature, entries)
    return entries


def _load_yaml(path: Path) -> Any:
    import yaml

    check_option_file(path)  # bounded, UTF-8, no aliases: as every user option file
    try:
        data = yaml.safe_load(read_text(path, max_bytes=MAX_CONFIG_FILE_BYTES))
    except RecursionError:
        raise PluginError(f"{path}: nested too deeply") from None
    return check_tree(data, str(path))


def _parse(path: Path, data: Any) -> dict[str, dict[str, PluginSource]]:
    families = ", ".join(ENTRY_POINT_GROUPS)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PluginError(f"{path}: must be a mapping of plug-in families ({families}) to entries "
                          f"(name: {_EXAMPLE}), not a {type(data).__name__}")
    out: dict[str, dict[str, PluginSource]] = {}
    for family, entries in data.items():
        if family not in ENTRY_POINT_GROUPS:
            raise PluginError(f"{path}: {family!r} is not a plug-in family (one of {families})"
                              f"{did_you_mean(str(family), tuple(ENTRY_POINT_GROUPS))}")
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise PluginError(f"{path}: {family}: must map each plug-in's name to {_EXAMPLE}, "
                              f"not a {type(entries).__name__}")
        out[family] = {str(name): _source(path, family, name, node) for name, node in entries.items()}
    return out


def _source(path: Path, family: str, name: Any, node: Any) -> PluginSource:
    where = f"{path}: {family}.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise PluginError(f"{path}: {family}: {name!r} is not a valid plug-in name (letters, digits and _, "
                          "not starting with a digit: the name configs use)")
    if not isinstance(node, dict) or TARGET not in node:
        raise PluginError(f"{where}: must be a mapping with {TARGET} (the dotted path of the entry or of a "
                          f"factory returning it), e.g. {_EXAMPLE}")
    target = node[TARGET]
    if not isinstance(target, str) or not all(part.isidentifier() for part in target.split(".")):
        hint = " (a dot before the attribute, not a colon)" if isinstance(target, str) and ":" in target else ""
        raise PluginError(f"{where}: {TARGET}: {target!r} is not a dotted path module.attribute{hint}")
    arguments = {str(k): v for k, v in node.items() if k != TARGET}
    return PluginSource(name, ENTRY_POINT_GROUPS[family], target, f"{FILE_NAME} in {path.parent}: {TARGET} {target}",
                        called="the name plugins.yaml declares", declared=True,
                        arguments=json.dumps(arguments, sort_keys=True, default=str),
                        loader=partial(_resolve_target, target, arguments))


def _resolve_target(target: str, arguments: dict[str, Any]) -> object:
    """The entry: the object at ``target``, or what the factory there returns for ``arguments``."""
    import logging

    from hydra.utils import get_object, instantiate

    if arguments:
        return instantiate({TARGET: target, **arguments})
    log = logging.getLogger("hydra.utils")  # get_object logs its failure too: the PluginError is the one line
    was = log.disabled
    log.disabled = True
    try:
        return get_object(target)
    finally:
        log.disabled = was
