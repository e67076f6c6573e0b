"""Every answer the CLI gives can be trusted: honest labels, file names, formats, health flags, output
at 80 columns. What an accepted command says about itself; the command lines that must be refused are
the bad-input corpus (tests/inputs/)."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.schema import POLICIES

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SMALL = "workload.num_requests=8"
STATE = ROOT / "tests" / "states" / "11_2_round1.json"


def _files(d: Path) -> set[Path]:
    return {p for p in d.rglob("*") if p.is_file()} if d.exists() else set()


# ---------------------------------------------------------------------------------------------
# Accepted commands: labels, file names, formats, conventions


@pytest.fixture(scope="module")
def dense_run(tmp_path_factory):
    """One small run with cg=dense and chunked prefill, default file name."""
    d = tmp_path_factory.mktemp("dense")
    r = runner.invoke(app, ["run", "cg=dense", "engine=chunked", SMALL, f"out_dir={d}"])
    assert r.exit_code == 0, r.output
    (path,) = (d / "runs").glob("*.json")
    return r, path, json.loads(path.read_text())


def test_labels_use_the_chosen_options(dense_run):
    r, path, doc = dense_run
    header = r.stdout.splitlines()[0]
    assert "cg=dense" in header and "chunked=on" in header and "workload=default+num_requests" in header
    assert path.name.endswith("_hybrid_dense_megatron_default+num-requests_chunked.json")
    assert doc["labels"]["cg"] == "dense" and doc["labels"]["engine"] == "chunked"
    assert doc["labels"]["workload"] == "default+num_requests" and doc["labels"]["chunked"] is True


def test_result_file_mode_follows_the_umask(dense_run):
    _, path, _ = dense_run
    old = os.umask(0o022)
    os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~old


def test_a_trace_key_says_it_overrides_the_workload(tmp_path):
    trace = ROOT / "examples" / "traces" / "small.csv"
    r = runner.invoke(app, ["run", f"workload.trace={trace}", f"out_dir={tmp_path}", "--format", "json"])
    assert r.exit_code == 0, r.output
    labels = json.loads(r.stdout)["labels"]
    assert labels["workload"] == "default+trace" and labels["trace"] == "small.csv"
    (path,) = (tmp_path / "runs").glob("*.json")
    assert path.name.endswith("_hybrid_megatron_megatron_default+trace_small.json")


def test_same_config_twice_never_collides(tmp_path):
    for _ in range(2):
        assert runner.invoke(app, ["run", SMALL, f"out_dir={tmp_path}", "--format", "json"]).exit_code == 0
    assert len(list((tmp_path / "runs").glob("*.json"))) == 2


@pytest.mark.slow
def test_formats_carry_the_same_numbers(tmp_path):
    base = ["run", SMALL, "policy=budget", f"out_dir={tmp_path}"]
    js = json.loads(runner.invoke(app, [*base, "--format", "json"]).stdout)
    legacy = json.loads(runner.invoke(app, [*base, "--json"]).stdout)
    assert js["metrics"] == legacy["metrics"] and js["warnings"] == [] and Path(js["result"]).exists()
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, [*base, "--format", "csv"]).stdout)))
    assert len(rows) == 1 and int(rows[0]["steps"]) == js["metrics"]["steps"]
    assert float(rows[0]["eager_step_fraction"]) == js["metrics"]["eager_step_fraction"]  # raw, not a percent
    assert rows[0]["labels.policy"] == "budget"
    md = runner.invoke(app, [*base, "--format", "markdown"]).stdout
    assert "| metric | value |" in md and f"| steps (graphed / eager) | {js['metrics']['steps']} (" in md


def test_table_numbers_integers_and_percentages(dense_run):
    r, _, doc = dense_run
    m = doc["metrics"]
    line = next(x for x in r.stdout.splitlines() if "TTFT steps p50 / p99 / max" in x)
    expected = " / ".join(str(int(m["ttft_steps"][k])) if float(m["ttft_steps"][k]).is_integer()
                          else f"{m['ttft_steps'][k]:,.2f}" for k in ("p50", "p99", "max"))
    assert line.rstrip().endswith(expected)
    frac = next(x for x in r.stdout.splitlines() if "padded-token fraction" in x)
    assert frac.rstrip().endswith(f"{100 * m['padded_token_fraction']:.2f}%")


@pytest.mark.slow
def test_cfg_job_and_all_print_the_config_and_write_nothing(tmp_path):
    r = runner.invoke(app, ["run", "cg=dense", f"out_dir={tmp_path}", "--cfg", "job"])
    assert r.exit_code == 0 and "sizes_per_octave: 3" in r.stdout and "hydra:" not in r.stdout
    r = runner.invoke(app, ["run", "--cfg", "all", "--resolve"])
    assert r.exit_code == 0 and "hydra:" in r.stdout and "model:" in r.stdout
    assert _files(tmp_path) == set()


def test_help_short_flag_groups_and_completion():
    r = runner.invoke(app, ["run", "-h"])
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    for needle in ("Config groups", "megatron_no_all_prefills", "tiny_hybrid", "wait_timeout", "--config-dir",
                   "--cfg", "--multirun", "--allow-oversize"):
        assert needle in text, needle
    assert "--install-completion" in runner.invoke(app, ["--help"]).stdout


@pytest.mark.slow
def test_own_config_dir_adds_an_option_without_forking(tmp_path, monkeypatch):
    own = tmp_path / "myconf"
    (own / "model").mkdir(parents=True)
    (own / "model" / "my70b.yaml").write_text(
        "name: my70b\nkind: transformer\nlayer_pattern: '*-'\npattern_repeat: 80\nhidden_size: 8192\n"
        "num_attention_heads: 64\nnum_kv_heads: 8\nhead_dim: 128\nffn_hidden_size: 28672\nvocab_size: 128256\n"
        "gated_mlp: true\ndtype_bytes: 2\n")
    r = runner.invoke(app, ["run", "model=my70b", "--config-dir", str(own), "--cfg", "job"])
    assert r.exit_code == 0 and "name: my70b" in r.stdout
    # the environment variable adds the folder too (the shipped tree stays), and the guard sees 70B weights
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(own))
    r = runner.invoke(app, ["run", "model=my70b", "engine.tp_size=4", "hardware=h200", SMALL, f"out_dir={tmp_path}"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["run", "model=my70b", SMALL, f"out_dir={tmp_path / 'x'}"])
    assert r.exit_code == 2 and "hardware.memory_gb" in r.stderr
    r = runner.invoke(app, ["run", "model=my70b", SMALL, f"out_dir={tmp_path / 'y'}", "--allow-oversize"])
    assert r.exit_code == 0 and "memory" in json.loads(next((tmp_path / "y" / "runs").glob("*.json")).read_text(
    ))["warnings"][0]["code"]


def test_schedule_markdown_and_csv():
    r = runner.invoke(app, ["schedule", str(STATE), "--format", "csv"])
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert r.exit_code == 0 and rows[0][0] == "step" and len(rows[0]) == 1 + len(POLICIES)
    assert "[" not in r.stdout.replace("[T", "")  # no Rich markup leaks
    r = runner.invoke(app, ["schedule", str(STATE), "--format", "markdown", "--policy", "megatron"])
    assert r.exit_code == 0 and "| step | megatron (gating) |" in r.stdout


@pytest.mark.slow
def test_grid_csv_and_markdown_list_the_stored_order():
    js = json.loads(runner.invoke(app, ["grid", "cg=sparse", "--format", "json"]).stdout)
    rows = list(csv.reader(io.StringIO(runner.invoke(app, ["grid", "cg=sparse", "--format", "csv"]).stdout)))
    assert rows[0] == ["order", "T", "P", "D"]
    assert [[int(x) for x in r[1:]] for r in rows[1:]] == js["graphs"]
    assert runner.invoke(app, ["grid", "cg=sparse", "-f", "markdown"]).stdout.startswith("| order | T | P | D |")


# ---------------------------------------------------------------------------------------------
# Health flags


@pytest.mark.slow
def test_serialised_gating_is_flagged_with_its_schedule_state(tmp_path):
    """defer + a sparse grid + chunked prefill serialises a chat workload: the run completes, every
    request is served one at a time. The run says so, names the state that shows it, and compares
    throughput with the no-gating policy."""
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "policy=defer", "cg=sparse", "engine=chunked", "workload=chat",
                            "workload.num_requests=120", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    codes = [w["code"] for w in doc["warnings"]]
    assert doc["metrics"]["outcome"] == "completed"
    assert {"long_graph_wait", "heavy_deferral", "overload", "throughput_collapse"} <= set(codes)
    # the state belongs to the first gating flag: the longest wait, saved when it reached its threshold
    flag = next(w for w in doc["warnings"] if "state_file" in w)
    assert flag["code"] == "long_graph_wait" and [w for w in doc["warnings"] if "state_file" in w] == [flag]
    state = Path(flag["state_file"])
    assert state.exists() and flag["explain"] == f"cgbench schedule {state}"
    assert "warning: heavy_deferral" in r.stdout and "explain: cgbench schedule" in r.stderr
    s = runner.invoke(app, ["schedule", str(state), "--policy", "defer", "--format", "json"])
    decision = json.loads(s.stdout)
    assert s.exit_code == 0 and decision["deferred"] is not None  # the replayed round defers again


def test_a_healthy_run_says_ok(dense_run):
    r, _, doc = dense_run
    assert doc["warnings"] == [] and any(line.split() == ["health", "ok"] for line in r.stdout.splitlines())


# ---------------------------------------------------------------------------------------------
# CI logs: piped stdout at 80 columns


@pytest.mark.slow  # starts a cgbench process (piped stdout)
def test_piped_output_at_80_columns_prints_every_header_and_value_whole(tmp_path):
    env = {**os.environ, "COLUMNS": "80", "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "cgbench.cli.app", "run", "model=transformer", "engine.kv_blocks=600",
                        "workload=chat", "workload.num_requests=60", "--out", str(out), "--verbose"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    doc = json.loads(out.read_text())
    from cgbench.cli.render import graph_usage_rows, run_rows, run_title

    lines = p.stdout.splitlines()
    assert lines[0] == run_title(doc)
    for label, value in run_rows(doc):
        assert any(label in line and line.rstrip().endswith(value) for line in lines), (label, value)
    cols, rows = graph_usage_rows(doc)
    assert any(all(c in line for c in cols) for line in lines)
    for row in rows:
        assert any(all(c in line for c in row if c) for line in lines), row
    assert "…" not in p.stdout


def test_progress_shows_only_on_a_terminal(monkeypatch):
    import time

    from rich.console import Console

    import cgbench.cli.app as cli

    for terminal in (True, False):
        buf = io.StringIO()
        monkeypatch.setattr(cli, "err", Console(file=buf, force_terminal=terminal, width=80))
        with cli.progress("running hybrid_megatron", after_s=0.0):
            deadline = time.monotonic() + 10
            while terminal and "running hybrid_megatron" not in buf.getvalue() and time.monotonic() < deadline:
                time.sleep(0.05)
        assert ("running hybrid_megatron" in buf.getvalue()) is terminal


@pytest.mark.slow  # starts two cgbench processes (piped stdout)
def test_piped_sweep_and_compare_at_80_columns_print_every_header_and_value_whole(tmp_path):
    env = {**os.environ, "COLUMNS": "80", "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
    out = tmp_path / "s"
    sweep = subprocess.run([sys.executable, "-m", "cgbench.cli.app", "sweep", "model=transformer,hybrid",
                            "policy=budget,megatron", "workload=chat", "workload.num_requests=30", "--out", str(out)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert "…" not in sweep.stdout
    from cgbench.analysis.sweep.run import load_index
    from cgbench.cli.sweep import TABLE_METRICS, _header
    from cgbench.results.formatting import metric_value
    from cgbench.results.names import lookup

    for name in TABLE_METRICS:  # each header line appears whole
        for part in _header(name).split("\n"):
            assert part in sweep.stdout, part
    index = load_index(out)
    for p in index["points"]:
        doc = json.loads((out / p["file"]).read_text())
        for name in TABLE_METRICS:
            value = metric_value(name, lookup(doc["metrics"], name), 0 if name.endswith(("_ms.p99", "_tok_s")) else 2)
            assert value in sweep.stdout, (name, value)
    comp = subprocess.run([sys.executable, "-m", "cgbench.cli.app", "compare", str(out), str(out), "-v"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert comp.returncode == 0, comp.stderr
    assert "…" not in comp.stdout + comp.stderr and "4 points" in comp.stdout + comp.stderr
