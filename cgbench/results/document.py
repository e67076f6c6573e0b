"""The result JSON: provenance, atomic writes, loading with schema checks."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from cgbench import __version__
from cgbench.config.jsonio import read_json
from cgbench.config.schema import ConfigError

SCHEMA_VERSION = 1


HASHED_FILE_BYTES = 1 << 20  # an untracked file larger than this enters the diff hash by name and size


def _git(*args: str, cwd: Path | None = None) -> bytes | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, timeout=5,
                             cwd=cwd or Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@lru_cache(maxsize=1)
def git_sha() -> str | None:
    out = _git("rev-parse", "HEAD")
    return (out.decode().strip() or None) if out is not None else None


@lru_cache(maxsize=4)
def git_tree_state(checkout: Path | None = None) -> tuple[bool | None, str | None]:
    """(dirty, diff hash) of the checkout cgbench runs from (or ``checkout``); (None, None) outside
    a git checkout.

    Dirty means tracked files differ from HEAD or untracked files exist (ignored files do not
    count). The hash (sha256, 16 hex digits) covers ``git diff HEAD`` and the untracked files' names
    and contents, so two runs with the same uncommitted change get the same hash."""
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
    dirty, diff_hash = git_tree_state()
    return {"schema_version": SCHEMA_VERSION, "cgbench_version": __version__, "git_sha": git_sha(),
            "git_dirty": dirty, "git_diff_hash": diff_hash,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds")}


def environment(backend: str, device: str, torch_version: str | None) -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(terse=True),
            "torch": torch_version, "device": device, "backend": backend}


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, doc: dict) -> Path:
    """Write via a temporary file in the same folder and rename: never a partial file."""
    return write_text_atomic(path, dumps(doc))


def write_text_atomic(path: Path, text: str) -> Path:
    """Write text via a temporary file in the same folder and rename: never a partial file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp creates 0600; a result is as readable as any file
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def ensure_writable(path: Path) -> None:
    """Fail before a run, not after it, when its result could not be written."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise ConfigError(f"--out {path}: is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".cgbench-probe.", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e


def load_result(path: Path) -> dict:
    """Read one result JSON and check it is a cgbench result of a known schema."""
    path = Path(path)
    doc = read_json(path)
    if not isinstance(doc, dict) or "metrics" not in doc or "schema_version" not in doc:
        raise ConfigError(f"{path}: not a cgbench result (missing 'schema_version' or 'metrics')")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {doc['schema_version']!r}, expected {SCHEMA_VERSION}")
    if not isinstance(doc["metrics"], dict):
        raise ConfigError(f"{path}: 'metrics' must be an object")
    return doc
