"""A result in the shapes serving benchmarks save theirs, so that dashboards and scripts built on them
show a simulated run beside a measured one (``cgbench export --as vllm-bench|aiperf``):

* ``vllm-bench``: the result JSON of ``vllm bench serve --save-result`` (``vllm/benchmarks/serve.py``:
  the setup keys, ``benchmark()``'s result dict, and ``mean_/median_/std_/pQ_<metric>_ms`` for ttft,
  tpot, itl and e2el at the run's percentiles); with the run's per-request records, the
  ``--save-detailed`` lists (input_lens, output_lens, ttfts, latencies, start_times, errors);
* ``aiperf``: ``profile_export_aiperf.json`` of ``aiperf profile`` (its documented schema: per metric
  tag a stats block ``unit``, ``avg``, ``min``, ``max``, ``p1`` ... ``p99``, ``std``, ``count``, ``sum``
  for record metrics, ``unit`` and ``avg`` for derived and aggregate ones).

Each field holds cgbench's metric of the same meaning (docs/metrics.md's table names each pair and
where a definition differs; docs/exports.md says what is left out). Values the run does not have are
null (vLLM) or left out (AIPerf, whose readers treat an absent field as not applicable)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cgbench.results.names import lookup

VLLM_BENCH, AIPERF = "vllm-bench", "aiperf"
PEER_FORMATS = (VLLM_BENCH, AIPERF)
AIPERF_FILE = "profile_export_aiperf.json"
AIPERF_SCHEMA_VERSION = "1.1"  # the per-metric stats block with count and sum; no run_info (1.2)

# vLLM's metric names and cgbench's summaries (milliseconds both)
_VLLM_LATENCIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"), ("e2el", "e2e_ms"))


def _percentiles_of(summary: Mapping[str, Any]) -> list[int]:
    return sorted(int(k[1:]) for k in summary if k.startswith("p") and k[1:].isdigit())


def _slo_set(config: Mapping[str, Any]) -> bool:
    return any(v is not None for v in (config.get("slo") or {}).values())


def _arrival(config: Mapping[str, Any]) -> tuple[Any, float, int | None]:
    """(request_rate, burstiness, max_concurrency) as vLLM records them: ``inf`` when every request
    comes at once, a closed loop's concurrency as its ``max_concurrency``."""
    w = config.get("workload") or {}
    arrival = w.get("arrival") or {}
    process = arrival.get("process")
    if w.get("trace"):
        return "inf", 1.0, None  # a trace's own times (vLLM's self-timed replay records no rate)
    if process == "closed_loop":
        return "inf", 1.0, int(arrival.get("concurrency") or 0)
    rate = arrival.get("rate") or 0.0
    return (rate if rate > 0 else "inf"), float(arrival.get("burstiness") or 1.0), None


def vllm_bench_result(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (a result document) as ``vllm bench serve``'s saved result."""
    m, cfg = doc["metrics"], doc.get("config") or {}
    created = datetime.fromisoformat(doc["created_at"])
    rate, burstiness, concurrency = _arrival(cfg)
    out: dict[str, Any] = {
        "date": created.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": f"cgbench-{(doc.get('environment') or {}).get('backend', 'sim')}",
        "backend": f"cgbench-{(doc.get('environment') or {}).get('backend', 'sim')}",
        "label": (doc.get("labels") or {}).get("name"),
        "model_id": (cfg.get("model") or {}).get("name"),
        "tokenizer_id": None,
        "num_prompts": lookup(m, "requests.total"),
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": concurrency,
        "duration": m.get("makespan_s"),
        "completed": lookup(m, "requests.completed"),
        "failed": lookup(m, "requests.failed"),
        "total_input_tokens": m.get("input_tokens"),
        "total_output_tokens": m.get("output_tokens"),
        "request_throughput": m.get("request_throughput_req_s"),
        "request_goodput": m.get("goodput_req_s") if _slo_set(cfg) else None,
        "output_throughput": m.get("output_throughput_tok_s"),
        "total_token_throughput": m.get("total_throughput_tok_s"),
        "max_output_tokens_per_s": m.get("peak_output_throughput_tok_s"),
        "max_concurrent_requests": m.get("max_concurrent_requests"),
        "rtfx": 0.0,
    }
    requests = doc.get("requests")
    if requests is not None:  # the --save-detailed lists, in seconds as vLLM writes them
        out["input_lens"] = [r["prompt_tokens"] for r in requests]
        out["output_lens"] = [r["generated"] if r["outcome"] == "completed" else 0 for r in requests]
        out["ttfts"] = [r["first_token_s"] - r["arrival_s"] if r["first_token_step"] >= 0 else 0.0 for r in requests]
        out["latencies"] = [r["finish_s"] - r["arrival_s"] if r["outcome"] == "completed" else 0.0 for r in requests]
        out["start_times"] = [r["arrival_s"] for r in requests]
        out["errors"] = [r.get("fail_reason") or "" for r in requests]
    for name, ours in _VLLM_LATENCIES:
        s = m.get(ours)
        if not isinstance(s, Mapping):
            continue
        out[f"mean_{name}_ms"] = s.get("mean")
        out[f"median_{name}_ms"] = s.get("p50")
        out[f"std_{name}_ms"] = s.get("std")
        for q in _percentiles_of(s):
            out[f"p{q}_{name}_ms"] = s.get(f"p{q}")
    out["cgbench_version"] = doc.get("cgbench_version")  # vLLM's --metadata keys are top-level too
    return out


# AIPerf's metric tags, their unit, and cgbench's metric (a summary for a record metric)
_AIPERF_RECORDS = (("request_latency", "ms", "e2e_ms"), ("time_to_first_token", "ms", "ttft_ms"),
                   ("inter_token_latency", "ms", "tpot_ms"), ("input_sequence_length", "tokens", "input_length"),
                   ("output_sequence_length", "tokens", "output_length"))
_AIPERF_SCALARS = (("request_throughput", "requests/sec", "request_throughput_req_s"),
                   ("request_count", "requests", "requests.completed"),
                   ("error_request_count", "requests", "requests.failed"),
                   ("output_token_throughput", "tokens/sec", "output_throughput_tok_s"),
                   ("total_token_throughput", "tokens/sec", "total_throughput_tok_s"),
                   ("total_output_tokens", "tokens", "output_tokens"),
                   ("total_osl", "tokens", "output_tokens"),
                   ("total_isl", "tokens", "input_tokens"),
                   ("benchmark_duration", "sec", "makespan_s"))


def _record_stats(unit: str, s: Mapping[str, Any]) -> dict[str, Any] | None:
    """AIPerf's block of a record metric from a cgbench summary: its ``std`` the sample standard
    deviation (cgbench's population one times sqrt(n / (n - 1))); None for a summary of nothing."""
    n = s.get("count") or 0
    if n == 0 or s.get("mean") is None:
        return None
    out: dict[str, Any] = {"unit": unit, "avg": s["mean"], "min": s["min"], "max": s["max"]}
    for q in _percentiles_of(s):
        out[f"p{q}"] = s[f"p{q}"]
    if n > 1:
        out["std"] = round(s["std"] * math.sqrt(n / (n - 1)), 6)
    out["count"] = n
    out["sum"] = round(s["mean"] * n, 6)
    return out


def aiperf_profile(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (a result document) as AIPerf's ``profile_export_aiperf.json``."""
    m = doc["metrics"]
    end = datetime.fromisoformat(doc["created_at"])
    start = end - timedelta(seconds=float(m.get("makespan_s") or 0.0))
    digest = hashlib.sha256(json.dumps(doc.get("config"), sort_keys=True).encode()).hexdigest()[:12]
    out: dict[str, Any] = {"schema_version": AIPERF_SCHEMA_VERSION, "benchmark_id": f"cgbench-{digest}",
                           "start_time": start.isoformat(), "end_time": end.isoformat(), "was_cancelled": False}
    for tag, unit, ours in _AIPERF_RECORDS:
        s = m.get(ours)
        block = _record_stats(unit, s) if isinstance(s, Mapping) else None
        if block is not None:
            out[tag] = block
    for tag, unit, ours in _AIPERF_SCALARS:
        value = lookup(m, ours)
        if value is not None:
            out[tag] = {"unit": unit, "avg": float(value)}
    if _slo_set(doc.get("config") or {}) and m.get("goodput_req_s") is not None:
        out["goodput"] = {"unit": "requests/sec", "avg": float(m["goodput_req_s"])}
    out["input_config"] = {"cgbench": doc.get("config")}
    return out


def peer_document(doc: Mapping[str, Any], shape: str) -> dict[str, Any]:
    """``doc`` in ``shape`` (``PEER_FORMATS``)."""
    return vllm_bench_result(doc) if shape == VLLM_BENCH else aiperf_profile(doc)


def peer_file(folder: Path, stem: str, shape: str) -> Path:
    """Where ``shape``'s file of the result ``stem`` goes: ``<stem>.json`` (vLLM's one file per run), or
    ``<stem>/profile_export_aiperf.json`` (AIPerf's artifact folder per run)."""
    return folder / f"{stem}.json" if shape == VLLM_BENCH else folder / stem / AIPERF_FILE


def peer_text(doc: Mapping[str, Any], shape: str) -> str:
    return json.dumps(peer_document(doc, shape), indent=1, allow_nan=False) + "\n"
