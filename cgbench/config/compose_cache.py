"""Compositions kept across processes, so that a command composing a config it composed before reads
it back instead of importing and running Hydra (about 0.4 s of CPU, a third of a default ``cgbench run``).

What is kept: the typed config a successful composition gave, before its relative data paths resolve,
pickled. Every step after the composition runs again on a config read back (``cgbench.config.load``:
the override keys, the paths, validation and limits, the unread keys, the model files), so it is the
config a fresh composition gives. The key digests everything the composition read: the overrides,
the config folders named and in effect, the bytes of every YAML file on the search path, the files of
the ``cgbench.config`` package (the schema, its records and rules), Hydra's, OmegaConf's and PyYAML's
installed files, and the Python version. Never kept: a composition under a plug-in's schema or with a
plug-in policy (classes made at run time), or one whose tree holds an interpolation (it may read the
environment).

Where: the ``compose`` folder of ``cgbench.user_cache`` (``~/.cache/cgbench``, ``$CGBENCH_CACHE_DIR``;
``off`` turns it off), at most ``MAX_ENTRIES`` files. A file that cannot be read back, or holds
anything but the schema's records, is removed and the config composed afresh.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from cgbench import __version__
from cgbench.config.paths import config_dir, user_config_dirs
from cgbench.config.schema import BenchConfig
from cgbench.user_cache import cache_folder, installed_stamp, read_entry, remove_entry, tree_files, write_entry

MAX_ENTRIES = 256
FORMAT = 1  # a change of what an entry holds
_SUFFIX = ".pickle"
_TREE_SUFFIX = ".tree"  # a composed OmegaConf tree (a sweep's base composition)
_SWEEP_SUFFIX = ".sweep"  # a sweep's plan: its settings, its expansion, every point's composition
MAX_SWEEPS = 16
_BUILTINS = frozenset({"dict", "list", "tuple", "set", "frozenset", "int", "float", "str", "bool", "bytes",
                       "complex", "NoneType"})


def cache_dir() -> Path | None:
    """The folder of kept compositions, or None when ``CGBENCH_CACHE_DIR=off``."""
    return cache_folder("compose")


def _files(root: Path, suffixes: tuple[str, ...] = (), linked: list[str] | None = None) -> Iterable[tuple[str, bytes]]:
    """(path relative to ``root``, bytes) of the files a key digests (``user_cache.tree_files``)."""
    for rel, path in tree_files(root, suffixes, linked=linked):
        with open(path, "rb") as f:
            yield rel, f.read()


@cache
def _code_digest() -> bytes:
    """The files of ``cgbench.config`` and the installed composers, and the Python version (once a process)."""
    h = hashlib.sha256(f"cgbench-compose-cache {FORMAT} {__version__} {sys.version}".encode())
    for rel, data in _files(Path(__file__).parent):
        h.update(f"\0{rel}\0{len(data)}\0".encode())
        h.update(data)
    h.update(installed_stamp(("hydra", "omegaconf", "yaml")).encode())
    return h.digest()


def tree_state(config_dirs: Sequence[str | Path]) -> bytes | None:
    """The digest of everything a composition reads besides its overrides (the code above, the config
    folders named and in effect, the bytes of every YAML file on the search path), or None where the
    cache is off or cannot tell (a config folder that does not exist or cannot be read: a fresh
    composition names it; a linked folder, whose files would be composed but not digested). A command
    that composes many configs (a sweep's points) digests the trees once."""
    if cache_dir() is None:
        return None
    try:
        dirs = user_config_dirs(config_dirs)
        h = hashlib.sha256(_code_digest())
        h.update(json.dumps([[str(d) for d in config_dirs], [str(d) for d in dirs]]).encode())
        linked: list[str] = []
        for i, tree in enumerate([config_dir(), *dirs]):
            for rel, data in _files(Path(tree), (".yaml", ".yml"), linked):
                h.update(f"\0{i}\0{rel}\0{len(data)}\0".encode())
                h.update(data)
    except Exception:  # noqa: BLE001 - the fresh composition gives this input's error
        return None
    # a linked folder's files are composed but not digested: an edit there would read back stale
    return None if linked else h.digest()


def key_in(state: bytes, overrides: Sequence[str]) -> str:
    """The key of the composition of ``overrides`` in the trees whose ``tree_state`` is ``state``."""
    return hashlib.sha256(state + json.dumps(list(overrides)).encode()).hexdigest()


def entry_key(overrides: Sequence[str], config_dirs: Sequence[str | Path]) -> str | None:
    """The key of this composition now, or None where the cache is off or cannot tell (``tree_state``)."""
    state = tree_state(config_dirs)
    return None if state is None else key_in(state, overrides)


# what a composed OmegaConf tree pickles besides the schema's records (its nodes, their metadata and
# the type hints they carry)
_TREE_CLASSES = frozenset({("_operator", "getitem"), ("collections", "defaultdict"), ("typing", "Any"),
                           ("typing", "Dict"), ("typing", "List"), ("typing", "Optional"), ("typing", "Union"),
                           ("typing", "Tuple")})


class _SchemaUnpickler(pickle.Unpickler):
    """Reads back the schema's records and plain values only (and, for a tree, OmegaConf's nodes):
    anything else is a file not written here."""

    def __init__(self, data: bytes, *, tree: bool) -> None:
        super().__init__(io.BytesIO(data))
        self.tree = tree

    def find_class(self, module: str, name: str) -> Any:
        if (module.startswith("cgbench.config.") or (module == "builtins" and name in _BUILTINS)
                or (self.tree and (module.startswith("omegaconf.") or (module, name) in _TREE_CLASSES))):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name}: not a config record")


def typed_config(data: bytes) -> BenchConfig:
    """The typed config a kept composition's bytes hold (a fresh copy); ``pickle.UnpicklingError`` for
    anything else."""
    kept = _SchemaUnpickler(data, tree=False).load()
    if not isinstance(kept, BenchConfig):
        raise pickle.UnpicklingError("not a BenchConfig")
    return kept


def _tree(data: bytes) -> Any:
    from omegaconf import DictConfig

    kept = _SchemaUnpickler(data, tree=True).load()
    if not isinstance(kept, DictConfig):
        raise pickle.UnpicklingError("not a composed tree")
    return kept


def _plain(data: bytes) -> Any:
    return _SchemaUnpickler(data, tree=False).load()


_KINDS: dict[str, tuple[str, Callable[[bytes], Any]]] = {  # kind -> (suffix, reader)
    "config": (_SUFFIX, typed_config),
    "tree": (_TREE_SUFFIX, _tree),
    "sweep": (_SWEEP_SUFFIX, _plain),
}


def _read(key: str, kind: str) -> Any:
    folder = cache_dir()
    if folder is None:
        return None
    suffix, reader = _KINDS[kind]
    path = folder / (key + suffix)
    data = read_entry(path)
    if data is None:
        return None
    try:
        return reader(data)
    except Exception:  # noqa: BLE001 - truncated, corrupt or foreign: composed afresh, and replaced
        remove_entry(path)
        return None


def read(key: str) -> BenchConfig | None:
    """The kept typed config of ``key`` (a fresh copy), or None."""
    return _read(key, "config")


def read_tree(key: str) -> Any:
    """The kept composed tree (an OmegaConf ``DictConfig``, a fresh copy) of ``key``, or None."""
    return _read(key, "tree")


def read_sweep(key: str) -> Any:
    """A sweep's kept plan (``cgbench.config.kept_sweeps``: plain values, each point's composition as
    bytes for ``typed_config``), or None."""
    return _read(key, "sweep")


def forget(key: str, kind: str) -> None:
    """Remove an entry found unfit (a kept plan whose shape is not the one written here)."""
    folder = cache_dir()
    if folder is not None:
        remove_entry(folder / (key + _KINDS[kind][0]))


def write(key: str, pickled: bytes, *, kind: str = "config") -> None:
    """Keep a composition, typed, a tree or a sweep's plan (``cgbench.user_cache.write_entry``: whole,
    at most ``MAX_ENTRIES`` of each of the first two, ``MAX_SWEEPS`` plans)."""
    folder = cache_dir()
    if folder is not None:
        write_entry(folder / (key + _KINDS[kind][0]), pickled, MAX_SWEEPS if kind == "sweep" else MAX_ENTRIES)
