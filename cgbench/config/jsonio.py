"""Reading a user's JSON file: every failure is one ConfigError naming the file (and the key)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cgbench.config.schema import ConfigError


def read_json(path: str | Path, key: str = "") -> Any:
    """Parse ``path``; missing, unreadable, non-UTF-8 or invalid JSON raise ConfigError
    (``key`` prefixes the message when the path came from a config key)."""
    where = f"{key}: {path}" if key else str(path)
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{where}: no such file" + (" (it is a directory)" if p.is_dir() else ""))
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: cannot read: not a UTF-8 text file") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: line {e.lineno} column {e.colno}: not valid JSON: {e.msg}") from None
