"""Exports with a schema (cgbench.results.export_schema): every column's type comes from the metric
registry or its table, never from the values, so the exports of a one-rank, a data-parallel and an
expert-parallel run and of two sweeps with other axes read as one pyarrow dataset."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from cgbench.analysis.sweep.export import export_sweep
from cgbench.analysis.sweep.run import PointOutputs, plan_sweep, run_sweep
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.export import export_run, metrics_table, request_table, run_tables, step_table
from cgbench.results.export_parquet import cast_cell
from cgbench.results.export_schema import KEYED_KEYS, TYPES, column_type, metric_columns, metric_type
from cgbench.results.names import METRICS, flatten

ONE = ["workload=small"]
DP = ["workload=small", "engine.dp_size=2"]
EP = ["workload=small", "model=qwen3_30b_a3b", "engine.ep_size=2"]
OTHERS = [["workload=small", "engine.num_speculative_tokens=2"], ["workload=small", "engine.prefix_caching=true"],
          ["workload=chat", "workload.num_requests=50", "engine=kv_tight"]]


@pytest.mark.parametrize(("column", "kind"), [
    ("ttft_ms.count", "int64"), ("ttft_ms.p25", "float64"), ("ttft_steps.p99", "float64"),
    ("dp.rank_steps", "list<int64>"), ("dp.rank_makespan_s", "list<float64>"),
    ("ep.rank_eager_step_fraction", "list<float64>"), ("ep.load_imbalance", "float64"),
    ("max_cg_wait_request", "int64"), ("gating_active", "bool"), ("outcome", "string"),
    ("eager_steps_by_reason.shape", "int64"), ("requests.completed", "int64"), ("makespan_s", "float64"),
    ("peak_output_throughput_tok_s", "float64"), ("max_concurrent_requests", "int64"),
])
def test_a_columns_type_is_what_the_registry_says(column, kind):
    assert metric_type(column) == kind


def test_every_column_has_one_of_the_types_and_the_columns_never_depend_on_a_run():
    cols = metric_columns()
    assert cols == metric_columns({}) and len(cols) == len(set(cols))
    assert all(metric_type(c) in TYPES for c in cols)
    for m in METRICS:
        if m.keyed:
            assert m.name in KEYED_KEYS, f"{m.name}: its keys must be known so every export has their columns"
    assert column_type("steps", "rank") == "int64" and column_type("metrics", "model") == "string"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {" ".join(c): run_point(load_config(c), c, trace=True, requests=True) for c in [ONE, DP, EP, *OTHERS]}


def test_every_value_of_every_run_fits_its_columns_type(docs):
    """The schema is checked against values: a one-rank, DP, EP, speculative, prefix-caching and a
    KV-pressure run (evictions, failures); the keyed keys they hold are all known ones."""
    for name, doc in docs.items():
        for table in run_tables(doc, "x.json"):
            for row in table.rows:
                for c in table.columns:
                    cast_cell(row.get(c), column_type(table.name, c), f"{name}: {table.name}.{c}")
        for key, _ in flatten(doc["metrics"]):
            head = key.rpartition(".")[0]
            if head in KEYED_KEYS:
                assert key.rpartition(".")[2] in KEYED_KEYS[head], (name, key)


def test_null_where_a_value_does_not_exist_and_zero_for_an_uncounted_key(docs):
    [row] = metrics_table([({"point": 1, "status": "done", "file": "x"}, docs[" ".join(ONE)]["metrics"])]).rows
    assert row["dp.rank_steps"] is None and row["ep.ep_size"] is None  # neither runs here
    assert row["ttft_ms.p25"] is None  # metrics.percentiles did not ask for it
    assert row["requests.failed_by_reason.kv_block_overflow"] == 0  # counted: none
    [failed] = metrics_table([({"point": 1, "status": "failed", "file": "x"}, None)]).rows
    assert all(v is None for k, v in failed.items() if k not in ("point", "status", "file"))


def test_per_request_tpot_is_the_tpot_metrics_values(docs):
    doc = docs[" ".join(OTHERS[2])]
    tpots = sorted(r["tpot_ms"] for r in request_table(doc["requests"]).rows if r["tpot_ms"] is not None)
    summary = doc["metrics"]["tpot_ms"]
    assert len(tpots) == summary["count"]
    assert tpots[0] == pytest.approx(summary["min"], abs=1e-5) and tpots[-1] == pytest.approx(summary["max"], abs=1e-5)
    assert sum(tpots) / len(tpots) == pytest.approx(summary["mean"], abs=1e-5)
    assert step_table(doc["steps"]).rows[0]["rank"] is None


def _sweep(tmp: Path, overrides: list[str]) -> Path:
    plan = plan_sweep(overrides, out_dir=tmp)
    outcome = run_sweep(plan, outputs=PointOutputs(records=True))
    assert all(r.status == "done" for r in outcome.results)
    return tmp


@pytest.mark.slow
def test_exports_of_runs_and_sweeps_are_one_pyarrow_dataset(docs, tmp_path):
    pa = pytest.importorskip("pyarrow")
    ds = pytest.importorskip("pyarrow.dataset")
    pq = pytest.importorskip("pyarrow.parquet")
    folders = []
    for i, c in enumerate([ONE, DP, EP]):
        folders.append(tmp_path / f"run{i}")
        export_run(docs[" ".join(c)], f"run{i}.json", folders[-1], formats=("csv", "parquet"))
    for i, axes in enumerate([["workload=small", "policy=budget,defer"],
                              ["workload=small", "engine.dp_size=1,2", "seed=0,1"]]):
        folders.append(tmp_path / f"sweep{i}-export")
        export_sweep(_sweep(tmp_path / f"sweep{i}", axes), folders[-1], formats=("csv", "parquet"))
    for table in ("metrics", "requests", "steps"):
        files = sorted(str(p) for f in folders for p in f.rglob(f"{table}.parquet"))
        assert len(files) >= 5
        schemas = [pq.read_schema(f) for f in files]
        unified = pa.unify_schemas(schemas)  # raises if one column has two types
        for s in schemas:
            for field in s:
                assert unified.field(field.name).type == field.type, (table, field.name)
        whole = ds.dataset(files, schema=unified, format="parquet").to_table()
        assert whole.num_rows == sum(pq.read_metadata(f).num_rows for f in files)
        if table != "metrics":  # no axes: the very same schema everywhere
            assert all(s.remove_metadata().equals(schemas[0].remove_metadata()) for s in schemas)
            pa.concat_tables([pq.read_table(f) for f in files])  # strict: no promotion needed
    metrics = ds.dataset(sorted(str(p) for f in folders for p in f.glob("metrics.parquet")),
                         schema=pa.unify_schemas([pq.read_schema(p) for f in folders
                                                  for p in f.glob("metrics.parquet")])).to_table()
    ranks = metrics.column("dp.rank_steps").to_pylist()
    assert any(r is None for r in ranks) and any(isinstance(r, list) and len(r) == 2 for r in ranks)
    # columns.csv names the type and unit of every column, as the Parquet field metadata does
    with open(folders[0] / "columns.csv", newline="") as f:
        described = {(r["file"], r["column"]): r for r in csv.DictReader(f)}
    schema = pq.read_schema(folders[0] / "metrics.parquet")
    for field in schema:
        row = described[("metrics.csv", field.name)]
        assert field.metadata[b"type"].decode() == row["type"] and field.metadata[b"unit"].decode() == row["unit"]
    assert schema.metadata[b"cgbench_table"] == b"metrics"
