"""Reading a user's JSON file: every failure is one ConfigError naming the file (and the key).

The bounds (regular files only, size, nesting depth, 64-bit integers, no NaN/Infinity) are those
of ``cgbench.safeio``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cgbench import safeio


def read_json(path: str | Path, key: str = "") -> Any:
    """Parse ``path``; missing, special (directory, FIFO, device), oversized, non-UTF-8 or invalid
    JSON raise ConfigError (``key`` prefixes the message when the path came from a config key)."""
    return safeio.read_json(path, key)
