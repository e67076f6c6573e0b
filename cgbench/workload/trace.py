"""Request traces: cgbench's own format, the Azure and Mooncake production formats, and any other
CSV / JSONL trace through a column mapping (``workload.trace_columns``).

Formats (``cgbench.config.registry.traces``): the format is ``workload.trace_format``, else the
mapping of ``workload.trace_columns``, else detected from the first record (a CSV header, the first
JSON object's keys). The container follows the file extension: ``.jsonl`` / ``.ndjson`` (one JSON
object per line) or ``.csv`` (a header row naming the columns, in any order), either gzip'd (told by
the file's first bytes; a ``.gz`` after the extension is allowed). Other keys or columns are
ignored; blank lines are skipped.

Arrivals: the unit is the format's (Azure: wall-clock ``TIMESTAMP``; Mooncake: milliseconds),
else ``workload.trace_arrival_unit``, else detected from the first record: a number of 1e9 or more
is an epoch (seconds, ms or us by its size), an ISO date-time text is wall-clock, and otherwise
seconds (a ``trace_columns`` trace whose first 1,000 arrivals are whole numbers with a median gap of
10 or more is read as milliseconds). Epoch and wall-clock arrivals count from the first record's
(an earlier one is refused: sort the trace). What was assumed is one line, ``TraceSummary.note``.
A relative arrival is a finite number from 0 to ``MAX_ARRIVAL_S`` seconds; the token counts are
integers from 1 to 2**63 - 1 (``128.0`` is accepted, ``128.5`` is not).

Windows (``workload.window``): by time, the requests with ``start_s <= arrival < end_s`` (seconds
of trace time, before ``time_scale``), replayed from ``start_s`` as t = 0; by rows, requests
``first`` to ``last`` (0-based, both included, in arrival order), replayed from the first one's
arrival. Ids are ``0..n-1`` in arrival order.

Streaming: a trace is read twice, once to check every record and gather its ``TraceSummary`` and
once as the engine consumes it, so a trace in arrival order is never held in memory (a million-row
trace replays in bounded memory: ``scripts/trace_memory.py``). A trace out of arrival order is read
whole and sorted (stable: ties keep file order).

Any problem is a ``ConfigError`` that names the file, the line and the field, e.g.
``trace.jsonl:7: prompt_tokens: 'abc' is not a positive integer``.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cgbench.config.limits import check_trace_memory
from cgbench.config.registry.traces import (
    COLUMNS,
    PER_SECOND,
    TRACE_FORMATS,
    TraceFormat,
    counted_unit,
    detect_format,
    trace_format,
)
from cgbench.config.schema import ConfigError, TraceColumnsConfig, TraceWindowConfig, WorkloadConfig
from cgbench.safeio import INT64_MAX, BigInt, describe_missing, parse_int64, write_text_atomic
from cgbench.workload.arrivals import RequestSpec
from cgbench.workload.trace_file import container_suffix, count_lines, is_gzip, trace_lines
from cgbench.workload.trace_summary import UNIT_SAMPLE, TraceSummary, looks_like_ms

FIELDS = TRACE_FORMATS["cgbench"].fields
_JSONL = (".jsonl", ".ndjson")
_CSV = (".csv",)

Row = tuple[float, int, int]
MAX_ARRIVAL_S = 1e9  # about 32 years: any later arrival is a unit mistake, and would lose all precision


def _format(path: Path) -> str:
    suffix = container_suffix(path)
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


def _number(raw: Any) -> float | None:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            return None
    return None


_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?\s*(Z|[+-]\d{2}:?\d{2})?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@functools.lru_cache(maxsize=4096)
def _whole_seconds(day: str, clock: str, zone: str | None) -> int:
    """Seconds from 1970 of a date and a time of day (UTC unless ``zone`` says otherwise)."""
    t = datetime.fromisoformat(f"{day}T{clock}")
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        t -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return int((t.replace(tzinfo=UTC) - _EPOCH).total_seconds())


def datetime_ns(raw: Any) -> int | None:
    """An ISO wall-clock text (``2023-11-16 18:15:46.6805900``, any number of fractional digits, an
    optional ``Z`` / ``+HH:MM``) as integer nanoseconds from 1970 (exact); None if it is not one."""
    if not isinstance(raw, str):
        return None
    m = _DATETIME.fullmatch(raw.strip())
    if m is None:
        return None
    try:
        whole = _whole_seconds(m.group(1), m.group(2), m.group(4))
    except ValueError:
        return None
    frac = (m.group(3) or "")[:9].ljust(9, "0")
    return whole * 1_000_000_000 + int(frac)


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


def _blocks(raw: Any, where: str, field: str) -> array:
    """A list of prefix-block hashes (a JSON list, or in a CSV cell a JSON list or whitespace- /
    semicolon-separated integers), packed as int64."""
    items = raw
    if isinstance(raw, str):
        text = raw.strip()
        try:
            items = json.loads(text, parse_int=parse_int64) if text.startswith("[") else \
                [parse_int64(t) for t in text.replace(";", " ").split()]
        except (json.JSONDecodeError, ValueError):
            items = None
    if not isinstance(items, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in items):
        raise ConfigError(f"{where}: {field}: {_show(raw)} is not a list of integers")
    try:
        return array("q", items)
    except OverflowError:
        raise ConfigError(f"{where}: {field}: a hash does not fit in 64 bits") from None


@dataclass(frozen=True)
class TraceOptions:
    """How a trace file is read: ``workload.trace_format``, ``trace_columns``, ``trace_arrival_unit``
    and ``window`` (None: detected / the whole trace)."""

    format: str | None = None
    columns: TraceColumnsConfig | None = None
    arrival_unit: str | None = None
    window: TraceWindowConfig | None = None

    @classmethod
    def of(cls, w: WorkloadConfig) -> TraceOptions:
        return cls(w.trace_format, w.trace_columns if w.trace_columns.is_set else None, w.trace_arrival_unit,
                   w.window if (w.window.by_time or w.window.by_rows) else None)


def _jsonl_records(lines: Iterable[tuple[int, str]], label: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for lineno, line in lines:
        if not line.strip():
            continue
        where = f"{label}:{lineno}"
        try:
            obj = json.loads(line, parse_int=parse_int64)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
        except RecursionError:
            raise ConfigError(f"{where}: invalid JSON: nested too deep") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected a JSON object with keys {', '.join(FIELDS)} (or another trace "
                              f"format's), got {type(obj).__name__}")
        yield where, obj


def _csv_records(lines: Iterable[tuple[int, str]], label: str) -> Iterator[tuple[str, list[str]]]:
    """Non-blank CSV rows, the header first; the csv reader's own errors as ConfigError."""
    reader = csv.reader(line for _, line in lines)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise ConfigError(f"{label}:{reader.line_num}: invalid CSV: {e}") from None
        if any(c.strip() for c in cells):
            yield f"{label}:{reader.line_num}", cells


def _closest_format(names: Iterable[str]) -> TraceFormat:
    present = set(names)
    return max(TRACE_FORMATS.values(), key=lambda f: len(set(f.fields) & present))


def _known_formats() -> str:
    return "; ".join(f"{f.name}: {', '.join(f.fields)}" for f in TRACE_FORMATS.values())


class _Layout:
    """The trace's container and format, resolved against its first record, and its records."""

    def __init__(self, path: Path, label: str, options: TraceOptions) -> None:
        self.path, self.label, self.options = path, label, options
        self.kind = _format(path)
        header, header_where, data = self._open()
        first = next(data, None)
        if first is None:
            raise ConfigError(f"workload.trace: {path}: the trace has no requests")
        names = header if header is not None else list(first[1])
        c = options.columns
        if options.format is not None:
            self.spec, self.how = trace_format(options.format), "workload.trace_format"
        elif c is not None:
            assert c.arrival and c.prompt and c.output  # validated
            self.spec = TraceFormat(COLUMNS, c.arrival, c.prompt, c.output, hash_ids=c.hash_ids,
                                    block_tokens=c.block_tokens if c.hash_ids else 0)
            self.how = "workload.trace_columns"
        else:
            found = detect_format(names)
            self.spec = found if found is not None else _closest_format(names)
            self.how = f"detected from its {'header' if header is not None else 'first record'}"
            if found is None:
                missing = next(f for f in self.spec.fields if f not in names)
                known = f"the formats cgbench reads: {_known_formats()}; or map the fields with workload.trace_columns"
                if header is not None:
                    raise ConfigError(f"{header_where}: missing column {missing!r} (header: {', '.join(names)}; "
                                      f"{known})")
                raise ConfigError(f"{first[0]}: {missing}: missing (keys: {', '.join(names)}; {known})")
        self.wanted = [*self.spec.fields, *([self.spec.hash_ids] if self.spec.hash_ids else [])]
        self.index: dict[str, int] = {}
        if header is not None:
            for f in self.wanted:
                if f not in header:
                    raise ConfigError(f"{header_where}: missing column {f!r} ({self.spec.name} format, "
                                      f"{self.how}; header: {', '.join(header)})")
            self.index = {f: header.index(f) for f in self.wanted}

    def _open(self) -> tuple[list[str] | None, str, Iterator[tuple[str, Any]]]:
        """(the CSV header or None for JSONL, where it is, the data records: a dict or a row's cells each)."""
        where = str(self.path)
        bound = None if self.options.window is not None else lambda n: check_trace_memory(n, where)
        lines = trace_lines(self.path, self.label, line_bound=bound)  # the plain file's bound, gzip'd too
        if self.kind == "jsonl":
            return None, "", _jsonl_records(lines, self.label)
        rows = _csv_records(lines, self.label)
        top = next(rows, None)
        if top is None:
            return [], "", iter(())
        return [c.strip() for c in top[1]], top[0], rows

    def records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(where, {field: raw value}) of every data record, each field present (else ConfigError)."""
        _, _, data = self._open()
        if self.kind == "jsonl":
            wanted = self.wanted
            for where, obj in data:
                for f in wanted:
                    if f not in obj:
                        raise ConfigError(f"{where}: {f}: missing")
                yield where, obj
            return
        index = self.index
        for where, cells in data:
            values = {}
            for f, i in index.items():
                if i >= len(cells) or not cells[i].strip():
                    raise ConfigError(f"{where}: {f}: missing value")
                values[f] = cells[i]
            yield where, values


_EPOCH_UNITS = ((1e14, "epoch_us"), (1e11, "epoch_ms"), (MAX_ARRIVAL_S, "epoch_s"))
_MAX_EPOCH = 1e17  # epoch microseconds until ~5138; anything larger is no clock


def _detect_unit(spec: TraceFormat, sample: list[Any]) -> str:
    """The arrival unit the first records' arrivals show (``sample``, the first ``UNIT_SAMPLE``)."""
    first = sample[0]
    if datetime_ns(first) is not None:
        return "datetime"
    v = _number(first)
    if v is not None and math.isfinite(v) and v < _MAX_EPOCH:
        for floor, unit in _EPOCH_UNITS:
            if v >= floor:
                return unit
    if spec.name == COLUMNS:
        values = [_number(x) for x in sample]
        if all(x is not None for x in values) and looks_like_ms([float(x) for x in values if x is not None]):
            return "ms"
    return "s"


class _Arrivals:
    """Raw arrival values -> seconds from the trace's origin, in ``unit``."""

    def __init__(self, unit: str, first_raw: Any, field: str) -> None:
        self.unit, self.field = unit, field
        self.divisor = PER_SECOND[unit]
        self.counted = unit.startswith("epoch") or unit == "datetime"
        self.origin: float | int = 0
        if unit == "datetime":
            ns = datetime_ns(first_raw)
            self.origin = ns if ns is not None else 0
        elif self.counted:
            v = _number(first_raw)
            self.origin = v if v is not None and math.isfinite(v) else 0.0

    def __call__(self, raw: Any, where: str) -> float:
        f = self.field
        if self.unit == "datetime":
            ns = datetime_ns(raw)
            if ns is None:
                raise ConfigError(f"{where}: {f}: {_show(raw)} is not a date-time (YYYY-MM-DD HH:MM:SS[.fraction])")
            t = (ns - int(self.origin)) / 1e9
        else:
            v = _number(raw)
            if v is None or not math.isfinite(v) or (v < 0 and not self.counted):
                raise ConfigError(f"{where}: {f}: {_show(raw)} is not a non-negative number")
            if self.unit == "s":
                t = v  # as recorded, bit for bit
            else:
                t = (v - self.origin) / self.divisor
        if t < 0:
            raise ConfigError(f"{where}: {f}: {_show(raw)} is earlier than the first record's arrival, which "
                              f"{self.unit} arrivals count from: sort the trace by arrival")
        if t > MAX_ARRIVAL_S:
            epoch = counted_unit(self.unit) if self.unit != "s" else "epoch_s or epoch_ms"
            hint = "the trace spans more than that" if self.counted else \
                f"an epoch time? subtract the first arrival, or set workload.trace_arrival_unit={epoch}"
            raise ConfigError(f"{where}: {f}: {_show(raw)} is later than {MAX_ARRIVAL_S:g} s "
                              f"after the start ({hint})")
        return t


class TraceSource:
    """A trace file, checked and summarised (``summary``) once; ``specs()`` reads it again, lazily.

    ``in_order``: the file is in arrival order (then ``specs()`` streams it); otherwise its requests
    are held, sorted, in memory."""

    def __init__(self, path: str | Path, options: TraceOptions | None = None, *, time_scale: float = 1.0) -> None:
        p = Path(path)
        if p.exists() and not p.is_file():  # a folder, FIFO or device: say what it is, not its suffix
            raise ConfigError(f"workload.trace: {p}: {describe_missing(p, 'a regular file')}")
        _format(p)
        if not p.exists() and not p.is_symlink():
            try:
                cwd = str(Path.cwd())
            except FileNotFoundError:
                cwd = "which no longer exists"
            raise ConfigError(f"workload.trace: {p}: no such file (relative paths resolve against the "
                              f"current directory, {cwd})")
        self.path, self.label = p, str(path)
        self.options = options or TraceOptions()
        if self.options.window is None and not is_gzip(p, self.label):
            # every line may be a request: refused before parsing when they could not fit (a window's
            # requests, or a gzip'd trace's, are counted as read, below)
            check_trace_memory(count_lines(p, self.label), str(p))
        self.layout = _Layout(p, self.label, self.options)
        spec = self.layout.spec
        sample = [r[spec.arrival] for _, r in _take(self.layout.records(), UNIT_SAMPLE)]
        unit, unit_how = self._unit(spec, sample)
        self.arrivals = _Arrivals(unit, sample[0], spec.arrival)
        self.in_order = True  # until a record arrives before the one above it
        self.rows = 0
        self._sorted: list[RequestSpec] | None = None
        summary = self._new_summary(unit, unit_how, time_scale)
        for spec_ in self._windowed(self._rows(), stop_early=False):  # every record checked
            summary.add(spec_)
        if not self.in_order:
            self._sorted = self._sorted_specs()
            summary = self._new_summary(unit, unit_how, time_scale)
            for spec_ in self._sorted:
                summary.add(spec_)
        summary.rows = self.rows
        self.summary = summary
        if self.summary.requests == 0:
            what = "the window holds no requests" if self.options.window else "the trace has no requests"
            raise ConfigError(f"workload.{'window' if self.options.window else 'trace'}: {p}: {what}")
        check_trace_memory(summary.requests, str(p))  # what the run keeps per request, as for generated ones
        summary.note = self._note()

    def _new_summary(self, unit: str, unit_how: str, time_scale: float) -> TraceSummary:
        spec = self.layout.spec
        return TraceSummary(file=self.path.name, format=spec.name, format_how=self.layout.how, arrival_unit=unit,
                            unit_how=unit_how, block_tokens=spec.block_tokens, time_scale=time_scale,
                            window=self._window_json())

    @property
    def total(self) -> int:
        return self.summary.requests

    def _unit(self, spec: TraceFormat, sample: list[Any]) -> tuple[str, str]:
        asked = self.options.arrival_unit
        if spec.unit is not None:
            if asked is not None and asked == counted_unit(spec.unit):  # its unit, counted from 1970
                return asked, "workload.trace_arrival_unit"
            if asked is not None and asked != spec.unit:
                raise ConfigError(f"workload.trace_arrival_unit: {asked!r} changes nothing: the {spec.name} "
                                  f"format's arrivals ({spec.arrival}) are {spec.unit} by definition")
            return spec.unit, f"the {spec.name} format's"
        if asked is not None:
            return asked, "workload.trace_arrival_unit"
        unit = _detect_unit(spec, sample)
        if unit == "s" and spec.name != COLUMNS:
            return unit, f"the {spec.name} format's"
        return unit, "detected"

    def _window_json(self) -> dict[str, Any] | None:
        w = self.options.window
        if w is None:
            return None
        keys = ("start_s", "end_s") if w.by_time else ("first", "last")
        return {k: getattr(w, k) for k in keys if getattr(w, k) is not None}

    def _rows(self) -> Iterator[tuple[float, int, int, array | None]]:
        """Every record as (arrival s, prompt, output, blocks), in file order; counts them and notes
        whether they are in arrival order."""
        spec, arrival = self.layout.spec, self.arrivals
        prev = -math.inf
        rows = 0
        for where, r in self.layout.records():
            rows += 1
            t = arrival(r[spec.arrival], where)
            if t < prev:
                self.in_order = False
            prev = t
            blocks = _blocks(r[spec.hash_ids], where, spec.hash_ids) if spec.hash_ids else None
            yield (t, _tokens(r[spec.prompt], where, spec.prompt), _tokens(r[spec.output], where, spec.output),
                   blocks)
        self.rows = max(self.rows, rows)

    def _windowed(self, rows: Iterable[tuple[float, int, int, array | None]], *,
                  stop_early: bool) -> Iterator[RequestSpec]:
        """The rows of the window (all without one), shifted to start at 0, ids 0..n-1, from rows in
        arrival order. ``stop_early``: stop reading at the window's end (the rows are known in order)."""
        w = self.options.window
        k = 0
        if w is None or w.by_time:
            start = w.start_s if w is not None and w.start_s is not None else 0.0
            end = w.end_s if w is not None and w.end_s is not None else math.inf
            for t, p, o, b in rows:
                if start <= t < end:
                    yield RequestSpec(k, t - start if start else t, p, o, b)  # no window: t as read, bit for bit
                    k += 1
                elif t >= end and stop_early:
                    return
            return
        first = w.first or 0
        last = w.last if w.last is not None else math.inf
        origin = 0.0
        for i, (t, p, o, b) in enumerate(rows):
            if i == first:
                origin = t
            if first <= i <= last:
                yield RequestSpec(k, t - origin, p, o, b)
                k += 1
            elif i > last and stop_early:
                return

    def _sorted_specs(self) -> list[RequestSpec]:
        check_trace_memory(self.rows, str(self.path))
        rows = list(self._rows())
        rows.sort(key=lambda r: r[0])
        return list(self._windowed(rows, stop_early=True))

    def specs(self) -> Iterator[RequestSpec]:
        """The window's requests in arrival order, ids ``0..n-1`` (the file read again, or the sorted list)."""
        if self._sorted is not None:
            return iter(self._sorted)
        return self._windowed(self._rows(), stop_early=True)

    def _note(self) -> str:
        s, spec = self.summary, self.layout.spec
        names = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
        if s.arrival_unit == "datetime":
            unit = f"wall-clock {spec.arrival}, counted from the first record's"
        elif s.arrival_unit.startswith("epoch_"):
            unit = f"{spec.arrival} in epoch {names[s.arrival_unit[6:]]}, counted from the first record's"
        else:
            unit = f"{spec.arrival} in {names[s.arrival_unit]}"
        window = ""
        if s.window:
            shown = ", ".join(f"{k}={v}" for k, v in s.window.items())
            window = f" in workload.window {shown} of {s.rows:,} rows"
        scale = f", time_scale {s.time_scale:g}" if s.time_scale != 1 else ""
        return (f"trace {s.file}: {spec.name} format ({s.format_how}); arrivals: {unit} ({s.unit_how}); "
                f"{s.requests:,} requests{window} over {s.span_s:,.1f} s{scale}")


def _take(it: Iterator[Any], n: int) -> list[Any]:
    out = []
    for x in it:
        out.append(x)
        if len(out) >= n:
            break
    return out


def read_trace(path: str | Path, options: TraceOptions | None = None) -> list[RequestSpec]:
    """Read a trace (any format) into memory; relative paths resolve against the current directory."""
    return list(TraceSource(path, options).specs())


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


def check_time_scale(summary: TraceSummary, time_scale: float) -> None:
    """``scale_arrivals``'s checks, made once from a summary: the last arrival, scaled, stays in range."""
    if not math.isfinite(time_scale) or time_scale <= 0:
        raise ConfigError(f"workload.time_scale: must be a finite number > 0, got {time_scale}")
    t = summary.last_arrival_s * time_scale
    if not math.isfinite(t) or t > MAX_ARRIVAL_S:
        raise ConfigError(f"workload.time_scale: {time_scale:g} puts request {summary.requests - 1} (arrival_s "
                          f"{summary.last_arrival_s:g}) at {t:g} s, later than {MAX_ARRIVAL_S:g} s")


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


def trace_block_tokens(path: str | Path, options: TraceOptions) -> int:
    """Tokens per prefix block of the trace's hash ids (0: its format has none), from its first record."""
    return _Layout(Path(path), str(path), options).spec.block_tokens
