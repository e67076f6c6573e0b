"""What cgbench keeps between processes only to save time: a folder per kind under one root, entries
written whole (aside, then renamed) and at most a bound of them, the least recently used removed first.

The root is ``$CGBENCH_CACHE_DIR``, by default ``$XDG_CACHE_HOME/cgbench`` or ``~/.cache/cgbench``;
``CGBENCH_CACHE_DIR=off`` turns every cache off. Nothing here is ever needed: an entry that cannot be
read is a miss, and a folder that cannot be written is skipped without a word. Light to import (the
``cgbench --help`` fast path reads it before anything else is imported)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from importlib.util import find_spec
from pathlib import Path

ENV_CACHE_DIR = "CGBENCH_CACHE_DIR"
_OFF = ("off", "0", "none", "false")


def cache_folder(kind: str) -> Path | None:
    """The folder of ``kind``'s entries, or None when the caches are off."""
    root = os.environ.get(ENV_CACHE_DIR, "").strip()
    if root.lower() in _OFF:
        return None
    if not root:
        root = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(root, "cgbench")
    return Path(root) / kind


def read_entry(path: Path) -> bytes | None:
    """An entry's bytes (and it marked recently used), or None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return data


def write_entry(path: Path, data: bytes, max_entries: int) -> None:
    """Keep ``data`` at ``path``, whole or not at all; then at most ``max_entries`` entries of the
    same suffix in its folder. Any failure leaves the folder as it was."""
    import tempfile  # only an entry written pays its import

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
        _prune(path.parent, path.suffix, max_entries)
    except OSError:
        pass
    finally:
        if tmp is not None:
            remove_entry(Path(tmp))


def _prune(folder: Path, suffix: str, max_entries: int) -> None:
    entries = []
    for entry in os.scandir(folder):
        if entry.name.endswith(suffix):
            try:
                entries.append((entry.stat().st_mtime_ns, entry.path))
            except OSError:
                continue
    if len(entries) > max_entries:
        for _, path in sorted(entries)[:len(entries) - max_entries]:
            remove_entry(Path(path))


def remove_entry(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def tree_files(root: Path, suffixes: tuple[str, ...] = (), *,
               linked: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """(path relative to ``root``, path) of every file under ``root`` in a fixed order, compiled files
    (``__pycache__``, ``.pyc``) left out; with ``suffixes``, only the files ending so. What a cache key
    digests of a tree. Linked folders are not entered (a link can close a loop); ``linked`` collects
    them, for a key that must then not be made (their files would be read, but not digested)."""
    for folder, subdirs, names in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        if linked is not None:
            linked += [os.path.join(folder, d) for d in subdirs if os.path.islink(os.path.join(folder, d))]
        for name in sorted(names):
            if not name.endswith(".pyc") and (not suffixes or name.endswith(suffixes)):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, root), path


def installed_stamp(packages: Iterable[str]) -> str:
    """Where each top-level package is installed, with its ``__init__``'s size and time stamp (found,
    not imported): another version installed changes it."""
    parts = []
    for name in packages:
        spec = find_spec(name)
        origin = spec.origin if spec is not None else None
        st = os.stat(origin) if origin else None
        parts.append(f"{name}\0{origin}\0{st.st_size if st else ''}\0{st.st_mtime_ns if st else ''}")
    return "\0".join(parts)
