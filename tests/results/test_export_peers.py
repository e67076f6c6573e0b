"""``cgbench export --as vllm-bench|aiperf``: a result in the shape vLLM's and AIPerf's tools save
theirs, validated against the field names those tools document (each list below names its source),
with the values of cgbench's metrics of the same meaning."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.export_peers import AIPERF_FILE, aiperf_profile, vllm_bench_result

runner = CliRunner()

# vLLM, vllm/benchmarks/serve.py (vllm-project/vllm @ 009e6d4a): main()'s result_json setup keys, benchmark()'s
# result dict, and process_one_metric's mean_/median_/std_/p{p}_{name}_ms for ttft, tpot, itl, e2el
VLLM_SETUP = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
              "request_rate", "burstiness", "max_concurrency")
VLLM_RESULT = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
               "request_goodput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
               "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
               "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
VLLM_DETAILED = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")
# AIPerf, docs/reference/json-export-schema.md (ai-dynamo/aiperf @ db6edabf): the per-metric stats fields and
# the top-level fields; the metric tags and units of docs/metrics-reference.md and that page's examples
AIPERF_STATS = ("unit", "avg", "min", "max", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std",
                "count", "sum")
AIPERF_TOP = ("schema_version", "aiperf_version", "benchmark_id", "start_time", "end_time", "was_cancelled",
              "input_config", "run_info", "telemetry_data", "error_summary")
AIPERF_RECORD_TAGS = {"request_latency": "ms", "time_to_first_token": "ms", "inter_token_latency": "ms",
                      "input_sequence_length": "tokens", "output_sequence_length": "tokens"}
AIPERF_SCALAR_TAGS = {"request_throughput": "requests/sec", "request_count": "requests",
                      "error_request_count": "requests", "output_token_throughput": "tokens/sec",
                      "total_token_throughput": "tokens/sec", "total_output_tokens": "tokens", "total_osl": "tokens",
                      "total_isl": "tokens", "benchmark_duration": "sec", "goodput": "requests/sec"}


def _vllm_known(key: str) -> bool:
    if key in VLLM_SETUP or key in VLLM_RESULT or key == "cgbench_version":  # a --metadata key
        return True
    stat, _, rest = key.partition("_")
    name = rest.removesuffix("_ms")
    return rest.endswith("_ms") and name in VLLM_METRICS and (
        stat in ("mean", "median", "std") or (stat[0] == "p" and stat[1:].isdigit()))


@pytest.fixture(scope="module")
def doc() -> dict:
    ovr = ["workload=chat", "workload.num_requests=40", "metrics.percentiles=[25,50,75,90,95,99]", "slo.ttft_ms=500"]
    return run_point(load_config(ovr), ovr, requests=True)


def test_vllm_bench_holds_only_vllms_field_names_with_cgbenchs_values(doc):
    r, m = vllm_bench_result(doc), doc["metrics"]
    assert [k for k in r if not _vllm_known(k)] == []
    assert set(VLLM_SETUP) <= set(r)
    for key in ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests"):
        assert r[key] is not None, key
    assert (r["duration"], r["total_input_tokens"], r["max_output_tokens_per_s"]) == (
        m["makespan_s"], m["input_tokens"], m["peak_output_throughput_tok_s"])
    assert r["request_goodput"] == m["goodput_req_s"]  # an slo is set
    assert r["median_ttft_ms"] == m["ttft_ms"]["p50"] and r["p25_ttft_ms"] == m["ttft_ms"]["p25"]
    assert r["p99_e2el_ms"] == m["e2e_ms"]["p99"] and r["mean_tpot_ms"] == m["tpot_ms"]["mean"]
    assert len(r["input_lens"]) == len(r["ttfts"]) == m["requests"]["total"]  # --save-detailed: the records
    assert r["request_rate"] == doc["config"]["workload"]["arrival"]["rate"]
    assert not set(VLLM_DETAILED) - set(VLLM_RESULT)


def test_aiperf_holds_only_documented_tags_and_stats_fields(doc):
    r, m = aiperf_profile(doc), doc["metrics"]
    tags = {k for k, v in r.items() if isinstance(v, dict) and "unit" in v}
    assert tags <= set(AIPERF_RECORD_TAGS) | set(AIPERF_SCALAR_TAGS)
    assert set(r) - tags <= set(AIPERF_TOP)
    for tag in tags:
        assert set(r[tag]) <= set(AIPERF_STATS), tag
        assert r[tag]["unit"] == {**AIPERF_RECORD_TAGS, **AIPERF_SCALAR_TAGS}[tag], tag
    for tag in AIPERF_RECORD_TAGS:  # record metrics: the whole block
        assert {"avg", "min", "max", "p50", "p99", "count", "sum", "std"} <= set(r[tag]), tag
    for tag in set(AIPERF_SCALAR_TAGS) & tags:  # derived and aggregate: unit and avg only
        assert set(r[tag]) == {"unit", "avg"}, tag
    ttft = m["ttft_ms"]
    assert r["time_to_first_token"]["p25"] == ttft["p25"] and r["time_to_first_token"]["count"] == ttft["count"]
    # AIPerf's std is the sample one: cgbench's population std times sqrt(n / (n - 1))
    n = ttft["count"]
    assert r["time_to_first_token"]["std"] == pytest.approx(ttft["std"] * math.sqrt(n / (n - 1)), abs=1e-6)
    assert r["inter_token_latency"]["avg"] == m["tpot_ms"]["mean"]  # AIPerf's ITL is per request: cgbench's TPOT
    assert r["total_isl"]["avg"] == m["input_tokens"] and r["benchmark_duration"]["avg"] == m["makespan_s"]


def test_a_summary_of_nothing_is_left_out_of_aiperf_and_null_in_vllm():
    doc = run_point(load_config(["workload=small", "workload.output_len.dist=fixed", "workload.output_len.value=1",
                                      "workload.output_len.min=1"]),
                    [])
    assert doc["metrics"]["tpot_ms"]["count"] == 0  # one token each: no time per token after the first
    assert "inter_token_latency" not in aiperf_profile(doc)
    assert vllm_bench_result(doc)["mean_tpot_ms"] is None


@pytest.mark.slow
def test_the_command_writes_one_file_per_run_and_sweep_point(tmp_path):
    result = tmp_path / "r.json"
    assert runner.invoke(app, ["run", "workload=small", "--out", str(result)]).exit_code == 0
    r = runner.invoke(app, ["export", str(result), "-o", str(tmp_path / "v"), "--as", "vllm-bench", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["files"] == [str(tmp_path / "v" / "r.json")]
    assert json.loads((tmp_path / "v" / "r.json").read_text())["completed"] == 12
    sweep = tmp_path / "s"
    assert runner.invoke(app, ["sweep", "workload=small", "policy=budget,defer", "--out", str(sweep)]).exit_code == 0
    r = runner.invoke(app, ["export", str(sweep), "-o", str(tmp_path / "a"), "--as", "aiperf"])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "a").glob(f"*/{AIPERF_FILE}"))) == 2


@pytest.mark.parametrize(("args", "words"), [
    (["--as", "guidellm"], "--as: 'guidellm' is not one of flat, vllm-bench, aiperf"),
    (["--as", "aiperf", "--export-format", "parquet"], "--export-format applies to --as flat"),
    (["--format", "csv,parquet"], "those are --export-format csv,parquet"),
])
def test_bad_export_options_are_one_line(tmp_path, args, words):
    result = tmp_path / "r.json"
    result.write_text("{}")
    r = runner.invoke(app, ["export", str(result), "-o", str(tmp_path / "e"), *args])
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "e").exists()
