"""Request traces: JSONL or CSV files with ``arrival_s``, ``prompt_tokens`` and ``output_tokens``.

The format follows the file extension: ``.jsonl`` / ``.ndjson`` (one JSON object per line) or
``.csv`` (a header row naming the columns, in any order). Other keys or columns are ignored; blank
lines are skipped. ``arrival_s`` is a finite number from 0 to ``MAX_ARRIVAL_S`` (seconds); the
token counts are integers from 1 to 2**63 - 1 (``128.0`` is accepted, ``128.5`` is not). A line
holds at most ``MAX_LINE_CHARS`` characters, and the file is read with the bounds of
``cgbench.safeio`` (a regular file of bounded size). Any problem is a ``ConfigError`` that names
the file, the line and the field, e.g. ``trace.jsonl:7: prompt_tokens: 'abc' is not a positive integer``.

``read_trace`` returns the rows sorted by arrival (stable: ties keep file order) with ids
``0..n-1`` in that order, so ``read_trace(write_trace(p, specs))`` gives back ``specs`` whenever
they are in that form (as every generated request list is).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from cgbench.config.limits import check_trace_memory
from cgbench.config.schema import ConfigError
from cgbench.safeio import (
    INT64_MAX,
    MAX_LINE_CHARS,
    BigInt,
    describe_missing,
    parse_int64,
    read_text,
    write_text_atomic,
)
from cgbench.workload.arrivals import RequestSpec

FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")
_JSONL = (".jsonl", ".ndjson")
_CSV = (".csv",)

Row = tuple[float, int, int]
MAX_ARRIVAL_S = 1e9  # about 32 years: any later arrival is a unit mistake, and would lose all precision


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _JSONL:
        return "jsonl"
    if suffix in _CSV:
        return "csv"
    raise ConfigError(f"workload.trace: {path}: unknown trace format {path.suffix!r} "
                      f"(use {', '.join(_JSONL + _CSV)})")


def _show(raw: Any) -> str:
    """``repr(raw)``, shortened: a cell may hold thousands of characters."""
    text = repr(str(raw) if isinstance(raw, BigInt) else raw)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} characters)"


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
        raise ConfigError(f"{where}: arrival_s: {_show(raw)} is not a non-negative number")
    if value > MAX_ARRIVAL_S:
        raise ConfigError(f"{where}: arrival_s: {_show(raw)} is later than {MAX_ARRIVAL_S:g} s")
    return value


def _tokens(raw: Any, where: str, field: str) -> int:
    value = None
    if isinstance(raw, BigInt) or (isinstance(raw, str) and len(raw.strip()) > 20):  # a sign and 19 digits
        if raw.strip().lstrip("+-").isdigit():
            raise ConfigError(f"{where}: {field}: {_show(raw)} does not fit in 64 bits")
    elif isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            value = None
    if value is not None and value > INT64_MAX:
        raise ConfigError(f"{where}: {field}: {_show(raw)} does not fit in 64 bits")
    if value is None or value < 1:
        raise ConfigError(f"{where}: {field}: {_show(raw)} is not a positive integer")
    return value


def _row(get: dict[str, Any], where: str) -> Row:
    return (_arrival(get["arrival_s"], where), _tokens(get["prompt_tokens"], where, "prompt_tokens"),
            _tokens(get["output_tokens"], where, "output_tokens"))


def _jsonl_rows(lines: Iterable[str], label: str) -> Iterator[Row]:
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{label}:{lineno}"
        if len(line) > MAX_LINE_CHARS:
            raise ConfigError(f"{where}: line longer than {MAX_LINE_CHARS:,} characters")
        try:
            obj = json.loads(line, parse_int=parse_int64)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
        except RecursionError:
            raise ConfigError(f"{where}: invalid JSON: nested too deep") from None
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
    for cells in _csv_records(reader, label):
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


def _csv_records(reader: Any, label: str) -> Iterator[list[str]]:
    """The csv reader's rows; its own errors (a cell over its field limit) as ConfigError."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise ConfigError(f"{label}:{reader.line_num}: invalid CSV: {e}") from None
        yield cells


def read_trace(path: str | Path) -> list[RequestSpec]:
    """Read a JSONL or CSV trace; relative paths resolve against the current directory."""
    p = Path(path)
    if p.exists() and not p.is_file():  # a folder, FIFO or device: say what it is, not its suffix
        raise ConfigError(f"workload.trace: {p}: {describe_missing(p, 'a regular file')}")
    kind = _format(p)
    if not p.exists() and not p.is_symlink():
        try:
            cwd = str(Path.cwd())
        except FileNotFoundError:
            cwd = "which no longer exists"
        raise ConfigError(f"workload.trace: {p}: no such file (relative paths resolve against the "
                          f"current directory, {cwd})")
    label = str(path)
    # utf-8-sig (in read_text): spreadsheets often write a byte-order mark before the CSV header.
    text = read_text(p, "workload.trace")
    check_trace_memory(text.count("\n") + 1, str(p))
    lines = io.StringIO(text, newline="")
    if kind == "jsonl":
        rows = list(_jsonl_rows(lines, label))
    else:
        for lineno, line in enumerate(lines, 1):
            if len(line) > MAX_LINE_CHARS:
                raise ConfigError(f"{label}:{lineno}: line longer than {MAX_LINE_CHARS:,} characters")
        lines.seek(0)
        rows = list(_csv_rows(lines, label))
    if not rows:
        raise ConfigError(f"workload.trace: {p}: the trace has no requests")
    rows.sort(key=lambda r: r[0])
    return [RequestSpec(i, a, pt, ot) for i, (a, pt, ot) in enumerate(rows)]


def scale_arrivals(specs: list[RequestSpec], time_scale: float) -> list[RequestSpec]:
    """Arrival times multiplied by ``workload.time_scale``; a product that is not finite or beyond
    ``MAX_ARRIVAL_S`` is refused (an infinite arrival would never come, and the run never end)."""
    if not math.isfinite(time_scale) or time_scale <= 0:
        raise ConfigError(f"workload.time_scale: must be a finite number > 0, got {time_scale}")
    out = []
    for s in specs:
        t = s.arrival_s * time_scale
        if not math.isfinite(t) or t > MAX_ARRIVAL_S:
            raise ConfigError(f"workload.time_scale: {time_scale:g} puts request {s.id} (arrival_s "
                              f"{s.arrival_s:g}) at {t:g} s, later than {MAX_ARRIVAL_S:g} s")
        out.append(replace(s, arrival_s=t))
    return out


def write_trace(path: str | Path, specs: Iterable[RequestSpec]) -> None:
    """Write ``specs`` as JSONL or CSV (by extension), in the order given; creates parent folders.
    The file is written by the one rule of ``cgbench.safeio`` (temporary file, fsync, rename)."""
    p = Path(path)
    kind = _format(p)
    buf = io.StringIO()
    if kind == "jsonl":
        for s in specs:
            obj = {"arrival_s": s.arrival_s, "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens}
            buf.write(json.dumps(obj, allow_nan=False) + "\n")
    else:
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(FIELDS)
        # str(float) is the shortest repr that parses back to the same float.
        writer.writerows((s.arrival_s, s.prompt_tokens, s.output_tokens) for s in specs)
    write_text_atomic(p, buf.getvalue())
