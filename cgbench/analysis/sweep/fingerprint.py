"""The fingerprint of a sweep point: what its result was computed from.

A point's overrides do not say what it ran: the config tree under them (a default, a model file)
can change between a sweep and its ``--resume``. The fingerprint is the SHA-256 of the canonical
JSON (sorted keys, no spaces) of the fully resolved config and of the contents of the input files
it names (trace, calibration tables), so any change that can change a result changes it.

Left out, because they decide where results go or how a sweep is run, never what a point computes:
``out_dir`` and the ``sweep`` group (name, params, repeat, jobs).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Any

from cgbench.config.plain import config_dict
from cgbench.config.schema import BenchConfig

# config keys whose value is a file the run reads: its contents are part of the fingerprint
INPUT_FILES = (("workload", "trace"), ("backend", "calibration"), ("hardware", "host_calibration"))
NOT_FINGERPRINTED = ("out_dir", "sweep")
_CHUNK = 1 << 20

_file_digests: dict[tuple[str, int, int, int], str] = {}


def _file_digest(path: str) -> str | None:
    """SHA-256 of a regular file's bytes (cached by path, size, mtime, inode); None when it cannot be read
    (the run itself then fails with the reason)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key in _file_digests:
        return _file_digests[key]
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError:
        return None
    _file_digests[key] = h.hexdigest()
    return _file_digests[key]


def input_paths(cfg: BenchConfig) -> dict[str, str]:
    """{dotted key: path} of the input files a config names (``INPUT_FILES``)."""
    out = {}
    for group, key in INPUT_FILES:
        path = getattr(getattr(cfg, group), key, None)
        if isinstance(path, str) and path:
            out[f"{group}.{key}"] = path
    return out


def fingerprint_of(config: dict[str, Any]) -> str:
    """The fingerprint of a resolved config given as a dict (``asdict(cfg)``, or a result's ``config``)."""
    body = {k: v for k, v in config.items() if k not in NOT_FINGERPRINTED}
    inputs = {}
    for group, key in INPUT_FILES:
        path = (config.get(group) or {}).get(key)
        if isinstance(path, str) and path:
            inputs[f"{group}.{key}"] = _file_digest(path)
    text = json.dumps({"config": body, "inputs": inputs}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def config_fingerprint(cfg: BenchConfig) -> str:
    return fingerprint_of(config_dict(cfg))
