"""`cgbench run`, `grid`, `--version`, `--help` through Typer's CliRunner."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cgbench import __version__
from cgbench.cli.app import app

runner = CliRunner()
SMALL = ["workload.num_requests=40"]


def test_version_and_help():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and __version__ in r.stdout
    for cmd in ([], ["run"], ["grid"]):
        r = runner.invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0 and "Usage" in r.stdout


@pytest.mark.slow
def test_run_writes_result_json(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "model=hybrid", "cg=dense", *SMALL, "--out", str(out), "--trace", "--requests"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 2 and doc["overrides"] == ["model=hybrid", "cg=dense", *SMALL]
    assert doc["config"]["cg"]["sizes_per_octave"] == 3 and doc["environment"]["backend"] == "sim"
    m = doc["metrics"]
    assert m["steps"] == len(doc["steps"]) == m["graphed_steps"] + m["eager_steps"]
    assert len(doc["requests"]) == 40 and m["requests"]["completed"] == 40
    assert sum(g["hits"] for g in doc["graph_usage"]) == m["graphed_steps"]
    assert "eager-step fraction" in r.stdout


def test_run_default_path_and_determinism(tmp_path):
    docs = []
    for _ in range(2):
        r = runner.invoke(app, ["run", *SMALL, "out_dir=" + str(tmp_path / "res")])
        assert r.exit_code == 0, r.output
    files = sorted((tmp_path / "res" / "runs").glob("*.json"))
    assert len(files) == 2
    docs = [json.loads(f.read_text()) for f in files]
    assert json.dumps(docs[0]["metrics"]) == json.dumps(docs[1]["metrics"])
    assert json.dumps(docs[0]["graph_usage"]) == json.dumps(docs[1]["graph_usage"])


@pytest.mark.slow
@pytest.mark.parametrize("override", ["cg.num_cuda_graphs=abc", "cg.kind=nope", "engine.max_tokens=-1"])
def test_bad_override_exit_2_one_line(override, tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", override, "--out", str(out)])
    assert r.exit_code == 2
    assert "Traceback" not in r.output and not out.exists()
    assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) <= 2
    r = runner.invoke(app, ["grid", override])
    assert r.exit_code == 2


def test_grid_json_is_megatron_list_b():
    r = runner.invoke(app, ["grid", "model=hybrid", "cg=megatron", "--format", "json"])
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert len(doc["graphs"]) == 101 and doc["graphs"][0] == [16384, 256, 0]
    assert doc["token_counts"][:3] == [16384, 8192, 4096]


def test_grid_table():
    r = runner.invoke(app, ["grid", "model=hybrid", "cg=sparse"])
    assert r.exit_code == 0 and "decode-only" in r.stdout


@pytest.mark.slow
def test_sim_path_never_imports_torch():
    code = ("import sys; from cgbench.config.compose import load_config; from cgbench.pipeline import run_point; "
            "from cgbench import cli; run_point(load_config(['workload.num_requests=20']), []); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["default", "chat", "rag", "decode_heavy", "bimodal", "burst", "small", "trace"])
def test_every_workload_preset_runs_with_time_metrics(preset, tmp_path):
    out = tmp_path / "r.json"
    size = [] if preset == "trace" else ["workload.num_requests=60"]  # a trace is replayed whole
    r = runner.invoke(app, ["run", "model=hybrid", f"workload={preset}", *size, "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads(out.read_text())["metrics"]
    assert m["outcome"] == "completed" and m["requests"]["completed"] > 0
    assert m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["count"] > 0 and m["makespan_s"] > 0
    assert "TTFT ms" in r.stdout
