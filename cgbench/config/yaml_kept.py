"""Plain YAML files (the config tree's defaults lists, read for a run's labels) parsed once and kept
across processes: a command that labels its run would otherwise import PyYAML (~10 ms) to read the
same few files every time. An entry is keyed by the file's bytes and the installed PyYAML, and holds
the parse as JSON; a parse JSON cannot hold exactly (a date, a set, a non-string key) is not kept."""

from __future__ import annotations

import hashlib
import json
import math
from functools import cache
from typing import Any

from cgbench.user_cache import cache_folder, installed_stamp, read_entry, remove_entry, write_entry

FORMAT = 1
MAX_ENTRIES = 256


def parse_plain(data: bytes) -> Any:
    """``yaml.safe_load`` of ``data``, read back from a kept entry when this exact file was parsed before."""
    folder = cache_folder("yaml")
    if folder is None:
        return _parse(data)
    key = hashlib.sha256(_salt() + data).hexdigest()
    path = folder / f"{key}.json"
    kept = read_entry(path)
    if kept is not None:
        try:
            return json.loads(kept)
        except ValueError:
            remove_entry(path)
    doc = _parse(data)
    if _json_exact(doc):
        write_entry(path, json.dumps(doc).encode(), MAX_ENTRIES)
    return doc


@cache
def _salt() -> bytes:
    """The format and the installed PyYAML (found, not imported), once a process: a run reads several files."""
    return f"cgbench-yaml {FORMAT} {installed_stamp(('yaml',))}\0".encode()


def _parse(data: bytes) -> Any:
    import yaml

    # what Path.read_text gives: UTF-8, universal newlines
    return yaml.safe_load(data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"))


def _json_exact(value: Any) -> bool:
    """Whether JSON gives ``value`` back equal and of the same types."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    if isinstance(value, dict):
        return all(type(k) is str and _json_exact(v) for k, v in value.items())
    return False
