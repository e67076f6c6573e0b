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
        "speculative decoding (`engine.num_speculative_tokens` > 0, docs/speculative.md); *open loop* ones",
        "only when the arrivals offer a load (a rate, or a trace at its times: not `closed_loop` or",
        "`all_at_once`; see [Offered load](#offered-load)). Fractions are stored raw (0..1) and shown as",
        "percentages in tables.",
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
                                         ("per rank", m.per_rank), ("prefix caching", m.needs_prefix),
                                         ("open loop", m.needs_open_loop)) if on)
        lines.append(f"| `{m.name}` | {m.unit} | {m.better} | {kind or '-'} | {m.description} |")
    lines += ["", *_goodput(), "", *_offered_load(), "", *_health_flags()]
    return "\n".join(lines) + "\n"


def _goodput() -> list[str]:
    return [
        "## Goodput and SLOs",
        "",
        "Goodput is vLLM bench serve's `request_goodput` (its `--goodput ttft:MS tpot:MS e2el:MS`, the",
        "DistServe definition): the completed requests that meet every bound set, per second of the run. A",
        "request meets `slo.ttft_ms` when its time to first token is at most the bound (a request that",
        "emitted no token misses it), `slo.tpot_ms` when its time per output token after the first is (a",
        "one-token request counts 0, as in vLLM), `slo.e2e_ms` when its arrival-to-last-token time is.",
        "`goodput_req_s` is those requests / makespan, `goodput_fraction` those requests / all requests, and",
        "`goodput_slo` names the bounds (`ttft_ms<=500 tpot_ms<=50`).",
        "",
        "**No bound set, no goodput**: `goodput_slo` is `none`, `goodput_req_s` and `goodput_fraction` are",
        "null (vLLM leaves `request_goodput` None then), and tables say `n/a (no SLO set)`. Set the bounds",
        "in milliseconds on any command that composes a config: `cgbench run slo.ttft_ms=500 slo.tpot_ms=50`",
        "(or in `conf/config.yaml`'s `slo:` block). Each must be a number > 0 or null; an unknown key",
        "(`slo.ttft=500`) is refused with the nearest name. There is no ITL bound: vLLM's goodput has none,",
        "and cgbench keeps inter-token gaps as one histogram over all requests, not per request.",
    ]


def _offered_load() -> list[str]:
    from cgbench.results.load_metrics import BACKLOG_TAIL

    return [
        "## Offered load",
        "",
        "The `load` block exists when the arrivals do not depend on the engine: a generated process at a",
        "rate (`poisson`, `gamma`, `constant`, a plug-in's) or a trace replayed at its times. The offered",
        "request rate is the arrivals' mean gap inverted, (n - 1) / the span from the first arrival to the",
        "last; the offered output rate is that rate times the mean output tokens the requests ask for",
        "(failed requests included: they were offered). The served output rate is the tokens emitted over",
        "the time from the first arrival to the last token. A closed loop (`closed_loop`: a request arrives",
        "when one completes) offers exactly what it is served, and `all_at_once` an unbounded rate (every",
        "request at t = 0): neither has an offered load, so neither has the block or the `overload` flag.",
        "",
        "A healthy run is served short of its offered rate by its last requests' own lives (the drain:",
        "`served_fraction` is about span / (span + drain)), which matters only in a short window; a backlog",
        f"is what `backlog_s` measures: the median wait for admission of the last {BACKLOG_TAIL:.0%} of the",
        "arrivals. A healthy run admits them within a few steps; a queue that grew during the run makes",
        "them wait, whatever their lengths.",
    ]


def _health_flags() -> list[str]:
    from cgbench.results import graph_wait as gw
    from cgbench.results import health as h

    return [
        "## Health flags",
        "",
        "A result's `warnings` hold the flags its run raises (`cgbench run` prints them under `health`,",
        "`cgbench sweep` and `cgbench compare` show each point's). The thresholds of the two flags that",
        "judge the load and the graph waits, and why:",
        "",
        "**`overload`** (open-loop arrivals only, from the `load` block): the workload offers more than the",
        "engine serves, and the latencies measure a growing queue. It fires on either rule:",
        "",
        f"- the served output rate below {h.OVERLOAD_SERVED_SHARE:.0%} of the offered one while the last",
        f"  arrivals waited at least {h.OVERLOAD_BACKLOG_SHARE:.0%} of the arrival span, and"
        f" {h.OVERLOAD_MIN_BACKLOG_S:g} s, to be admitted",
        "  (`OVERLOAD_SERVED_SHARE`, `OVERLOAD_BACKLOG_SHARE`, `OVERLOAD_MIN_BACKLOG_S`). Under a sustained",
        "  overload rho = offered / capacity > 1 the queue grows all run: the last arrival waits",
        "  (rho - 1) x the span and the engine serves 1 / rho of the offered rate, so the pair fires from",
        f"  rho of about {1 / h.OVERLOAD_SERVED_SHARE:.2f}. Both halves must hold: a short window of healthy",
        "  traffic is served short too (by its tail), but admits its last arrivals at once. The floor in",
        "  seconds keeps a burst out: healthy windows of the shipped traces admit their last arrivals within",
        "  about 1.3 s (Mooncake's long prompts in 10-s windows; 12 windows each of 10, 30 and 120 s,",
        "  spread over both traces, on `model=hybrid` and `model=transformer`: none flagged);",
        f"- or the last request finishing more than {h.OVERLOAD_DRAIN:.0%} of the span, and"
        f" {h.OVERLOAD_MIN_DRAIN_S:g} s, after the",
        "  last arrival (`OVERLOAD_DRAIN`, `OVERLOAD_MIN_DRAIN_S`): a backlog that admission does not show,",
        "  every request admitted and none finishing (`max_requests` and the KV pool not binding). The",
        "  minute is longer than one request lives at real lengths (1,000 output tokens at 50 ms: 50 s).",
        "",
        "What it does not see: a burst shorter than the requests' own lives whose every request is admitted",
        "at once and whose drain stays under a minute; the figures of one run cannot tell it from long",
        "requests. The flag names the rates and what to change: `workload.arrival.rate` (a generated",
        "workload), `workload.time_scale` (a trace), or the engine's capacity. On the shipped traces: the",
        "full Azure and Mooncake replays serve 99.9 % of what they offer on the default model; Mooncake",
        "on `model=nemotron_h_56b` serves about two thirds of its 1,165 output tok/s (makespan about 5,260 s",
        "for a 3,537 s trace) and is flagged.",
        "",
        f"**`long_graph_wait`**: a request held back by gating for at least {gw.LONG_WAIT_MIN_ITERS} consecutive",
        "iterations (`LONG_WAIT_MIN_ITERS`, half Megatron's floor of 100: fewer are routine gating) that is",
        "long for this run or this request:",
        "",
        f"- {gw.LONG_WAIT_RUN_SHARE:.0%} of the run's steps (`LONG_WAIT_RUN_SHARE`);",
        f"- {gw.LONG_WAIT_LIFE_SHARE:.0%} of the request's own life, its iterations from arrival to finish",
        "  (`LONG_WAIT_LIFE_SHARE`): gating, not its own work, decides its latency;",
        f"- {gw.LONG_WAIT_S:g} s (`LONG_WAIT_S`), or `slo.ttft_ms` when set (a wait the TTFT bound cannot",
        "  absorb), at the run's mean step time (busy time / steps: an estimate, the run keeps no clock per",
        "  wait; the steps a request waits through are mostly decodes, shorter than the mean when prefills",
        "  are long, so it leans high);",
        "- or Megatron's own threshold, max(100, `engine.max_sequence_length`).",
        "",
        "Megatron's threshold alone (16,384 iterations on the Azure preset, 131,072 on Mooncake's) is",
        "reached by no run; a request held 276 iterations in a row (two thirds of its life, about 2 s:",
        "`workload=chat policy=defer engine.chunked_prefill=true workload.num_requests=1200`) is now",
        "flagged. `starvation_warnings` stays Megatron's count, and the `starvation` flag says when it",
        "fired. The flag's `threshold` is the wait that made it long; the `cgbench schedule` state that",
        "`cgbench run` saves for it is the first round reaching that wait.",
    ]


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
