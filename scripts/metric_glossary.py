"""Write docs/metrics.md from the metric registry (cgbench/results/names.py).

    python scripts/metric_glossary.py          # rewrite the file
    python scripts/metric_glossary.py --check  # exit 1 if the file is not current (used by the tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

from cgbench.results.names import METRICS, PERCENTILE_METHOD, SUMMARY_FIELDS

OUT = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


# cgbench's metrics next to the serving benchmarks' (vLLM: vllm/benchmarks/serve.py, calculate_metrics
# and the saved result; GuideLLM: its request statistics, request_stats.py; AIPerf: the metrics reference
# and the profile_export_aiperf.json schema of its docs)
PEERS = [
    "## Next to vLLM bench, GuideLLM and AIPerf",
    "",
    "What each peer calls the same quantity, and where its definition differs. vLLM is `vllm bench serve`",
    "(`vllm/benchmarks/serve.py`: `calculate_metrics` and the `--save-result` JSON); GuideLLM its",
    "per-request statistics (`request_stats.py`); AIPerf its metrics reference and the",
    "`profile_export_aiperf.json` schema. A simulated request's *start* is its arrival (the peers': the",
    "moment the client sent it), its *latency* `e2e_ms`. `cgbench export --as vllm-bench|aiperf` writes a",
    "result in those tools' shapes (docs/exports.md).",
    "",
    "| cgbench | vLLM bench | GuideLLM | AIPerf | difference |",
    "|---|---|---|---|---|",
    "| `input_tokens` | `total_input_tokens` | prompt tokens of the requests | `total_isl` | the same: prompt "
    "tokens of completed (successful) requests |",
    "| `input_throughput_tok_s` | - (`total_token_throughput` - `output_throughput`) | prompt-token rate | - | "
    "`input_tokens` / makespan |",
    "| `input_length`, `output_length` | `input_lens`, `output_lens` (lists, `--save-detailed`) | prompt and output "
    "token distributions | `input_sequence_length`, `output_sequence_length` | over completed requests, as AIPerf's "
    "valid records |",
    "| `output_tokens`, `output_throughput_tok_s` | `total_output_tokens`, `output_throughput` | output token "
    "rate | `total_output_tokens`, `output_token_throughput` | cgbench counts the tokens every request emitted, "
    "vLLM and AIPerf those of successful ones (the same when every request completes) |",
    "| `max_concurrent_requests` | `max_concurrent_requests` | - | - | the same sweep over [start, start + latency) "
    "of successful requests, an end before a start at the same time |",
    "| `concurrency` | - | `request_concurrency` (requests in flight over time) | - | every request that arrived, "
    "in flight until it completes or fails (or the run ends); statistics weighted by time |",
    "| `batch_requests` | - | - | - | an engine-side view (requests in each step's batch); no client sees it |",
    "| `peak_output_throughput_tok_s` | `max_output_tokens_per_s` | - | - | vLLM counts each token in the whole "
    "second since the first successful request's start, cgbench in the whole second of the run's clock (which "
    "starts at or before the first arrival) |",
    "| `tpot_ms` (and `requests.csv`'s `tpot_ms`) | TPOT: (latency - TTFT) / (output tokens - 1), requests with "
    "more than one token | `time_per_output_token_ms` = (last token - request start) / output tokens: **includes "
    "the first token** (TTFT), so it differs; its `inter_token_latency_ms`, (last token - first token) / (output "
    "tokens - 1), is cgbench's `tpot_ms` | `inter_token_latency`: per request, (request latency - TTFT) / "
    "(output length - 1): cgbench's `tpot_ms` | cgbench's is vLLM's TPOT |",
    "| `itl_ms` | ITL: every gap between consecutive tokens | - | `inter_chunk_latency` (gaps between chunks) | the "
    "same as vLLM's over all tokens |",
    "| `ttft_ms`, `e2e_ms` | TTFT, E2EL | `time_to_first_token_ms`, `request_latency` | `time_to_first_token`, "
    "`request_latency` | the same quantities |",
    "| percentiles, `std` | numpy's interpolated percentile (`--metric-percentiles`, default 99); `np.std` "
    "(population) | p0.1 ... p99.9 | p1 ... p99; `std` the sample standard deviation (n - 1) | nearest rank "
    "(above); `std` over n |",
    "| a summary of nothing | 0 (`np.mean(x or 0)`) | null | the field is left out | null |",
]


def render() -> str:
    lines = [
        "# Metric glossary",
        "",
        "Every key of a result document's `metrics` block. Generated from the registry",
        "(`cgbench/results/names.py`) by `python scripts/metric_glossary.py`; do not edit by hand.",
        "",
        f"A *summary* is a record `{{{', '.join(SUMMARY_FIELDS)}}}` over the values of one latency (or",
        "iteration count); address one field with a dot (`ttft_ms.p99`). `count` is how many values,",
        "`std` the population standard deviation (divided by n). A *keyed* record maps names (reasons,",
        "kinds) to counts. *Deterministic* metrics are step accounting that the `sim` backend reproduces",
        "exactly for a config and seed; *clock* metrics exist only when the backend has a clock; *EP*",
        "metrics only with expert parallelism (`engine.ep_size` > 1), *DP* ones only with data parallelism",
        "(`engine.dp_size` > 1); *per rank* ones are lists, one value per rank; *spec* metrics only with",
        "speculative decoding (`engine.num_speculative_tokens` > 0, docs/speculative.md). Fractions are",
        "stored raw (0..1) and shown as percentages in tables.",
        "",
        "## Percentiles",
        "",
        f"cgbench's percentiles are **{PERCENTILE_METHOD}**: the p-th percentile of n ascending values is the",
        "value at 1-based rank ceil(p / 100 * n) (at least 1). It is always a value that was observed: one",
        "request's TTFT, a whole number of iterations, which the simulator reproduces exactly and a reader",
        "can find in the per-request records. The *interpolated* percentile (numpy's default `linear`,",
        "used by several serving benchmarks) takes the fractional rank (n - 1) * p / 100 + 1 and blends",
        "the two neighbouring values. The two agree on large samples of smooth data; on small samples",
        "or where the tail has few values they differ: for the values 1, 2, ..., 10 the nearest-rank",
        "p90 is 9 and p99 is 10 (the maximum), the interpolated ones 9.1 and 9.91. Compare a cgbench",
        "percentile with another tool's only when both name the same method, or when n is large.",
        "`itl_ms` is a histogram of inter-token gaps: its statistics weight each gap by how often it",
        "occurred, with the same nearest rank over the expanded values.",
        "",
        "A summary reports p50, p90, p95 and p99 always; `metrics.percentiles` adds any of p1, p5, p10, p25",
        "and p75 (AIPerf's set): `cgbench run metrics.percentiles=[25,50,75,90,95,99]` gives every summary",
        "`p25` and `p75` too. A summary of no values (`ttft_ms_deferred` when nothing was deferred) has",
        "`count` 0 and every statistic **null**: there is no such value, and a 0 would read as a fast one.",
        "",
        *PEERS,
        "",
        "## Metrics",
        "",
        "| metric | unit | better | kind | definition |",
        "|---|---|---|---|---|",
    ]
    for m in METRICS:
        kind = ", ".join(k for k, on in (("summary", m.summary), ("keyed", m.keyed),
                                         ("deterministic", m.deterministic), ("clock", m.needs_clock),
                                         ("EP", m.needs_ep), ("DP", m.needs_dp), ("spec", m.needs_spec),
                                         ("per rank", m.per_rank), ("prefix caching", m.needs_prefix)) if on)
        lines.append(f"| `{m.name}` | {m.unit} | {m.better} | {kind or '-'} | {m.description} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is not current: run python scripts/metric_glossary.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
