"""Exports: a run's per-request and per-step records, and the metrics of a run or of every point of a
sweep, as flat JSONL and CSV files for other tools (pandas, DuckDB, spreadsheets).

Files of one export folder (docs/exports.md):

* ``requests.csv`` / ``requests.jsonl``: one row per request. The first three columns are a trace's
  (``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``cgbench.workload.trace``), so the file
  replays as ``workload=trace workload.trace=DIR/requests.csv``.
* ``steps.csv`` / ``steps.jsonl``: one row per engine step (``--trace``'s records, the shapes split
  into columns in the CSV).
* ``metrics.csv`` / ``metrics.jsonl``: one row per run or sweep point, a column for every metric of the
  registry (``cgbench.results.names``: summaries expanded to ``ttft_ms.p99`` etc., keyed records to
  the keys the points hold).
* ``columns.csv``: every column of every file with its unit and meaning (metrics: the registry's).

Every file is written by ``cgbench.safeio``'s one rule (temporary file, rename), and an export never
replaces a file that exists unless asked (``replace=True``): ``planned_files`` lists them all first.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cgbench.config.schema import ConfigError
from cgbench.results.export_parquet import DEFAULT_FORMATS
from cgbench.results.export_schema import column_type
from cgbench.results.export_schema import metric_columns as schema_metric_columns
from cgbench.results.names import METRICS, REGISTRY, flatten, lookup, metric
from cgbench.safeio import check_writable, write_files_atomic

REQUESTS, STEPS, METRICS_FILE, COLUMNS = "requests", "steps", "metrics", "columns.csv"

# (column, unit, meaning) of the per-request file; the trace's three come first
REQUEST_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("arrival_s", "s", "arrival time, full precision for an open-loop workload (a trace's column)"),
    ("prompt_tokens", "tokens", "prompt length (a trace's column)"),
    ("output_tokens", "tokens", "tokens to generate, after the max_sequence_length clamp, at least 1 (a trace's "
     "column)"),
    ("id", "", "request id (arrival order)"),
    ("outcome", "", "completed, failed, running or waiting (the last two: the run stopped first)"),
    ("fail_reason", "", "why the engine rejected it (failed only)"),
    ("generated", "tokens", "tokens emitted"),
    ("arrival_step", "step", "the first step whose scheduling round could see it"),
    ("first_admit_step", "step", "the step of its first admission (-1: never)"),
    ("first_token_step", "step", "the step that emitted its first token (-1: none)"),
    ("finish_step", "step", "the step that ended it (-1: not ended)"),
    ("first_token_s", "s", "time of its first token (-1: none)"),
    ("finish_s", "s", "time it ended (-1: not ended)"),
    ("chunks", "count", "prefill chunks"),
    ("deferrals", "count", "scheduling rounds in which gating held it back"),
    ("max_cg_wait_iters", "iterations", "its longest run of consecutive deferrals"),
    ("evictions", "count", "times it was evicted and re-queued"),
    ("pauses", "count", "steps missed for a KV block"),
    ("queue_wait_iters", "iterations", "first_admit_step - arrival_step (admitted requests)"),
    ("ttft_steps", "iterations", "first_token_step - arrival_step + 1 (requests with a token)"),
    ("e2e_steps", "iterations", "finish_step - arrival_step + 1 (completed requests)"),
    ("ttft_ms", "ms", "first_token_s - arrival_s (requests with a token)"),
    ("e2e_ms", "ms", "finish_s - arrival_s (completed requests)"),
    ("tpot_ms", "ms", "(finish_s - first_token_s) / (generated - 1): time per output token after the first "
     "(completed requests with more than one token; vLLM's TPOT, the values of the metric tpot_ms)"),
)
# computed here from the recorded fields (the others are the ``requests`` records' own)
DERIVED_REQUEST_COLUMNS = ("queue_wait_iters", "ttft_steps", "e2e_steps", "ttft_ms", "e2e_ms", "tpot_ms")
# (column, unit, meaning) of the per-step CSV (the JSONL holds --trace's records as they are)
STEP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "step index"),
    ("t_s", "s", "start time"),
    ("dt_s", "s", "duration"),
    ("tokens", "tokens", "T: real tokens in the step"),
    ("prefills", "requests", "P: prefill requests (a chunk counts as one)"),
    ("decodes", "requests", "D: decode requests"),
    ("graph_tokens", "tokens", "the replayed graph's T (empty: eager)"),
    ("graph_prefills", "requests", "the replayed graph's P (empty: eager)"),
    ("graph_decodes", "requests", "the replayed graph's D (empty: eager)"),
    ("eager_reason", "", "why no graph applied (empty: graphed)"),
    ("admitted", "requests", "requests admitted into the step (a chunk counts)"),
    ("admitted_tokens", "tokens", "prompt tokens admitted into the step"),
    ("admitted_ids", "", "id:chunk tokens, space-separated, a trailing + on a non-final chunk"),
    ("deferred", "", "the request gating held back in the step's round (empty: none)"),
    ("queue_len", "requests", "requests queued after the round"),
    ("paused", "requests", "paused requests"),
    ("rank", "", "expert- or data-parallel rank (ep_size or dp_size > 1 only)"),
)
POINT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("point", "", "sweep point number (1-based; 1 for a run)"),
    ("status", "", "done, failed or pending (a sweep's point)"),
    ("file", "", "the point's result JSON, relative to the sweep folder (a run: its path)"),
)


@dataclass(frozen=True)
class Table:
    """One exported table: its columns (in order) and rows (dicts; a missing key is an empty cell)."""

    name: str  # requests, steps or metrics: the files are NAME.csv and NAME.jsonl
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    jsonl_rows: tuple[dict[str, Any], ...] | None = None  # the JSONL's records when not ``rows``


# ---------------------------------------------------------------------------------------------
# Tables from a result document


def exact_arrivals(config: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> list[float] | None:
    """The arrival times of ``records`` at full precision, drawn again from the run's ``config`` (an
    open-loop workload: generated from its seed, or a trace); None when they cannot be (closed-loop
    arrivals happen as requests complete) or differ from the records' (written to the nanosecond)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from cgbench.config.schema import WorkloadConfig
    from cgbench.workload.stream import generate_requests

    w_doc, seed = config.get("workload"), config.get("seed")
    if not isinstance(w_doc, dict) or not isinstance(seed, int) or isinstance(seed, bool):
        return None
    if (w_doc.get("arrival") or {}).get("process") == "closed_loop":
        return None
    try:
        w = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(WorkloadConfig), w_doc))
        assert isinstance(w, WorkloadConfig)
        specs = generate_requests(w, seed)
    except (ConfigError, OmegaConfBaseException, ValueError):
        return None
    if len(specs) != len(records):
        return None
    for s, r in zip(specs, records, strict=True):
        if s.id != r.get("id") or round(s.arrival_s, 9) != r.get("arrival_s") or s.prompt_tokens != r.get(
                "prompt_tokens"):
            return None
    return [s.arrival_s for s in specs]


def request_table(records: Sequence[Mapping[str, Any]], arrivals: Sequence[float] | None = None) -> Table:
    """The per-request table of a result's ``requests`` records (``run --requests``); ``arrivals``:
    their arrival times at full precision (``exact_arrivals``), else the records' (to the nanosecond)."""
    rows = []
    for i, r in enumerate(records):
        row = {c: r.get(c) for c, _, _ in REQUEST_COLUMNS if c not in DERIVED_REQUEST_COLUMNS}
        if arrivals is not None:
            row["arrival_s"] = arrivals[i]
        # a trace needs >= 1; the clamp leaves 0 only when the prompt fills max_sequence_length, and
        # it makes 1 into 0 again on replay
        row["output_tokens"] = max(1, r.get("output_tokens") or 0)
        arrival_step, admit = r.get("arrival_step", -1), r.get("first_admit_step", -1)
        first_step, finish_step = r.get("first_token_step", -1), r.get("finish_step", -1)
        emitted, done = first_step >= 0, r.get("outcome") == "completed"
        row["queue_wait_iters"] = admit - arrival_step if admit >= 0 else None
        row["ttft_steps"] = first_step - arrival_step + 1 if emitted else None
        row["e2e_steps"] = finish_step - arrival_step + 1 if done else None
        row["ttft_ms"] = round((r["first_token_s"] - r["arrival_s"]) * 1000.0, 6) if emitted else None
        row["e2e_ms"] = round((r["finish_s"] - r["arrival_s"]) * 1000.0, 6) if done else None
        generated = r.get("generated") or 0
        row["tpot_ms"] = (round((r["finish_s"] - r["first_token_s"]) * 1000.0 / (generated - 1), 6)
                          if done and generated > 1 else None)
        if "token_ids" in r:  # the real engine's tokens: JSONL only
            row["token_ids"] = r["token_ids"]
        rows.append(row)
    columns = tuple(c for c, _, _ in REQUEST_COLUMNS)
    return Table(REQUESTS, columns, tuple({k: v for k, v in row.items() if k != "token_ids"} for row in rows),
                 tuple(rows))


def step_table(records: Sequence[Mapping[str, Any]]) -> Table:
    """The per-step table of a result's ``steps`` records (``run --trace``)."""
    rows = []
    for s in records:
        T, P, D = s["real"]
        graph = s.get("graph") or [None, None, None]
        admitted = s.get("admitted") or []
        row = {"step": s["step"], "t_s": s.get("t_s"), "dt_s": s.get("dt_s"), "tokens": T, "prefills": P,
               "decodes": D, "graph_tokens": graph[0], "graph_prefills": graph[1], "graph_decodes": graph[2],
               "eager_reason": s.get("eager_reason"), "admitted": len(admitted),
               "admitted_tokens": sum(a[1] for a in admitted),
               "admitted_ids": " ".join(f"{a[0]}:{a[1]}{'' if a[2] else '+'}" for a in admitted),
               "deferred": s.get("deferred"), "queue_len": s.get("queue_len"), "paused": s.get("paused"),
               "rank": s.get("rank")}
        rows.append(row)
    return Table(STEPS, tuple(c for c, _, _ in STEP_COLUMNS), tuple(rows), tuple(dict(s) for s in records))


def metric_columns(metric_blocks: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Every metric column of the registry, in its order (``cgbench.results.export_schema``): the
    same for every run, plus any key of a keyed record that ``metric_blocks`` hold and the schema does
    not know (a plug-in's reason)."""
    extra: dict[str, set[str]] = {}
    for b in metric_blocks:
        for m in METRICS:
            value = lookup(b, m.name) if m.keyed else None
            if isinstance(value, Mapping):
                extra.setdefault(m.name, set()).update(str(k) for k in value)
    return schema_metric_columns(extra)


def _keyed_parent(column: str) -> str | None:
    head = column.rpartition(".")[0]
    m = REGISTRY.get(head)
    return head if m is not None and m.keyed else None


def metrics_table(points: Sequence[tuple[dict[str, Any], Mapping[str, Any] | None]],
                  param_keys: Sequence[str] = ()) -> Table:
    """One row per point: ``points`` are (leading cells: point, params, status, file; the point's
    ``metrics`` block or None), the columns every metric of the registry. A value the point does not
    have is a null; a keyed record's key it did not count is 0 (its record exists)."""
    columns = metric_columns(m for _, m in points if m is not None)
    rows = []
    for lead, m in points:
        row = dict(lead)
        flat = dict(flatten(m)) if m is not None else {}
        for c in columns:
            value = flat.get(c)
            if value is None and m is not None and (parent := _keyed_parent(c)) is not None \
                    and isinstance(lookup(m, parent), Mapping):
                value = 0
            row[c] = value
        rows.append(row)
    lead_cols = ("point", *param_keys, "status", "file")
    return Table(METRICS_FILE, (*lead_cols, *columns), tuple(rows))


def run_tables(doc: Mapping[str, Any], source: str) -> list[Table]:
    """The tables of one result document: metrics always; requests and steps when it holds them."""
    tables = [metrics_table([({"point": 1, "status": "done", "file": source}, doc["metrics"])])]
    if doc.get("requests") is not None:
        tables.append(request_table(doc["requests"], exact_arrivals(doc.get("config") or {}, doc["requests"])))
    if doc.get("steps") is not None:
        tables.append(step_table(doc["steps"]))
    return tables


def column_meta(t: Table) -> dict[str, tuple[str, str]]:
    """(unit, meaning) of every column of ``t``: its own, a point's, else the metric registry's."""
    known = {REQUESTS: REQUEST_COLUMNS, STEPS: STEP_COLUMNS}
    own = {c: (u, d) for c, u, d in (*known.get(t.name, ()), *POINT_COLUMNS)}
    meta = {}
    for c in t.columns:
        if c in own:
            meta[c] = own[c]
        elif (m := metric(c)) is not None:
            meta[c] = (m.unit, m.description)
        else:
            meta[c] = ("", "a sweep axis")
    return meta


def column_types(t: Table) -> dict[str, str]:
    """The type of every column of ``t`` (``cgbench.results.export_schema``)."""
    return {c: column_type(t.name, c) for c in t.columns}


COLUMNS_HEADER = ("file", "column", "unit", "meaning", "type")


def columns_table(tables: Sequence[Table]) -> str:
    """``columns.csv``: file, column, unit, meaning and type for every column written (a Parquet
    file's columns are its CSV's, with these types)."""
    rows = []
    for t in tables:
        types = column_types(t)
        for c, (unit, meaning) in column_meta(t).items():
            rows.append(dict(zip(COLUMNS_HEADER, (f"{t.name}.csv", c, unit, meaning, types[c]), strict=True)))
    return _csv(COLUMNS_HEADER, rows)


# ---------------------------------------------------------------------------------------------
# Writing


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # a per-rank list: JSON text in a cell
        return json.dumps(value)
    return value


def _csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(dict(r), allow_nan=False) + "\n" for r in rows)


def table_files(folder: Path, tables: Sequence[Table],
                formats: Sequence[str] = DEFAULT_FORMATS) -> dict[Path, str | bytes]:
    """Every file of ``tables`` in ``folder`` with its text (its bytes: Parquet), in each of ``formats``."""
    files: dict[Path, str | bytes] = {}
    for t in tables:
        if "csv" in formats:
            files[folder / f"{t.name}.csv"] = _csv(t.columns, t.rows)
        if "jsonl" in formats:
            files[folder / f"{t.name}.jsonl"] = _jsonl(t.jsonl_rows if t.jsonl_rows is not None else t.rows)
        if "parquet" in formats:
            from cgbench.results.export_parquet import parquet_bytes

            files[folder / f"{t.name}.parquet"] = parquet_bytes(t.name, t.columns, t.rows, column_meta(t),
                                                                column_types(t))
    return files


def file_names(names: Sequence[str], formats: Sequence[str] = DEFAULT_FORMATS) -> tuple[str, ...]:
    """The files of tables ``names`` in ``formats``: ``metrics.csv``, ``metrics.parquet``, ..."""
    return tuple(f"{n}.{ext}" for n in names for ext in formats)


def refuse_existing(paths: Iterable[Path], key: str = "--export") -> None:
    """A ConfigError naming the first of ``paths`` that exists: an export replaces nothing unasked."""
    for p in paths:
        if p.exists() or p.is_symlink():
            raise ConfigError(f"{key}: {p} exists; export into a new or empty folder (or remove it)")


def check_export_folder(folder: Path, names: Iterable[str], key: str = "--export") -> None:
    """Before any work: the export's files (``names`` inside ``folder``) do not exist and can be written."""
    paths = [folder / n for n in names]
    refuse_existing(paths, key)
    for p in paths[:1]:
        check_writable(p, key)


def write_files(files: Mapping[Path, str | bytes], *, replace: bool = False, key: str = "--export") -> list[Path]:
    """Write ``files`` as one set (``safeio.write_files_atomic``: a failed write puts back what the set
    wrote before it, so the same command again finds the folder as it was); unless ``replace``, none
    may exist (checked before the first write)."""
    if not replace:
        refuse_existing(files, key)
    return write_files_atomic(files, key)


RUN_TABLES = (METRICS_FILE, REQUESTS, STEPS)
RUN_FILES = file_names(RUN_TABLES) + (COLUMNS,)


def run_files(formats: Sequence[str] = DEFAULT_FORMATS) -> tuple[str, ...]:
    """The names a run's export may write in ``formats``."""
    return file_names(RUN_TABLES, formats) + (COLUMNS,)


def export_run(doc: Mapping[str, Any], source: str, folder: Path, *, replace: bool = False,
               key: str = "--export", formats: Sequence[str] = DEFAULT_FORMATS) -> list[Path]:
    """Write the export of one result document into ``folder`` in ``formats``; returns the files written."""
    tables = run_tables(doc, source)
    files = table_files(folder, tables, formats)
    files[folder / COLUMNS] = columns_table(tables)
    return write_files(files, replace=replace, key=key)
