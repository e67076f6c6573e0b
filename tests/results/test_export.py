"""Exports (``cgbench export``, ``run --export``, ``sweep --export``): the per-request file replays as a
trace with identical requests and metrics, the tables carry the registry's columns and units, and an
export never replaces a file unasked."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.results.export import REQUEST_COLUMNS, STEP_COLUMNS, metric_columns
from cgbench.results.names import METRICS, SUMMARY_FIELDS, metric
from cgbench.workload.trace import FIELDS

runner = CliRunner()
# gating defers 14 requests here (chunked prefill), so the replay has waits, snaps and chunks to match
SETUP = ["model=hybrid", "policy=defer", "engine.chunked_prefill=true"]


def _ok(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return r


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["default", "chat"])
@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_the_request_export_replays_as_a_trace_with_identical_requests_and_metrics(tmp_path, workload, suffix):
    # Equal because the arrivals are: both workloads are open-loop (arrivals do not depend on
    # completions), default sends every request at t=0, and chat's Poisson times are written at full
    # precision (drawn again from the run's seed: the result's records round them to the nanosecond,
    # which moves the latencies in their sixth decimal). The trace gives each request its id back
    # (arrival order) and output_tokens is the clamped length, which the clamp leaves as it is.
    original, replay, exp = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "exp"
    _ok(["run", *SETUP, f"workload={workload}", "workload.num_requests=300", "--out", str(original),
         "--export", str(exp)])
    header = (exp / "requests.csv").read_text().splitlines()[0].split(",")
    assert tuple(header[:3]) == FIELDS
    _ok(["run", *SETUP, "workload=trace", f"workload.trace={exp / f'requests.{suffix}'}", "--requests",
         "--out", str(replay)])
    a, b = json.loads(original.read_text()), json.loads(replay.read_text())
    assert a["metrics"]["deferred_requests"] > 0
    assert b["requests"] == a["requests"] and b["metrics"] == a["metrics"]
    assert b["deferrals"] == a["deferrals"]


@pytest.mark.slow
def test_run_export_files_and_units(tmp_path):
    exp = tmp_path / "exp"
    _ok(["run", *SETUP, "workload.num_requests=40", "--out", str(tmp_path / "r.json"), "--export", str(exp)])
    doc = json.loads((tmp_path / "r.json").read_text())  # --export records the steps and requests
    assert len(doc["steps"]) == doc["metrics"]["steps"] and len(doc["requests"]) == 40
    names = sorted(p.name for p in exp.iterdir())
    assert names == ["columns.csv", "metrics.csv", "metrics.jsonl", "requests.csv", "requests.jsonl", "steps.csv",
                     "steps.jsonl"]
    reqs = _rows(exp / "requests.csv")
    assert [int(r["id"]) for r in reqs] == list(range(40))
    for r, rec in zip(reqs, doc["requests"], strict=True):
        assert int(r["ttft_steps"]) == rec["first_token_step"] - rec["arrival_step"] + 1
        assert float(r["ttft_ms"]) == pytest.approx((rec["first_token_s"] - rec["arrival_s"]) * 1000)
    jl = [json.loads(line) for line in (exp / "requests.jsonl").read_text().splitlines()]
    assert [r["prompt_tokens"] for r in jl] == [r["prompt_tokens"] for r in doc["requests"]]
    steps = _rows(exp / "steps.csv")
    assert len(steps) == doc["metrics"]["steps"]
    assert sum(int(s["admitted_tokens"]) for s in steps) == sum(r["prompt_tokens"] for r in doc["requests"])
    assert sum(1 for s in steps if s["eager_reason"]) == doc["metrics"]["eager_steps"]
    assert [json.loads(line) for line in (exp / "steps.jsonl").read_text().splitlines()] == doc["steps"]
    # one metrics row; every registry metric a column, its value the document's
    (row,) = _rows(exp / "metrics.csv")
    assert float(row["ttft_ms.p99"]) == doc["metrics"]["ttft_ms"]["p99"]
    assert int(row["deferred_requests"]) == doc["metrics"]["deferred_requests"]
    for m in METRICS:
        if m.summary:
            assert all(f"{m.name}.{f}" in row for f in SUMMARY_FIELDS)
        elif not m.keyed:
            assert m.name in row
    units = {(r["file"], r["column"]): r["unit"] for r in _rows(exp / "columns.csv")}
    assert units[("metrics.csv", "ttft_ms.p99")] == metric("ttft_ms.p99").unit == "ms"
    assert units[("requests.csv", "arrival_s")] == "s"
    assert {c for f, c in units if f == "requests.csv"} == {c for c, _, _ in REQUEST_COLUMNS}
    assert {c for f, c in units if f == "steps.csv"} == {c for c, _, _ in STEP_COLUMNS}


def test_keyed_metrics_get_a_column_per_key_any_point_holds():
    cols = metric_columns([{"eager_steps_by_reason": {"shape": 3}}, {"eager_steps_by_reason": {"pad_guard": 1}}])
    assert "eager_steps_by_reason.pad_guard" in cols and "eager_steps_by_reason.shape" in cols


@pytest.mark.slow
def test_an_export_replaces_nothing_unasked_and_bad_input_is_one_line(tmp_path):
    result, exp = tmp_path / "r.json", tmp_path / "exp"
    _ok(["run", "workload.num_requests=20", "--out", str(result), "--requests"])
    _ok(["export", str(result), "-o", str(exp)])
    assert not (exp / "steps.csv").exists()  # the result has no per-step records
    before = (exp / "requests.csv").read_text()
    assert "exists" in _refused(["export", str(result), "-o", str(exp)])
    assert "exists" in _refused(["run", "workload.num_requests=20", "--out", str(tmp_path / "new.json"),
                                 "--export", str(exp)])
    assert not (tmp_path / "new.json").exists()  # refused before the run
    _ok(["export", str(result), "-o", str(exp), "--force"])
    assert (exp / "requests.csv").read_text() == before
    assert "no such file" in _refused(["export", str(tmp_path / "nothing.json"), "-o", str(tmp_path / "x")])
    (tmp_path / "bad.json").write_text("{}")
    assert "not a cgbench result" in _refused(["export", str(tmp_path / "bad.json"), "-o", str(tmp_path / "x")])
    (tmp_path / "folder").mkdir()
    assert "not a sweep directory" in _refused(["export", str(tmp_path / "folder"), "-o", str(tmp_path / "x")])


@pytest.mark.slow
def test_sweep_export_is_a_flat_table_of_every_point(tmp_path):
    sweep_dir, exp = tmp_path / "s", tmp_path / "exp"
    _ok(["sweep", "model=hybrid,transformer", "policy=budget,defer", "engine.chunked_prefill=true",
         "workload.num_requests=40", "--out", str(sweep_dir), "--export", str(exp)])
    index = json.loads((sweep_dir / "sweep.json").read_text())
    rows = _rows(exp / "metrics.csv")
    assert [(r["model"], r["policy"]) for r in rows] == [(p["params"]["model"], p["params"]["policy"])
                                                         for p in index["points"]]
    for r, p in zip(rows, index["points"], strict=True):
        doc = json.loads((sweep_dir / p["file"]).read_text())
        assert int(r["steps"]) == doc["metrics"]["steps"]
        assert float(r["e2e_ms.p50"]) == doc["metrics"]["e2e_ms"]["p50"]
        point = exp / "points" / p["file"].removesuffix(".json")
        assert len(_rows(point / "requests.csv")) == 40 and len(_rows(point / "steps.csv")) == doc["metrics"]["steps"]
    # the same from the folder afterwards, into another folder
    _ok(["export", str(sweep_dir), "-o", str(tmp_path / "again")])
    assert (tmp_path / "again" / "metrics.csv").read_text() == (exp / "metrics.csv").read_text()
    assert "exists" in _refused(["sweep", "model=hybrid", "workload.num_requests=10", "--out",
                                 str(tmp_path / "s2"), "--export", str(exp)])
