"""The registry of metric names: every key of a result's ``metrics`` block, with its unit, which
direction is better, a short label for tables and plots, and its definition (the glossary).

Everything that shows, compares or plots a metric reads it from here: the run table, sweep
summaries, plots, compare rules and the launcher. A new metric is added here and in its
computation (``cgbench.results.metrics``); a test checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

LOWER, HIGHER, NEITHER = "lower", "higher", "neither"

# Units. Fractions are stored raw (0..1) in JSON and shown as percentages in tables.
FRACTION, ITERATIONS, MS, S, TOKENS, REQUESTS, COUNT, TOK_S, REQ_S, TEXT, FLAG = (
    "fraction", "iterations", "ms", "s", "tokens", "requests", "count", "tok/s", "req/s", "text", "flag")

# A summary record's fields, in the order a result stores them: the statistics peers (AIPerf,
# GuideLLM, vLLM's benchmarks) report. Percentiles are nearest-rank (cgbench.results.metrics); std
# is the population standard deviation (over n).
SUMMARY_FIELDS = ("count", "min", "mean", "std", "p50", "p90", "p95", "p99", "max")
# metrics.percentiles adds p1, p5, p10, p25 or p75 (cgbench.results.percentiles); every field any summary can hold:
ALL_SUMMARY_FIELDS = ("count", "min", "mean", "std", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99",
                      "max")
PERCENTILE_METHOD = "nearest-rank"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # the key in ``metrics``; nested values are addressed with dots (``ttft_ms.p99``)
    unit: str
    better: str  # lower | higher | neither
    label: str  # short, for table headers and axis labels
    description: str
    summary: bool = False  # a record of SUMMARY_FIELDS, each in ``unit`` (count: values)
    keyed: bool = False  # a {name: count} record whose keys depend on the run (reasons, kinds)
    deterministic: bool = False  # step accounting the simulator reproduces exactly for a config
    needs_clock: bool = False  # present only when the backend has a clock (time metrics)
    needs_ep: bool = False  # present only with expert parallelism (engine.ep_size > 1)
    needs_spec: bool = False  # present only with speculative decoding (engine.num_speculative_tokens > 0)
    per_rank: bool = False  # a list of values, one per expert-parallel (or data-parallel) rank
    needs_prefix: bool = False  # present only with prefix caching (engine.prefix_caching)
    needs_dp: bool = False  # present only with data parallelism (engine.dp_size > 1)
    needs_open_loop: bool = False  # present only when the arrivals offer a load (cgbench.results.load_metrics)


_M = Metric
METRICS: tuple[Metric, ...] = (
    _M("outcome", TEXT, NEITHER, "outcome",
       "completed, stalled (no progress possible), engine_assertion (Megatron's engine would raise an assertion "
       "under KV pressure) or step_bound (the run exceeded its step bound)"),
    _M("diagnosis", TEXT, NEITHER, "diagnosis", "why a run did not complete (empty when it did)"),
    # step accounting
    _M("steps", ITERATIONS, NEITHER, "steps", "engine steps (iterations) that ran model work",
       deterministic=True),
    _M("graphed_steps", ITERATIONS, HIGHER, "graphed steps", "steps that replayed a captured graph",
       deterministic=True),
    _M("eager_steps", ITERATIONS, LOWER, "eager steps", "steps that no captured graph covered (ran eager)",
       deterministic=True),
    _M("eager_step_fraction", FRACTION, LOWER, "eager steps", "eager steps / steps", deterministic=True),
    _M("eager_steps_by_reason", ITERATIONS, LOWER, "eager steps by reason",
       "why no graph applied: no_graphs, tokens_over_max, shape, decode_only_over_max, no_mixed_graphs, "
       "pad_guard, not_captured (the grid has a graph for the shape, the backend no capture of it: "
       "backend=torch on a CPU, or past the capture budget on a GPU)", keyed=True, deterministic=True),
    _M("eager_token_fraction", FRACTION, LOWER, "eager tokens", "tokens computed in eager steps / all tokens",
       deterministic=True),
    _M("padded_token_fraction", FRACTION, LOWER, "padding",
       "padding tokens / tokens computed in graphed steps (real + padding)", deterministic=True),
    _M("step_kinds", ITERATIONS, NEITHER, "step kinds", "steps by kind: decode_only, prefill_only, mixed",
       keyed=True, deterministic=True),
    _M("tokens_computed", TOKENS, NEITHER, "tokens computed", "real tokens over all steps (no padding)",
       deterministic=True),
    # gating
    _M("deferral_events", COUNT, LOWER, "deferral events",
       "(step, request) pairs where gating held back a request that the budgets admitted", deterministic=True),
    _M("deferred_requests", REQUESTS, LOWER, "deferred requests", "requests deferred by gating at least once",
       deterministic=True),
    _M("max_cg_wait_iters", ITERATIONS, LOWER, "longest wait",
       "the longest run of consecutive iterations one request was held back by gating (cg_wait_iters)",
       deterministic=True),
    _M("max_cg_wait_request", TEXT, NEITHER, "longest-wait request", "the id of that request (null if none)"),
    _M("snap_splits", COUNT, LOWER, "snap splits",
       "extra prefill chunks created by snapping a chunk down to a graph boundary", deterministic=True),
    _M("starvation_warnings", COUNT, LOWER, "starvation warnings",
       "times the engine's starvation warning fires (every max(100, max_sequence_length) consecutive waits)",
       deterministic=True),
    _M("eager_admissions", COUNT, LOWER, "admitted despite a graph miss",
       "admissions (not steps) that a gating policy let through although, when admitted, the batch's shape "
       "matched no graph (wait_timeout's timeouts, megatron's unsnappable chunks). Not a count of eager "
       "steps: later admissions in the same round can change the shape, so the step may still replay a "
       "graph; eager steps are eager_steps", deterministic=True),
    _M("max_queue_wait_iters", ITERATIONS, LOWER, "longest queue wait",
       "the most iterations from arrival to first admission, for any reason", deterministic=True),
    _M("queue_wait_iters", ITERATIONS, LOWER, "queue wait", "iterations from arrival to first admission",
       summary=True, deterministic=True),
    _M("max_queue_len", REQUESTS, LOWER, "longest queue", "the most requests waiting at a step",
       deterministic=True),
    _M("ttft_steps", ITERATIONS, LOWER, "TTFT", "iterations from arrival to the first token", summary=True,
       deterministic=True),
    _M("tpot_steps", ITERATIONS, LOWER, "TPOT", "iterations per output token after the first", summary=True,
       deterministic=True),
    _M("e2e_steps", ITERATIONS, LOWER, "E2E", "iterations from arrival to the last token", summary=True,
       deterministic=True),
    _M("requests.total", REQUESTS, NEITHER, "requests", "requests that arrived", deterministic=True),
    _M("requests.completed", REQUESTS, HIGHER, "completed", "requests that emitted all their tokens",
       deterministic=True),
    _M("requests.failed", REQUESTS, LOWER, "failed", "requests the engine rejected (see failed_by_reason)",
       deterministic=True),
    _M("requests.failed_by_reason", REQUESTS, LOWER, "failed by reason", "failed requests by reason",
       keyed=True, deterministic=True),
    _M("requests.unfinished", REQUESTS, LOWER, "unfinished", "requests neither completed nor failed",
       deterministic=True),
    _M("requests.evicted_events", COUNT, LOWER, "evictions",
       "paused requests evicted back to the queue (their KV freed)", deterministic=True),
    _M("requests.paused_events", COUNT, LOWER, "pauses", "times a running request missed a step for KV",
       deterministic=True),
    _M("output_tokens", TOKENS, NEITHER, "output tokens", "tokens emitted over all requests",
       deterministic=True),
    # time (backends with a clock)
    _M("makespan_s", S, LOWER, "makespan", "simulated or measured time from start to the last step",
       needs_clock=True),
    _M("queue_wait_ms", MS, LOWER, "queue wait", "time from arrival to first admission", summary=True,
       needs_clock=True),
    _M("ttft_ms", MS, LOWER, "TTFT", "time to first token", summary=True, needs_clock=True),
    _M("ttft_ms_deferred", MS, LOWER, "TTFT (deferred)", "TTFT of requests that gating deferred",
       summary=True, needs_clock=True),
    _M("ttft_ms_not_deferred", MS, LOWER, "TTFT (not deferred)", "TTFT of requests never deferred",
       summary=True, needs_clock=True),
    _M("tpot_ms", MS, LOWER, "TPOT", "time per output token after the first, per request", summary=True,
       needs_clock=True),
    _M("itl_ms", MS, LOWER, "ITL", "inter-token latency, over all emitted tokens", summary=True,
       needs_clock=True),
    _M("e2e_ms", MS, LOWER, "E2E", "time from arrival to the last token", summary=True, needs_clock=True),
    _M("output_throughput_tok_s", TOK_S, HIGHER, "output throughput", "output tokens / makespan",
       needs_clock=True),
    _M("total_throughput_tok_s", TOK_S, HIGHER, "total throughput", "(output + prompt tokens of completed "
       "requests) / makespan", needs_clock=True),
    _M("request_throughput_req_s", REQ_S, HIGHER, "request throughput", "completed requests / makespan",
       needs_clock=True),
    _M("goodput_slo", TEXT, NEITHER, "goodput SLO", "the slo.* bounds goodput counts against "
       "(ttft_ms<=500 tpot_ms<=50), or none: no bound set, and then no goodput", needs_clock=True),
    _M("goodput_req_s", REQ_S, HIGHER, "goodput", "completed requests meeting every slo.* bound / makespan "
       "(vLLM bench's request_goodput); null when no slo.* bound is set", needs_clock=True),
    _M("goodput_fraction", FRACTION, HIGHER, "goodput", "requests meeting every slo.* bound / all requests; "
       "null when no slo.* bound is set", needs_clock=True),
    _M("graphed_time_s", S, NEITHER, "graphed time", "time spent in graphed steps", needs_clock=True),
    _M("eager_time_s", S, LOWER, "eager time", "time spent in eager steps", needs_clock=True),
    _M("eager_time_fraction", FRACTION, LOWER, "eager time", "eager time / step time", needs_clock=True),
    # the load offered (open-loop arrivals: a rate, or a trace at its times; not closed_loop or
    # all_at_once, which offer none) and what was served of it (cgbench.results.load_metrics)
    _M("load.arrival_span_s", S, NEITHER, "arrival span", "time from the first arrival to the last",
       needs_clock=True, needs_open_loop=True),
    _M("load.offered_req_s", REQ_S, NEITHER, "offered rate", "(arrivals - 1) / arrival span: the workload's "
       "request rate", needs_clock=True, needs_open_loop=True),
    _M("load.offered_output_tok_s", TOK_S, NEITHER, "offered output", "offered rate x the mean output tokens "
       "the requests ask for (failed ones included)", needs_clock=True, needs_open_loop=True),
    _M("load.served_output_tok_s", TOK_S, HIGHER, "served output", "output tokens / (makespan - first arrival)",
       needs_clock=True, needs_open_loop=True),
    _M("load.served_fraction", FRACTION, HIGHER, "served share", "served / offered output rate: short of 1 by "
       "the last requests' own lives, or by a backlog", needs_clock=True, needs_open_loop=True),
    _M("load.drain_s", S, LOWER, "drain", "makespan - last arrival: how long the engine ran after the last "
       "request arrived", needs_clock=True, needs_open_loop=True),
    _M("load.backlog_s", S, LOWER, "backlog", "the median wait for admission of the last tenth of the arrivals "
       "(one never admitted: until the run ended): the queue left when the arrivals stopped",
       needs_clock=True, needs_open_loop=True),
    # the run's setup
    _M("gating_active", FLAG, NEITHER, "gating active",
       "whether graph-aware admission gating was active for this policy, grid and engine"),
    _M("num_graphs", COUNT, NEITHER, "graphs", "graphs in the captured list"),
    # expert parallelism (engine.ep_size > 1): the whole-system metrics above count rank-steps (every
    # rank's forward pass, dummy passes included); these break them down by rank
    _M("ep.ep_size", COUNT, NEITHER, "EP size", "expert-parallel ranks stepping together", needs_ep=True),
    _M("ep.moe_dispatcher", TEXT, NEITHER, "MoE dispatcher", "nccl, te (EP token-count matching, no "
       "non-decode graphs) or nvls (per-rank matching and gating)", needs_ep=True),
    _M("ep.lockstep_steps", COUNT, NEITHER, "lockstep steps", "collective steps (each is ep_size rank-steps)",
       deterministic=True, needs_ep=True),
    _M("ep.rank_eager_step_fraction", FRACTION, LOWER, "eager steps per rank",
       "per rank (a list): eager rank-steps / rank-steps", deterministic=True, needs_ep=True, per_rank=True),
    _M("ep.dummy_steps", COUNT, LOWER, "dummy steps", "dummy decode steps (1 + spec, 0, 1) run by idle ranks "
       "while another rank had work", deterministic=True, needs_ep=True),
    _M("ep.rank_dummy_steps", COUNT, LOWER, "dummy steps per rank", "per rank (a list): dummy steps",
       deterministic=True, needs_ep=True, per_rank=True),
    _M("ep.forced_eager_fraction", FRACTION, LOWER, "eager forced by another rank",
       "eager rank-steps forced by another rank's prefill (nccl/te) / all eager rank-steps",
       deterministic=True, needs_ep=True),
    _M("ep.rank_requests", REQUESTS, NEITHER, "requests per rank", "per rank (a list): requests routed to it",
       deterministic=True, needs_ep=True, per_rank=True),
    _M("ep.rank_completed", REQUESTS, NEITHER, "completed per rank", "per rank (a list): completed requests",
       deterministic=True, needs_ep=True, per_rank=True),
    _M("ep.load_imbalance", COUNT, LOWER, "load imbalance", "max over ranks of tokens generated / the mean "
       "over ranks (1 = balanced)", deterministic=True, needs_ep=True),
    # prefix caching (engine.prefix_caching; docs/prefix-caching.md)
    _M("prefix_cache.block_hit_rate", FRACTION, HIGHER, "prefix block hits",
       "hashed prompt blocks admissions found cached (shared, not computed) / hashed prompt blocks they "
       "covered (found + newly registered)", deterministic=True, needs_prefix=True),
    _M("prefix_cache.token_hit_rate", FRACTION, HIGHER, "prefix token hits",
       "prefill tokens skipped by a prefix hit / prompt tokens admitted (skipped + computed)",
       deterministic=True, needs_prefix=True),
    _M("prefix_cache.saved_prefill_tokens", TOKENS, HIGHER, "saved prefill tokens",
       "prompt tokens whose prefill a prefix hit skipped (their KV was shared)", deterministic=True,
       needs_prefix=True),
    _M("prefix_cache.computed_prefill_tokens", TOKENS, NEITHER, "computed prefill tokens",
       "prompt tokens prefilled (with prefix caching, what the steps' prefill rows hold)",
       deterministic=True, needs_prefix=True),
    _M("prefix_cache.hits", COUNT, NEITHER, "prefix hits", "admitted chunks that matched at least one cached "
       "block (Megatron's prefix_cache_hits)", deterministic=True, needs_prefix=True),
    _M("prefix_cache.blocks_matched", COUNT, NEITHER, "blocks matched", "cached blocks matched over all "
       "admissions (Megatron's prefix_cache_blocks_matched)", deterministic=True, needs_prefix=True),
    _M("prefix_cache.computed_tokens_per_prefill", TOKENS, NEITHER, "computed tokens per prefill",
       "computed prefill tokens / admitted chunks: the prefill rows' size in the steps' shapes",
       deterministic=True, needs_prefix=True),
    _M("prefix_cache.span_tokens_per_prefill", TOKENS, NEITHER, "prompt tokens per prefill",
       "prompt tokens admitted (skipped + computed) / admitted chunks: the rows' size without the skip",
       deterministic=True, needs_prefix=True),
    _M("prefix_cache.coordination_waits", COUNT, LOWER, "prefix coordination waits",
       "requests a scheduling pass held back because an admission of the same pass registers one of "
       "their block hashes (Megatron's _prefix_coordination_waits)", deterministic=True, needs_prefix=True),
    _M("prefix_cache.full_size_deferrals", COUNT, LOWER, "full-size gate deferrals",
       "non-chunked gating deferrals whose candidate, sized with the full remaining prompt as Megatron "
       "0.19.2 sizes it, missed every graph although the tokens the request computes would have hit one "
       "(the cost of the conservative gate; 0 with chunked prefill)", deterministic=True, needs_prefix=True),
    _M("prefix_cache.evicted_blocks", COUNT, NEITHER, "cached blocks evicted",
       "cached (unreferenced) blocks evicted, least recently used first, to make room", deterministic=True,
       needs_prefix=True),
    # data parallelism (engine.dp_size > 1): the whole-system metrics above merge every rank's steps and
    # requests (the makespan is the latest rank's); these break them down by rank (docs/data-parallel.md)
    _M("dp.dp_size", COUNT, NEITHER, "DP size", "data-parallel engines behind the coordinator", needs_dp=True),
    _M("dp.routing", TEXT, NEITHER, "DP routing", "the coordinator's policy (engine.dp_routing)", needs_dp=True),
    _M("dp.rank_steps", ITERATIONS, NEITHER, "steps per rank", "per rank (a list): steps it ran (dummy "
       "forwards of an EP group included)", deterministic=True, needs_dp=True, per_rank=True),
    _M("dp.rank_eager_step_fraction", FRACTION, LOWER, "eager steps per rank",
       "per rank (a list): eager steps / steps", deterministic=True, needs_dp=True, per_rank=True),
    _M("dp.rank_requests", REQUESTS, NEITHER, "requests per rank", "per rank (a list): requests routed to it",
       deterministic=True, needs_dp=True, per_rank=True),
    _M("dp.rank_completed", REQUESTS, NEITHER, "completed per rank", "per rank (a list): completed requests",
       deterministic=True, needs_dp=True, per_rank=True),
    _M("dp.rank_tokens", TOKENS, NEITHER, "tokens per rank", "per rank (a list): output tokens generated",
       deterministic=True, needs_dp=True, per_rank=True),
    _M("dp.rank_makespan_s", S, NEITHER, "makespan per rank", "per rank (a list): the rank's clock at the end",
       needs_clock=True, needs_dp=True, per_rank=True),
    _M("dp.request_imbalance", COUNT, LOWER, "request imbalance", "max over ranks of requests routed / the "
       "mean over ranks (1 = balanced)", deterministic=True, needs_dp=True),
    _M("dp.token_imbalance", COUNT, LOWER, "token imbalance", "max over ranks of output tokens generated / "
       "the mean over ranks (1 = balanced)", deterministic=True, needs_dp=True),
    _M("dp.most_eager_rank", COUNT, NEITHER, "most eager rank", "the rank with the highest eager step "
       "fraction (the lowest index on a tie)", deterministic=True, needs_dp=True),
    _M("dp.eager_fraction_spread", FRACTION, LOWER, "eager spread", "the most eager rank's eager step "
       "fraction minus the mean over ranks", deterministic=True, needs_dp=True),
)

# speculative decoding (engine.num_speculative_tokens > 0; docs/speculative.md). tpot_ms above is
# already TPOT as users measure it, per emitted token; under speculation a step emits 1 + accepted
_SPEC: tuple[Metric, ...] = (
    _M("spec.num_speculative_tokens", COUNT, NEITHER, "spec tokens", "drafts a decode row proposes per step (S)",
       needs_spec=True),
    _M("spec.acceptance_model", TEXT, NEITHER, "acceptance model",
       "engine.spec_acceptance: all_accepted (no model), per_position or lengths", needs_spec=True),
    _M("spec.step_engine", TEXT, NEITHER, "engine", "event_proportional, or step_by_step (a stochastic "
       "acceptance model, engine.oracle, or a plug-in policy)", needs_spec=True),
    _M("spec.decode_row_steps", COUNT, NEITHER, "decode row-steps",
       "decode rows stepped, summed over steps (each proposes S drafts)", deterministic=True, needs_spec=True),
    _M("spec.drafts_proposed", COUNT, NEITHER, "drafts proposed", "S x decode row-steps", deterministic=True,
       needs_spec=True),
    _M("spec.drafts_accepted", COUNT, HIGHER, "drafts accepted", "drafts the target model accepted (before a "
       "request's last step is clamped to its output)", deterministic=True, needs_spec=True),
    _M("spec.acceptance_rate", FRACTION, HIGHER, "acceptance rate", "drafts accepted / drafts proposed "
       "(Megatron's inference/spec_decode_acceptance_rate)", deterministic=True, needs_spec=True),
    _M("spec.decode_tokens", TOKENS, NEITHER, "decode tokens", "tokens emitted by decode steps (output tokens "
       "minus those the final prefill chunks emitted)", deterministic=True, needs_spec=True),
    _M("spec.tokens_per_step", COUNT, HIGHER, "tokens per step", "decode tokens / decode row-steps: tokens a "
       "request gets per decode step (1 + accepted, clamped on its last step); tpot_ms is the step time "
       "divided by it", deterministic=True, needs_spec=True),
    _M("spec.expected_tokens_per_step", COUNT, NEITHER, "expected tokens per step",
       "1 + the acceptance model's mean accepted drafts (before clamping)", needs_spec=True),
)
# what serving benchmarks report (vLLM's vllm bench serve, GuideLLM, AIPerf; cgbench.results.peer_metrics):
# each definition next to theirs in docs/metrics.md
_PEERS: tuple[Metric, ...] = (
    _M("input_tokens", TOKENS, NEITHER, "input tokens", "prompt tokens of completed requests (vLLM's "
       "total_input_tokens, AIPerf's total_isl)", deterministic=True),
    _M("input_length", TOKENS, NEITHER, "input length", "prompt tokens per completed request (AIPerf's "
       "input_sequence_length)", summary=True, deterministic=True),
    _M("output_length", TOKENS, NEITHER, "output length", "tokens emitted per completed request (AIPerf's "
       "output_sequence_length)", summary=True, deterministic=True),
    _M("batch_requests", REQUESTS, NEITHER, "batch requests", "requests in a step's batch (P + D: prefill "
       "chunks and decodes; paused requests not), over steps: the batch occupancy", summary=True,
       deterministic=True),
    _M("input_throughput_tok_s", TOK_S, HIGHER, "input throughput", "input_tokens / makespan",
       needs_clock=True),
    _M("peak_output_throughput_tok_s", TOK_S, HIGHER, "peak output throughput",
       "the most tokens emitted within one whole second of the run's clock ([k, k+1) s), first tokens "
       "included (vLLM's max_output_tokens_per_s; null when no token was emitted)", needs_clock=True),
    _M("concurrency", REQUESTS, NEITHER, "concurrency", "requests in flight (arrived, not yet completed or "
       "failed) over the run's time, each level weighted by how long it held (mean: Little's law); count: "
       "the requests that arrived", summary=True, needs_clock=True),
    _M("max_concurrent_requests", REQUESTS, NEITHER, "peak concurrency", "the most completed requests in "
       "flight at one time, each over [arrival, finish) (vLLM's max_concurrent_requests)", needs_clock=True),
)
METRICS = METRICS + _PEERS + _SPEC

REGISTRY: dict[str, Metric] = {m.name: m for m in METRICS}


def metric(name: str) -> Metric | None:
    """The registered metric for a (possibly dotted, possibly nested) name: ``ttft_ms.p99`` is
    ``ttft_ms``'s p99, ``eager_steps_by_reason.shape`` a key of a keyed record."""
    if name in REGISTRY:
        return REGISTRY[name]
    head, _, tail = name.rpartition(".")
    parent = REGISTRY.get(head)
    if parent is not None and (parent.keyed or (parent.summary and tail in ALL_SUMMARY_FIELDS)):
        if parent.summary and tail == "count":
            return Metric(name, COUNT, NEITHER, f"{parent.label} count", f"values in {parent.name}",
                          deterministic=parent.deterministic, needs_clock=parent.needs_clock)
        return Metric(name, parent.unit, parent.better, f"{parent.label} {tail}", parent.description,
                      deterministic=parent.deterministic, needs_clock=parent.needs_clock)
    return None


def column_names() -> list[str]:
    """Every name a table column can show: the scalar metrics and each summary's fields, in registry
    order (a keyed record's keys depend on the run: ``eager_steps_by_reason.shape`` is accepted too)."""
    out: list[str] = []
    for m in METRICS:
        if m.summary:
            out += [f"{m.name}.{f}" for f in SUMMARY_FIELDS]
        elif not (m.keyed or m.per_rank):
            out.append(m.name)
    return out


def parse_columns(text: str, option: str = "--columns") -> tuple[str, ...]:
    """``ttft_ms.p99,tpot_ms.p50`` -> the metric names, each checked against the registry; a
    ``ConfigError`` (one line, with the nearest name) for the first that is no column."""
    from cgbench.errors import ConfigError, did_you_mean

    names = [t.strip() for t in text.split(",")]
    if not any(names):
        raise ConfigError(f"{option}: name at least one metric (e.g. ttft_ms.p99,tpot_ms.p99)")
    known = column_names()
    for name in names:
        m = REGISTRY.get(name)
        if not name:
            raise ConfigError(f"{option}: an empty name in {text!r}")
        if m is not None and m.summary:
            raise ConfigError(f"{option}: {name} is a summary; name one of its fields: "
                              + ", ".join(f"{name}.{f}" for f in ("p50", "p99", "mean", "max")))
        if m is not None and m.keyed:
            raise ConfigError(f"{option}: {name} is keyed by name; name a key ({name}.KEY)")
        if m is not None and m.per_rank:
            raise ConfigError(f"{option}: {name} is a list, one value per rank: no column")
        if metric(name) is None:
            raise ConfigError(f"{option}: {name!r} is not a metric{did_you_mean(name, known)} "
                              "(docs/metrics.md lists them)")
    return tuple(dict.fromkeys(names))


def label(name: str, *, with_unit: bool = True) -> str:
    """A column header or axis label: ``TTFT p99 (ms)``; an unknown name is returned as given."""
    m = metric(name)
    if m is None:
        return name
    unit = "%" if m.unit == FRACTION else m.unit
    return f"{m.label} ({unit})" if with_unit and unit not in (TEXT, FLAG, COUNT) else m.label


def lookup(record: Mapping[str, Any], dotted: str) -> Any:
    """``record['a']['b']`` for ``'a.b'``; None where any part is missing."""
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def number_at(record: Mapping[str, Any], dotted: str) -> float | None:
    """The value at ``dotted`` if it is a number (not a bool), else None."""
    value = lookup(record, dotted)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def flatten(metrics: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested records -> (dotted name, leaf value) pairs; lists are leaves."""
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


def registered_top_level(*, ep: bool = False, prefix: bool = False) -> set[str]:
    """The top-level keys of a full ``metrics`` block (with time metrics; with the EP metrics if ``ep``,
    the prefix-cache ones if ``prefix``)."""
    return {m.name.split(".", 1)[0] for m in METRICS
            if (ep or not m.needs_ep) and (prefix or not m.needs_prefix)}
