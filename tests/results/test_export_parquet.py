"""Parquet exports (``--export-format parquet``, ``cgbench export --format parquet``; pyarrow, the
``parquet`` extra): the same columns and values as the CSV, typed, each column's unit in its field
metadata; without pyarrow one line with the install command, before any work."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.schema import ConfigError
from cgbench.results.export_parquet import parse_formats

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
RUN = ["run", "model=hybrid", "policy=defer", "engine.chunked_prefill=true", "workload.num_requests=48"]


@pytest.fixture
def no_pyarrow(monkeypatch):
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)


def test_formats_are_a_checked_comma_list_in_a_fixed_order():
    assert parse_formats("jsonl, CSV") == ("csv", "jsonl")
    for bad in ("", "xlsx", "csv,,xml"):
        with pytest.raises(ConfigError, match="csv, jsonl, parquet"):
            parse_formats(bad)


@pytest.mark.slow
def test_without_pyarrow_parquet_is_one_line_with_the_install_command(tmp_path, no_pyarrow):
    from cgbench.results.extras import install_hint

    out, export = tmp_path / "r.json", tmp_path / "exported"
    for args in ([*RUN, "--out", str(out), "--export", str(export), "--export-format", "parquet"],
                 ["export", str(ROOT / "results" / "baseline"), "-o", str(export), "--export-format", "csv,parquet"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "needs pyarrow" in lines[0] and install_hint("parquet") in lines[0]
        assert not out.exists() and not export.exists()


def test_a_format_without_export_is_refused(tmp_path):
    r = runner.invoke(app, [*RUN, "--out", str(tmp_path / "r.json"), "--export-format", "csv"])
    assert r.exit_code == 2 and "applies to --export DIR" in r.stderr and not (tmp_path / "r.json").exists()


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _same(cell: str, value) -> bool:
    if value is None:
        return cell == ""
    if isinstance(value, bool):
        return cell == ("true" if value else "false")
    if isinstance(value, float):
        return float(cell) == value  # the CSV writes a float's shortest repr: it reads back exactly
    return cell == str(value)


@pytest.mark.slow
def test_parquet_holds_the_csv_typed_with_units(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    export = tmp_path / "exported"
    r = runner.invoke(app, [*RUN, "--out", str(tmp_path / "r.json"), "--export", str(export), "--export-format",
                            "csv,parquet"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in export.iterdir()) == [
        "columns.csv", "metrics.csv", "metrics.parquet", "requests.csv", "requests.parquet", "steps.csv",
        "steps.parquet"]
    for name in ("requests", "steps", "metrics"):
        header, rows = _csv(export / f"{name}.csv")
        table = pq.read_table(export / f"{name}.parquet")
        assert table.column_names == header and table.num_rows == len(rows)
        records = table.to_pylist()
        for row, rec in zip(rows, records, strict=True):
            bad = [c for c in header if not _same(row[c], rec[c])]
            assert not bad, (name, bad[:3], row, rec)
    req = pq.read_table(export / "requests.parquet").schema
    assert str(req.field("id").type) == "int64" and str(req.field("arrival_s").type) == "double"
    assert str(req.field("fail_reason").type) == "string"  # all empty here: typed by its unit, text
    assert req.field("ttft_ms").metadata[b"unit"] == b"ms"
    met = pq.read_table(export / "metrics.parquet").schema
    assert met.field("ttft_ms.p99").metadata[b"unit"] == b"ms" and str(met.field("steps").type) == "int64"


def test_a_sweep_exports_its_metric_table_as_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    export = tmp_path / "exported"
    r = runner.invoke(app, ["export", str(ROOT / "results" / "baseline"), "-o", str(export), "--export-format",
                            "csv,parquet"])
    assert r.exit_code == 0, r.output
    header, rows = _csv(export / "metrics.csv")
    table = pq.read_table(export / "metrics.parquet")
    assert table.num_rows == 48 and table.column_names == header
    assert table.column("max_cg_wait_iters").to_pylist() == [int(r["max_cg_wait_iters"]) for r in rows]
