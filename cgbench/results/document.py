"""The result JSON: provenance, atomic writes, loading with schema checks."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import tomllib
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from cgbench import __version__, safeio
from cgbench.config.schema import ConfigError
from cgbench.native import simulator_build
from cgbench.safeio import read_json

# 2: a summary of no values has null statistics (1: zeros), and every result holds metrics.percentiles
SCHEMA_VERSION = 2


HASHED_FILE_BYTES = 1 << 20  # an untracked file larger than this enters the diff hash by name and size


PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the cgbench package that is running


def _git(*args: str, cwd: Path | None = None) -> bytes | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, timeout=5, cwd=cwd or PACKAGE_DIR)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _names_cgbench(pyproject: Path) -> bool:
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == "cgbench"


@lru_cache(maxsize=4)
def source_checkout(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The git checkout of cgbench that ``package_dir`` is part of, or None for an installed copy.

    A checkout is a work tree whose top level is the package's parent folder and holds this
    project's pyproject.toml. An installed wheel whose venv happens to sit inside some other
    repository is not one: asking git from the package folder alone would name that repository."""
    top = _git("rev-parse", "--show-toplevel", cwd=package_dir)
    if top is None:
        return None
    root = Path(top.decode().strip()).resolve()
    if root != package_dir.resolve().parent or not _names_cgbench(root / "pyproject.toml"):
        return None
    return root


def installed_version(package_dir: Path = PACKAGE_DIR) -> str:
    """The version of the installed distribution that ``package_dir`` belongs to; the package's own
    ``__version__`` when no installed distribution holds it (a copied folder, another cgbench
    installed elsewhere on the path)."""
    import importlib.metadata  # ~25 ms (it parses with the email package): only an installed copy asks

    try:
        dist = importlib.metadata.distribution("cgbench")
    except importlib.metadata.PackageNotFoundError:
        return __version__
    owned = Path(str(dist.locate_file("cgbench/__init__.py")))
    try:
        same = owned.resolve() == (package_dir / "__init__.py").resolve()
    except OSError:
        same = False
    return dist.version if same else __version__


@lru_cache(maxsize=1)
def git_sha() -> str | None:
    """HEAD of the checkout cgbench runs from; None for an installed copy."""
    checkout = source_checkout()
    if checkout is None:
        return None
    out = _git("rev-parse", "HEAD", cwd=checkout)
    return (out.decode().strip() or None) if out is not None else None


@lru_cache(maxsize=4)
def git_tree_state(checkout: Path | None = None) -> tuple[bool | None, str | None]:
    """(dirty, diff hash) of the checkout cgbench runs from (or ``checkout``); (None, None) outside
    a git checkout.

    Dirty means tracked files differ from HEAD or untracked files exist (ignored files do not
    count). The hash (sha256, 16 hex digits) covers ``git diff HEAD`` and the untracked files' names
    and contents, so two runs with the same uncommitted change get the same hash."""
    checkout = checkout or source_checkout()
    if checkout is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=all", cwd=checkout)
    if status is None:
        return None, None
    if not status.strip():
        return False, None
    h = hashlib.sha256(_git("diff", "HEAD", "--binary", cwd=checkout) or b"")
    root = _git("rev-parse", "--show-toplevel", cwd=checkout)
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", cwd=checkout) or b""
    for name in sorted(n for n in untracked.split(b"\0") if n):
        h.update(b"\0" + name + b"\0")
        if root is None:
            continue
        try:
            path = Path(root.decode().strip()) / name.decode()
            size = path.stat().st_size
            h.update(path.read_bytes() if size <= HASHED_FILE_BYTES else str(size).encode())
        except (OSError, UnicodeDecodeError):
            pass
    return True, h.hexdigest()[:16]


def provenance() -> dict[str, Any]:
    """Which cgbench made a result: from a checkout its commit and uncommitted state, from an
    installed copy the installed version and no git fields."""
    from_checkout = source_checkout() is not None
    dirty, diff_hash = git_tree_state()
    version = __version__ if from_checkout else installed_version()
    return {"schema_version": SCHEMA_VERSION, "cgbench_version": version, "git_sha": git_sha(),
            "git_dirty": dirty, "git_diff_hash": diff_hash,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds")}


def environment(backend: str, device: str, torch_version: str | None) -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(terse=True),
            "torch": torch_version, "device": device, "backend": backend,
            "simulator_build": simulator_build()}


def dumps(doc: dict) -> str:
    """Strict JSON: a NaN or Infinity anywhere is a ConfigError naming its dotted path."""
    return safeio.dumps_strict(doc)


def write_json_atomic(path: Path, doc: dict, *, durable: bool = True, clean: bool = True,
                      layout: str = "indented") -> Path:
    """Write by the one rule of ``cgbench.safeio`` (temporary file, fsync unless ``durable=False``,
    rename over a regular file or nothing): never a partial file, never a special file replaced,
    never NaN/Infinity. ``clean=False``: the caller removed the folder's stale temporary files
    once for all its writes (a sweep); ``layout``: ``safeio.LAYOUTS`` (a sweep's point files are
    ``compact``, its index ``lines``)."""
    return safeio.write_json_atomic(path, doc, durable=durable, clean=clean, layout=layout)


def ensure_writable(path: Path, what: str = "--out") -> None:
    """Fail before a run, not after it, when its result could not be written (a folder, a special
    file, one of the command's declared inputs, a name too long, no permission)."""
    path = Path(path)
    if os.path.isdir(path):  # False, not an OSError, for a name too long (check_writable says so)
        raise ConfigError(f"{what} {path}: is a directory")
    safeio.check_writable(path, what)


# top-level keys of a result and the JSON type each must have when present
_TYPES: dict[str, tuple[type, str]] = {
    "overrides": (list, "a list of strings"), "config": (dict, "an object"),
    "environment": (dict, "an object"), "graph_usage": (list, "a list of objects"),
    "steps": (list, "a list of objects"), "requests": (list, "a list of objects"),
    "backend_report": (dict, "an object"), "labels": (dict, "an object"), "warnings": (list, "a list"),
    "capture": (dict, "an object"),
    "git_sha": (str, "a string"), "git_dirty": (bool, "true or false"), "git_diff_hash": (str, "a string"),
    "cgbench_version": (str, "a string"), "created_at": (str, "a string"),
}


def _check_shape(path: Path, doc: dict) -> None:
    for key, (kind, words) in _TYPES.items():
        if key in doc and doc[key] is not None and not isinstance(doc[key], kind):
            raise ConfigError(f"{path}: '{key}' must be {words}, got {type(doc[key]).__name__}")
    for i, o in enumerate(doc.get("overrides") or []):
        if not isinstance(o, str):
            raise ConfigError(f"{path}: 'overrides[{i}]' must be a string, got {type(o).__name__}")
    for key in ("graph_usage", "steps", "requests", "warnings"):
        for i, rec in enumerate(doc.get(key) or []):
            if not isinstance(rec, dict):
                raise ConfigError(f"{path}: '{key}[{i}]' must be an object, got {type(rec).__name__}")
    for key, value in (doc.get("environment") or {}).items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{path}: 'environment.{key}' must be a string or null, got {type(value).__name__}")
    for group, value in (doc.get("config") or {}).items():
        if group in _CONFIG_GROUPS and not isinstance(value, dict):
            raise ConfigError(f"{path}: 'config.{group}' must be an object, got {type(value).__name__}")
    for i, step in enumerate(doc.get("steps") or []):
        real = step.get("real")
        if not isinstance(step.get("step"), int) or not isinstance(real, list) or not real:
            raise ConfigError(f"{path}: 'steps[{i}]' needs an integer 'step' and a non-empty list 'real'")


_CONFIG_GROUPS = ("model", "cg", "workload", "policy", "engine", "backend", "hardware", "slo", "sweep")


def load_result(path: Path) -> dict:
    """Read one result JSON and check it is a cgbench result of a known schema, with the JSON
    type each key must have (a wrong type is a ConfigError naming the file and the key)."""
    path = Path(path)
    doc = read_json(path)
    if not isinstance(doc, dict) or "metrics" not in doc or "schema_version" not in doc:
        raise ConfigError(f"{path}: not a cgbench result (missing 'schema_version' or 'metrics')")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {doc['schema_version']!r}, expected {SCHEMA_VERSION}")
    if not isinstance(doc["metrics"], dict):
        raise ConfigError(f"{path}: 'metrics' must be an object")
    if not doc["metrics"]:
        raise ConfigError(f"{path}: 'metrics' is empty: a run always records its metrics")
    _check_shape(path, doc)
    from cgbench.results.read_checked import RESULT, check_document

    return check_document(doc, RESULT, path)
