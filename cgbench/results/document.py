"""The result JSON: provenance, atomic writes, loading with schema checks."""

from __future__ import annotations

import platform
import subprocess
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from cgbench import __version__, safeio
from cgbench.config.jsonio import read_json
from cgbench.config.schema import ConfigError

SCHEMA_VERSION = 1


@lru_cache(maxsize=1)
def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "cgbench_version": __version__, "git_sha": git_sha(),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds")}


def environment(backend: str, device: str, torch_version: str | None) -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(terse=True),
            "torch": torch_version, "device": device, "backend": backend}


def dumps(doc: dict) -> str:
    """Strict JSON: a NaN or Infinity anywhere is a ConfigError naming its dotted path."""
    return safeio.dumps_strict(doc)


def write_json_atomic(path: Path, doc: dict) -> Path:
    """Write by the one rule of ``cgbench.safeio`` (temporary file, fsync, rename over a regular
    file or nothing): never a partial file, never a special file replaced, never NaN/Infinity."""
    return safeio.write_json_atomic(path, doc)


def ensure_writable(path: Path) -> None:
    """Fail before a run, not after it, when its result could not be written."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--out {path}: is a directory")
    safeio.check_writable(path, "--out")


# top-level keys of a result and the JSON type each must have when present
_TYPES: dict[str, tuple[type, str]] = {
    "overrides": (list, "a list of strings"), "config": (dict, "an object"),
    "environment": (dict, "an object"), "graph_usage": (list, "a list of objects"),
    "steps": (list, "a list of objects"), "requests": (list, "a list of objects"),
    "backend_report": (dict, "an object"),
}


def _check_shape(path: Path, doc: dict) -> None:
    for key, (kind, words) in _TYPES.items():
        if key in doc and doc[key] is not None and not isinstance(doc[key], kind):
            raise ConfigError(f"{path}: '{key}' must be {words}, got {type(doc[key]).__name__}")
    for i, o in enumerate(doc.get("overrides") or []):
        if not isinstance(o, str):
            raise ConfigError(f"{path}: 'overrides[{i}]' must be a string, got {type(o).__name__}")
    for key in ("graph_usage", "steps", "requests"):
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
    return doc
