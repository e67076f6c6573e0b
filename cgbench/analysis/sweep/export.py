"""The export of a sweep folder (``cgbench export SWEEP_DIR``, ``cgbench sweep --export DIR``): the flat
metric table of every point, and each point's per-request and per-step files when its result holds
them (``cgbench.results.export`` for the formats).

``DIR/metrics.csv`` has one row per point (its number, its axes, status and file, then every metric
of the registry); ``DIR/points/<point file stem>/`` holds a point's ``requests.*`` and ``steps.*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cgbench.analysis.sweep.folder import DONE, load_index
from cgbench.results.document import load_result
from cgbench.results.export import (
    COLUMNS,
    METRICS_FILE,
    columns_table,
    exact_arrivals,
    file_names,
    metrics_table,
    request_table,
    step_table,
    table_files,
    write_files,
)
from cgbench.results.export_parquet import DEFAULT_FORMATS

POINTS_FOLDER = "points"
# what a sweep's export writes at its top (``points`` a folder): none may exist before
SWEEP_EXPORT_NAMES = ("metrics.csv", "metrics.jsonl", COLUMNS, POINTS_FOLDER)


def sweep_export_names(formats: Sequence[str] = DEFAULT_FORMATS) -> tuple[str, ...]:
    """What a sweep's export in ``formats`` writes at its top."""
    return (*file_names((METRICS_FILE,), formats), COLUMNS, POINTS_FOLDER)


def sweep_export_files(sweep_dir: Path, folder: Path,
                       formats: Sequence[str] = DEFAULT_FORMATS) -> tuple[dict[Path, str | bytes], list[str]]:
    """Every file of the export of ``sweep_dir`` into ``folder`` with its text, and notes (points whose
    result holds no per-request or per-step records, points not done)."""
    index = load_index(sweep_dir)
    leads: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    keys: list[str] = []
    files: dict[Path, str | bytes] = {}
    notes: list[str] = []
    record_tables = []
    without = 0
    for i, p in enumerate(index["points"], 1):
        params = p.get("params") if isinstance(p.get("params"), dict) else {}
        keys.extend(k for k in params if k not in keys)
        lead = {"point": i, **{k: str(v) for k, v in params.items()}, "status": p.get("status"), "file": p["file"]}
        if p.get("status") != DONE:
            leads.append((lead, None))
            continue
        doc = load_result(Path(sweep_dir) / p["file"])
        leads.append((lead, doc["metrics"]))
        tables = []
        if doc.get("requests") is not None:
            tables.append(request_table(doc["requests"], exact_arrivals(doc.get("config") or {}, doc["requests"])))
        if doc.get("steps") is not None:
            tables.append(step_table(doc["steps"]))
        if not tables:
            without += 1
            continue
        files.update(table_files(folder / POINTS_FOLDER / Path(p["file"]).stem, tables, formats))
        record_tables.extend(tables)
    not_done = sum(1 for lead, m in leads if m is None)
    if not_done:
        notes.append(f"{not_done} point(s) not done: their metric rows are empty")
    if without:
        notes.append(f"{without} point(s) hold no per-request or per-step records (run the sweep with --export "
                     "to record them)")
    table = metrics_table(leads, keys)
    files.update(table_files(folder, [table], formats))
    firsts = {t.name: t for t in record_tables}  # the same columns in every point: list each once
    files[folder / COLUMNS] = columns_table([table, *firsts.values()])
    return files, notes


def export_sweep(sweep_dir: Path, folder: Path, *, replace: bool = False, key: str = "--export",
                 formats: Sequence[str] = DEFAULT_FORMATS) -> tuple[list[Path], list[str]]:
    """Write the export of ``sweep_dir`` into ``folder`` in ``formats``: (the files written, notes)."""
    files, notes = sweep_export_files(sweep_dir, folder, formats)
    return write_files(files, replace=replace, key=key), notes


def sweep_peer_files(sweep_dir: Path, folder: Path, shape: str) -> tuple[dict[Path, str | bytes], list[str]]:
    """Every done point of ``sweep_dir`` in a peer's shape (``cgbench.results.export_peers``): one file
    per point, named by the point's file, and notes (points not done are left out)."""
    from cgbench.results.export_peers import peer_file, peer_text

    index = load_index(sweep_dir)
    files: dict[Path, str | bytes] = {}
    skipped = 0
    for p in index["points"]:
        if p.get("status") != DONE:
            skipped += 1
            continue
        doc = load_result(Path(sweep_dir) / p["file"])
        files[peer_file(folder, Path(p["file"]).stem, shape)] = peer_text(doc, shape)
    notes = [f"{skipped} point(s) not done: left out"] if skipped else []
    return files, notes
