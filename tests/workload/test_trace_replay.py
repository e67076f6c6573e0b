"""Replaying traces end to end: the two shipped production traces (the presets), the result's
trace block and trace health flags, and the event-proportional engine equal to the step-by-step
one on a trace of each format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point

ROOT = Path(__file__).resolve().parents[2]


def run(overrides: list[str], **kw) -> dict:
    return run_point(load_config(overrides), overrides, **kw)


@pytest.mark.e2e
@pytest.mark.parametrize("preset", ["azure_conv", "mooncake_conv"])
@pytest.mark.parametrize("model", ["transformer", "hybrid"])
def test_shipped_traces_replay_end_to_end(preset, model):
    doc = run([f"workload={preset}", f"model={model}"])
    m, trace = doc["metrics"], doc["trace"]
    rows = {"azure_conv": 19_366, "mooncake_conv": 12_031}[preset]
    assert trace["rows"] == trace["requests"] == m["requests"]["total"] == rows
    assert m["outcome"] == "completed" and m["requests"]["completed"] == rows  # the preset's limits fit every request
    assert doc["warnings"] == []


@pytest.mark.parametrize("preset, fmt", [("azure_conv", "azure"), ("mooncake_conv", "mooncake")])
def test_a_window_of_each_preset_replays(preset, fmt):
    doc = run([f"workload={preset}", "workload.window={first: 0, last: 199}", "workload.time_scale=0.5"])
    assert doc["trace"]["format"] == fmt and doc["trace"]["requests"] == 200
    assert doc["metrics"]["requests"]["completed"] == 200
    if fmt == "mooncake":
        assert doc["trace"]["prefix_blocks"]["distinct_blocks"] > 0


@pytest.mark.e2e
def test_azure_at_the_default_limits_says_which_key_to_raise():
    doc = run(["workload=azure_conv", "engine=default", "workload.window={end_s: 300}"])
    codes = {w["code"]: w for w in doc["warnings"]}
    beyond = codes["trace_beyond_max_sequence_length"]
    assert beyond["prompts"] == doc["metrics"]["requests"]["failed_by_reason"]["prompt_exceeds_max_sequence_length"]
    assert f"engine.max_sequence_length={beyond['fits']} fits every request" in beyond["message"]
    assert "raise engine.max_sequence_length to" in codes["failed_requests"]["message"]


def test_millisecond_arrivals_in_seconds_are_flagged(tmp_path):
    lines = "".join(f'{{"arrival_s": {i * 180}, "prompt_tokens": 64, "output_tokens": 8}}\n' for i in range(20))
    (tmp_path / "ms.jsonl").write_text(lines)
    doc = run(["workload=trace", f"workload.trace={tmp_path / 'ms.jsonl'}"])
    assert any(w["code"] == "trace_arrival_units" and "workload.trace_arrival_unit=ms" in w["message"]
               for w in doc["warnings"])
    fixed = run(["workload=trace", f"workload.trace={tmp_path / 'ms.jsonl'}", "workload.trace_arrival_unit=ms"])
    assert not fixed["warnings"] and fixed["metrics"]["makespan_s"] < 10
    closed = run(["workload=trace", f"workload.trace={tmp_path / 'ms.jsonl'}", "workload.arrival.process=closed_loop",
                  "workload.arrival.concurrency=4"])
    assert not closed["warnings"]  # a closed loop ignores the arrival times


@pytest.mark.e2e
def test_overload_is_flagged():
    # on one A100 the first 5 minutes of Mooncake's conversation trace take ~18 minutes to serve
    doc = run(["workload=mooncake_conv", "engine.tp_size=1", "engine.kv_blocks=1920", "workload.window={end_s: 300}",
               "hardware=a100"])
    assert any(w["code"] == "overload" for w in doc["warnings"])


@pytest.mark.e2e
def test_cli_prints_the_note_and_refuses_a_bad_trace_in_one_line(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "cgbench", "run", "workload=azure_conv",
                         "workload.window={first: 0, last: 9}", "--out", str(tmp_path / "r.json")],
                        capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "note: trace azure_conv_2023.csv.gz: azure format (workload.trace_format); arrivals: wall-clock" in ok.stderr
    bad = subprocess.run([sys.executable, "-m", "cgbench", "run", "workload=trace",
                          f"workload.trace={ROOT / 'tests/inputs/traces/azure_bad_tokens.csv'}",
                          "--out", str(tmp_path / "bad.json")], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "azure_bad_tokens.csv:2: ContextTokens:" in bad.stderr
    assert not (tmp_path / "bad.json").exists()


def _columns_trace(tmp_path: Path) -> str:
    rows = "".join(f"{i * 37},{100 + (i * 211) % 900},{1 + (i * 7) % 60}\n" for i in range(60))
    (tmp_path / "mapped.csv").write_text("ts,in,out\n" + rows)
    return str(tmp_path / "mapped.csv")


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["cgbench", "azure", "mooncake", "columns", "mooncake_tight", "mooncake_defer"])
def test_fast_engine_matches_the_step_by_step_engine_on_each_format(tmp_path, case):
    overrides = {
        "cgbench": ["workload=trace", "engine.kv_blocks=8"],  # a pause and an eviction
        "azure": ["workload=azure_conv", "workload.window={first: 0, last: 119}"],
        "mooncake": ["workload=mooncake_conv", "workload.window={first: 0, last: 59}"],
        "columns": ["workload=trace", f"workload.trace={_columns_trace(tmp_path)}",
                    "workload.trace_columns={arrival: ts, prompt: in, output: out}", "workload.trace_arrival_unit=ms"],
        "mooncake_tight": ["workload=mooncake_conv", "workload.window={first: 0, last: 29}", "engine.kv_blocks=700"],
        "mooncake_defer": ["workload=mooncake_conv", "workload.window={first: 0, last: 59}", "policy=defer",
                           "cg=sparse"],  # 380 deferrals
    }[case]
    docs = [run([*overrides, f"engine.oracle={oracle}"], trace=True, requests=True) for oracle in (False, True)]
    fast, oracle = docs
    assert fast["metrics"]["requests"]["total"] > 0
    for key in ("metrics", "steps", "requests", "trace", "warnings"):
        assert fast[key] == oracle[key], key
