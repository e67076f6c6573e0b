"""Request traces: JSONL or CSV files with ``arrival_s``, ``prompt_tokens`` and ``output_tokens``.

The format follows the file extension: ``.jsonl`` / ``.ndjson`` (one JSON object per line) or
``.csv`` (a header row naming the columns, in any order). Other keys or columns are ignored; blank
lines are skipped. ``arrival_s`` is a finite number >= 0 (seconds); the token counts are integers
>= 1 (``128.0`` is accepted, ``128.5`` is not). Any problem is a ``ConfigError`` that names the file,
the line and the field, e.g. ``trace.jsonl:7: prompt_tokens: 'abc' is not a positive integer``.

``read_trace`` returns the rows sorted by arrival (stable: ties keep file order) with ids
``0..n-1`` in that order, so ``read_trace(write_trace(p, specs))`` gives back ``specs`` whenever
they are in that form (as every generated request list is).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cgbench.config.schema import ConfigError
from cgbench.workload.arrivals import RequestSpec

FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")
_JSONL = (".jsonl", ".ndjson")
_CSV = (".csv",)

Row = tuple[float, int, int]


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _JSONL:
        return "jsonl"
    if suffix in _CSV:
        return "csv"
    raise ConfigError(f"workload.trace: {path}: unknown trace format {path.suffix!r} "
                      f"(use {', '.join(_JSONL + _CSV)})")


def _arrival(raw: Any, where: str) -> float:
    value = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: arrival_s: {raw!r} is not a non-negative number")
    return value


def _tokens(raw: Any, where: str, field: str) -> int:
    value = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            value = None
    if value is None or value < 1:
        raise ConfigError(f"{where}: {field}: {raw!r} is not a positive integer")
    return value


def _row(get: dict[str, Any], where: str) -> Row:
    return (_arrival(get["arrival_s"], where), _tokens(get["prompt_tokens"], where, "prompt_tokens"),
            _tokens(get["output_tokens"], where, "output_tokens"))


def _jsonl_rows(lines: Iterable[str], label: str) -> Iterator[Row]:
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{label}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected a JSON object with keys {', '.join(FIELDS)}, "
                              f"got {type(obj).__name__}")
        for field in FIELDS:
            if field not in obj:
                raise ConfigError(f"{where}: {field}: missing")
        yield _row(obj, where)


def _csv_rows(lines: Iterable[str], label: str) -> Iterator[Row]:
    reader = csv.reader(lines)
    index: dict[str, int] = {}
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue
        where = f"{label}:{reader.line_num}"
        if not index:
            header = [c.strip() for c in cells]
            for field in FIELDS:
                if field not in header:
                    raise ConfigError(f"{where}: missing column {field!r} (header: {', '.join(header)})")
            index = {field: header.index(field) for field in FIELDS}
            continue
        values = {}
        for field, i in index.items():
            if i >= len(cells) or not cells[i].strip():
                raise ConfigError(f"{where}: {field}: missing value")
            values[field] = cells[i]
        yield _row(values, where)


def read_trace(path: str | Path) -> list[RequestSpec]:
    """Read a JSONL or CSV trace; relative paths resolve against the current directory."""
    p = Path(path)
    kind = _format(p)
    if not p.is_file():
        raise ConfigError(f"workload.trace: {p}: no such file (relative paths resolve against the "
                          f"current directory, {Path.cwd()})")
    label = str(path)
    try:
        # utf-8-sig: spreadsheets often write a byte-order mark before the CSV header.
        with p.open(encoding="utf-8-sig", newline="") as f:
            rows = list(_jsonl_rows(f, label) if kind == "jsonl" else _csv_rows(f, label))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"workload.trace: {p}: cannot read: {e}") from None
    if not rows:
        raise ConfigError(f"workload.trace: {p}: the trace has no requests")
    rows.sort(key=lambda r: r[0])
    return [RequestSpec(i, a, pt, ot) for i, (a, pt, ot) in enumerate(rows)]


def write_trace(path: str | Path, specs: Iterable[RequestSpec]) -> None:
    """Write ``specs`` as JSONL or CSV (by extension), in the order given; creates parent folders."""
    p = Path(path)
    kind = _format(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8", newline="") as f:
        if kind == "jsonl":
            for s in specs:
                obj = {"arrival_s": s.arrival_s, "prompt_tokens": s.prompt_tokens,
                       "output_tokens": s.output_tokens}
                f.write(json.dumps(obj) + "\n")
        else:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(FIELDS)
            # str(float) is the shortest repr that parses back to the same float.
            writer.writerows((s.arrival_s, s.prompt_tokens, s.output_tokens) for s in specs)
