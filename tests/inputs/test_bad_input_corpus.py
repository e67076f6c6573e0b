"""The bad-input corpus: every case exits 2 with one clear line naming the key or file, no traceback,
and leaves no result file behind. Request-level problems are the documented exception: the request is
failed with a reason and the run goes on (exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

runner = CliRunner()
SMALL = "workload.num_requests=8"


def _files(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()] if d.exists() else []


@pytest.fixture()
def fixtures(tmp_path: Path) -> dict[str, Path]:
    f = {}
    f["empty_trace"] = tmp_path / "empty.jsonl"
    f["empty_trace"].write_text("")
    f["bad_json_trace"] = tmp_path / "bad.jsonl"
    f["bad_json_trace"].write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3}\n{oops\n')
    f["bad_value_trace"] = tmp_path / "bad_value.jsonl"
    f["bad_value_trace"].write_text('{"arrival_s": 0, "prompt_tokens": "abc", "output_tokens": 3}\n')
    f["negative_trace"] = tmp_path / "neg.csv"
    f["negative_trace"].write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,-4,3\n")
    f["missing_col_trace"] = tmp_path / "cols.csv"
    f["missing_col_trace"].write_text("arrival_s,prompt_tokens\n0,5\n")
    f["not_json"] = tmp_path / "not.json"
    f["not_json"].write_text("this is not json")
    f["wrong_schema"] = tmp_path / "wrong.json"
    f["wrong_schema"].write_text(json.dumps({"hello": 1}))
    f["old_schema"] = tmp_path / "old.json"
    f["old_schema"].write_text(json.dumps({"schema_version": 99, "metrics": {}}))
    f["empty_dir"] = tmp_path / "empty_dir"
    f["empty_dir"].mkdir()
    f["a_file"] = tmp_path / "a_file"
    f["a_file"].write_text("x")
    f["bad_state"] = tmp_path / "state.json"
    f["bad_state"].write_text(json.dumps({"model": {"kind": "hybrid"}, "engine": {}, "batch": {"decode": -1},
                                          "queue": []}))
    f["bad_rules"] = tmp_path / "rules.yaml"
    f["bad_rules"].write_text("metrics: [1, 2\n")
    return f


# (command line, needle that must appear in the error line); {name} is replaced by a fixture path
CASES: list[tuple[str, str]] = [
    # unknown keys and groups
    ("run engine.max_tokkens=5", "max_tokkens"),
    ("run model=gpt5", "model/gpt5"),
    ("run cg=nope", "cg/nope"),
    ("run policy=greedy", "policy/greedy"),
    ("run workload=nope", "workload/nope"),
    ("run hardware=tpu", "hardware/tpu"),
    ("run nonsense_key=1", "nonsense_key"),
    # wrong types
    ("run cg.num_cuda_graphs=abc", "cg.num_cuda_graphs"),
    ("run engine.chunked_prefill=maybe", "chunked_prefill"),
    ("run engine.max_requests=1.5", "max_requests"),
    ("run seed=abc", "seed"),
    ("run workload.arrival.rate=fast", "rate"),
    # bad values
    ("run cg.kind=nope", "cg.kind"),
    ("run policy.name=greedy", "policy.name"),
    ("run model.kind=rnn", "model.kind"),
    ("run engine.max_tokens=-1", "engine.max_tokens"),
    ("run engine.max_requests=0", "engine.max_requests"),
    ("run engine.block_size=0", "engine.block_size"),
    ("run engine.max_sequence_length=0", "engine.max_sequence_length"),
    ("run engine.kv_blocks=-3", "engine.kv_blocks"),
    ("run engine.max_tokens=100", "engine.max_tokens"),  # < max_requests (256)
    ("run engine.max_requests=6 engine.tp_size=4", "engine.max_requests"),  # must be a tp multiple
    ("run engine.num_speculative_tokens=-1", "num_speculative_tokens"),
    ("run cg.num_cuda_graphs=-2", "cg.num_cuda_graphs"),
    ("run cg.distribution=cubic", "cg.distribution"),
    ("run cg=explicit cg.graphs=[[64,1]]", "cg.graphs[0]"),
    ("run cg=explicit cg.graphs=[[5000,1,0]]", "cg.graphs[0]"),  # T > P*msl + D: invalid shape
    ("run policy=pad_guard policy.pad_guard.max_ratio=0.5", "max_ratio"),
    ("run policy=wait_timeout policy.wait_timeout.iters=-1", "wait_timeout.iters"),
    ("run workload.num_requests=0", "workload.num_requests"),
    ("run workload.arrival.process=poisson workload.arrival.rate=0", "workload.arrival.rate"),
    ("run workload.arrival.process=closed_loop", "concurrency"),
    ("run workload.prompt_len.dist=zipf", "prompt_len.dist"),
    ("run workload.prompt_len.min=10 workload.prompt_len.max=5", "prompt_len.max"),
    ("run workload.time_scale=0", "time_scale"),
    ("run backend.name=jax", "backend.name"),
    ("run backend.cost_model=calibrated", "backend.calibration"),
    ("run backend.cost_model=calibrated backend.calibration=/nonexistent/table.json", "table.json"),
    ("run hardware.peak_flops=0", "peak_flops"),
    ("run slo.ttft_ms=-5", "slo.ttft_ms"),
    # traces
    ("run workload=trace workload.trace=/nonexistent/trace.jsonl", "trace.jsonl"),
    ("run workload=trace workload.trace={empty_trace}", "empty.jsonl"),
    ("run workload=trace workload.trace={bad_json_trace}", "bad.jsonl:2"),
    ("run workload=trace workload.trace={bad_value_trace}", "prompt_tokens"),
    ("run workload=trace workload.trace={negative_trace}", "neg.csv:3"),
    ("run workload=trace workload.trace={missing_col_trace}", "output_tokens"),
    # output paths
    ("run " + SMALL + " --out {a_file}/r.json", "a_file"),
    ("run " + SMALL + " --out {empty_dir}", "empty_dir"),
    # sweeps
    ("sweep seed=1,2 seed=3 --dry-run", "seed"),
    ("sweep seed=interval(0,1) --dry-run", "interval"),
    ("sweep model=transformer,gpt5 --dry-run", "gpt5"),
    ("sweep engine.max_tokens=16384,-1 --dry-run", "engine.max_tokens"),
    ("sweep sweep=nope --dry-run", "sweep/nope"),
    # compare and plot
    ("compare /nonexistent/a.json /nonexistent/b.json", "a.json"),
    ("compare {not_json} {not_json}", "not.json"),
    ("compare {wrong_schema} {wrong_schema}", "wrong.json"),
    ("compare {old_schema} {old_schema}", "schema_version"),
    ("compare {empty_dir} {empty_dir}", "empty_dir"),
    ("plot /nonexistent/sweep", "sweep"),
    ("plot {not_json}", "not.json"),
    ("plot {wrong_schema}", "wrong.json"),
    # grid and schedule
    ("grid cg.kind=nope", "cg.kind"),
    ("grid --format yaml", "--format"),
    ("schedule /nonexistent/state.json", "state.json"),
    ("schedule {not_json}", "not.json"),
    ("schedule {bad_state}", "batch.decode"),
]


@pytest.mark.parametrize("line,needle", CASES, ids=[c[0][:60] for c in CASES])
def test_bad_input_exits_2_with_one_clear_line(line, needle, fixtures, tmp_path):
    argv = [a.format(**{k: str(v) for k, v in fixtures.items()}) for a in line.split()]
    out_dir = tmp_path / "results"
    if argv[0] in ("run", "sweep"):
        argv.insert(1, f"out_dir={out_dir}")
    before = set(_files(tmp_path))
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert err, "no message"
    assert needle in err, err
    assert len(err.splitlines()) <= 3, err
    assert set(_files(tmp_path)) - before == set(), "a file was left behind"


def test_corpus_is_large_enough():
    assert len(CASES) >= 40


def test_request_level_problems_fail_the_request_and_the_run_goes_on(tmp_path):
    out = tmp_path / "r.json"
    trace = tmp_path / "t.jsonl"
    rows = [{"arrival_s": 0, "prompt_tokens": 3000, "output_tokens": 5},  # > max_sequence_length
            {"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 5000},  # output clamped to msl - prompt
            {"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 5}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["run", "workload=trace", f"workload.trace={trace}", "--out", str(out), "--requests"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    m = doc["metrics"]["requests"]
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["failed_by_reason"] == {"prompt_exceeds_max_sequence_length": 1}
    assert [q["generated"] for q in doc["requests"]] == [0, 2460, 5]


def test_empty_grid_with_gating_requested_runs_eager_and_says_so(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "cg=explicit", "cg.graphs=[]", "policy=megatron", SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads(out.read_text())["metrics"]
    assert m["gating_active"] is False and m["eager_steps_by_reason"] == {"no_graphs": m["steps"]}
