"""Every answer the CLI gives can be trusted: strict configs, honest labels, guards, formats.

The first part is a corpus of command lines that must be refused: exit 2, one line on stderr that
names the key (and the closest known key, or the numbers), no traceback, no file written. The rest
checks what an accepted command says about itself."""

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

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
SMALL = "workload.num_requests=8"
STATE = ROOT / "tests" / "states" / "11_2_round1.json"
SEVENTY_B = ("model=transformer model.hidden_size=8192 model.pattern_repeat=80 model.ffn_hidden_size=28672 "
             "model.num_attention_heads=64")


def _files(d: Path) -> set[Path]:
    return {p for p in d.rglob("*") if p.is_file()} if d.exists() else set()


# (command line, needles that must all appear in the one error line)
REFUSED: list[tuple[str, tuple[str, ...]]] = [
    # unknown keys, with and without '+', with the closest known key
    ("run +engine.max_tokkens=5", ("engine.max_tokkens: unknown key", "did you mean engine.max_tokens")),
    ("run engine.max_tokkens=5", ("engine.max_tokkens: unknown key", "did you mean engine.max_tokens")),
    ("run +workload.num_request=5", ("workload.num_request", "did you mean workload.num_requests")),
    ("run +brand_new=1", ("brand_new: unknown key",)),
    ("run model/x=y", ("model/x", "not a config group")),
    ("grid +cg.num_cuda_graph=4", ("cg.num_cuda_graph", "did you mean cg.num_cuda_graphs")),
    ("sweep +engine.max_tokkens=1,2 --dry-run", ("engine.max_tokkens", "did you mean engine.max_tokens")),
    # keys the chosen options never read
    ("run cg=megatron cg.graphs=[[64,0,64]]", ("cg.graphs", "cg.kind=megatron", "cg=explicit")),
    ("grid cg=dense cg.graphs=[[64,0,64]]", ("cg.graphs", "cg=explicit")),
    ("run cg=vllm cg.num_cuda_graphs=8", ("cg.num_cuda_graphs", "cg.kind=vllm")),
    ("run cg.capture_sizes=[1,2]", ("cg.capture_sizes", "vllm")),
    ("run cg=vllm cg.padding=false", ("cg.padding", "sglang or trtllm")),
    ("run cg.cuda_graph_max_tokens=256", ("cg.cuda_graph_max_tokens", "all_prefills=true")),
    ("run workload=trace workload.num_requests=10", ("workload.num_requests", "trace is the workload")),
    ("run workload=trace workload.prompt_len.dist=fixed", ("workload.prompt_len", "trace")),
    ("run workload.time_scale=2", ("workload.time_scale", "no workload.trace")),
    ("run workload.arrival.rate=5", ("workload.arrival.rate", "all_at_once")),
    ("run workload=chat workload.arrival.burstiness=2", ("workload.arrival.burstiness", "gamma")),
    ("run workload.arrival.concurrency=4", ("workload.arrival.concurrency", "closed_loop")),
    ("run workload.prompt_len.sigma=1.5", ("workload.prompt_len.sigma", "dist=uniform")),
    ("run policy=budget policy.pad_guard.max_ratio=3", ("policy.pad_guard", "policy=pad_guard")),
    ("run policy.wait_timeout.iters=5", ("policy.wait_timeout", "policy=megatron")),
    ("run backend.calibration=table.json", ("backend.calibration", "cost_model=calibrated")),
    ("run backend=torch hardware.peak_flops=1e15", ("hardware.peak_flops", "backend=torch")),
    ("run backend.host_memory_gb=64", ("backend.host_memory_gb", "backend=torch")),
    # deletions, Hydra's settings and sweeps on run
    ("run ~slo", ("~slo", "removing a key is not supported")),
    ("run ~engine.max_tokens", ("~engine.max_tokens", "removing a key")),
    ("run hydra/launcher=joblib", ("hydra/launcher=joblib", "cgbench sweep --launcher")),
    ("run hydra.run.dir=/tmp/x", ("hydra.run.dir", "cgbench sweep --launcher")),
    ("run model=transformer,hybrid", ("model=transformer,hybrid", "cgbench sweep model=transformer,hybrid")),
    ("run sweep=ci", ("sweep: only cgbench sweep reads the sweep group", "cgbench sweep sweep=ci")),
    ("grid sweep.jobs=2", ("sweep.jobs: only cgbench sweep reads the sweep group",)),
    ("run -m model=hybrid", ("--multirun", "for several use: cgbench sweep", "model=hybrid")),
    # rules that used to live only in the torch model: every backend now
    ("run model.head_dim=127", ("model.head_dim", "even")),
    ("run model.mamba_num_groups=3", ("model.mamba_num_groups", "must divide model.mamba_num_heads")),
    ("run model.mamba_conv_kernel=1", ("model.mamba_conv_kernel", ">= 2")),
    ("run backend.dtype=int8", ("backend.dtype", "float32")),
    ("run backend=torch engine.num_speculative_tokens=1", ("engine.num_speculative_tokens", "draft model")),
    # guards, with the numbers
    (f"run {SEVENTY_B}", ("hardware.memory_gb", "139.0 GB of weights", "h100's 80 GB", "--allow-oversize")),
    ("run model=transformer engine.kv_blocks=20000", ("hardware.memory_gb", "GB of KV cache", "80 GB")),
    ("run backend=torch model=hybrid backend.device=cpu", ("backend.host_memory_gb", "7.56 B parameters",
                                                           "8 GB limit")),
    # options
    ("run --format yaml", ("--format", "table, markdown, json, csv")),
    ("run --cfg everything", ("--cfg", "job, all")),
    ("run --config-dir /nonexistent/confdir", ("--config-dir", "/nonexistent/confdir", "no such folder")),
    ("run model=my70b", ("model/my70b",)),
    ("grid --format xml", ("--format",)),
    (f"schedule {STATE} --format yaml", ("--format",)),
]


@pytest.mark.parametrize("line,needles", REFUSED, ids=[c[0][:60] for c in REFUSED])
def test_refused_with_one_line_exit_2_nothing_written(line, needles, tmp_path):
    argv = line.split()
    if argv[0] in ("run", "sweep"):
        argv.insert(1, f"out_dir={tmp_path / 'results'}")
    before = _files(tmp_path)
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ")
    for needle in needles:
        assert needle in err, (needle, err)
    assert _files(tmp_path) == before, "a file was written"


def test_corpus_size():
    assert len(REFUSED) >= 30


def test_environment_config_dir_that_does_not_exist_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(tmp_path / "missing"))
    r = runner.invoke(app, ["run", f"out_dir={tmp_path}", SMALL])
    assert r.exit_code == 2 and r.stderr.strip() == f"error: CGBENCH_CONFIG_DIR: {tmp_path / 'missing'}: no such folder"


def test_a_user_file_that_a_shipped_option_would_shadow_is_refused(tmp_path, monkeypatch):
    own = tmp_path / "conf"
    (own / "model").mkdir(parents=True)
    (own / "model" / "hybrid.yaml").write_text((ROOT / "conf" / "model" / "hybrid.yaml").read_text())
    (own / "model" / "tiny_hybrid.yaml").write_text("name: tiny_hybrid\nhidden_size: 32\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(own))
    r = runner.invoke(app, ["run", f"out_dir={tmp_path / 'r'}", SMALL])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().startswith(f"error: CGBENCH_CONFIG_DIR: {own / 'model' / 'tiny_hybrid.yaml'} differs "
                                       "from the shipped model=tiny_hybrid")
    assert not (tmp_path / "r").exists()


def test_missing_torch_gives_the_install_command(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    r = runner.invoke(app, ["run", "backend=torch", "model=tiny_hybrid", f"out_dir={tmp_path}"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip() == "error: backend=torch needs torch, which is not installed: pip install 'cgbench[torch]'"
    assert _files(tmp_path) == set()


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
    assert r.exit_code == 0 and rows[0][0] == "step" and len(rows[0]) == 6
    assert "[" not in r.stdout.replace("[T", "")  # no Rich markup leaks
    r = runner.invoke(app, ["schedule", str(STATE), "--format", "markdown", "--policy", "megatron"])
    assert r.exit_code == 0 and "| step | megatron (gating) |" in r.stdout


def test_grid_csv_and_markdown_list_the_stored_order():
    js = json.loads(runner.invoke(app, ["grid", "cg=sparse", "--format", "json"]).stdout)
    rows = list(csv.reader(io.StringIO(runner.invoke(app, ["grid", "cg=sparse", "--format", "csv"]).stdout)))
    assert rows[0] == ["order", "T", "P", "D"]
    assert [[int(x) for x in r[1:]] for r in rows[1:]] == js["graphs"]
    assert runner.invoke(app, ["grid", "cg=sparse", "-f", "markdown"]).stdout.startswith("| order | T | P | D |")


# ---------------------------------------------------------------------------------------------
# Health flags


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
    assert "heavy_deferral" in codes and "throughput_collapse" in codes
    flag = next(w for w in doc["warnings"] if w["code"] == "heavy_deferral")
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


def test_piped_sweep_and_compare_at_80_columns_print_every_header_and_value_whole(tmp_path):
    env = {**os.environ, "COLUMNS": "80", "CGBENCH_CONFIG_DIR": str(ROOT / "conf")}
    out = tmp_path / "s"
    sweep = subprocess.run([sys.executable, "-m", "cgbench.cli.app", "sweep", "model=transformer,hybrid",
                            "policy=budget,megatron", "workload=chat", "workload.num_requests=30", "--out", str(out)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert "…" not in sweep.stdout
    from cgbench.analysis.sweep import load_index
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
