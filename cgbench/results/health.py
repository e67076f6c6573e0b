"""Run health flags: what a reader of a result must not miss, as ``warnings: [...]``.

A run can "complete" and still be useless: requests starved by gating, requests rejected, a stall,
throughput collapsed against the no-gating policy. Each flag is a record ``{code, message}``.
``cgbench.pipeline.run_point`` computes every flag, so a sweep point carries the same flags as a
``cgbench run`` of its config. ``cgbench run`` alone also saves the ``cgbench schedule`` state that
shows a gating flag's first case next to its result, and the flag names it (``explain``,
``state_file``).

Flags:

* ``incomplete``: the run stalled or hit its step bound (``metrics.outcome``).
* ``failed_requests``: the engine rejected requests (``requests.failed``).
* ``starvation``: the engine's starvation warning fired (a request waited ``max(100, msl)``
  consecutive iterations for a graph): Megatron's rule, as Megatron counts it.
* ``long_graph_wait``: a request waited long for a graph for this run and this request: a share of
  the run's steps, of the request's own life, or a time (``cgbench.results.graph_wait``).
* ``heavy_deferral``: gating deferred a request in at least half of the steps (the queue is admitted
  one request at a time while decodes run: a serialised workload, whatever the per-request wait).
* ``memory``: weights + the modelled KV pool exceed ``hardware.memory_gb`` per GPU.
* ``throughput_collapse``: output throughput below ``1 / factor`` of the same config under the
  ``budget`` policy (no gating), when that figure is known (``throughput_collapse``).
* ``dp_eager_rank``: with data parallelism, one rank runs eager far more often than the others (its
  eager step fraction at least ``DP_EAGER_GAP`` above and ``DP_EAGER_RATIO`` times the others'
  mean): the routing hands it the shapes no graph covers (``dp.most_eager_rank``).
* ``ttft_collapse``: p99 TTFT at least ``TTFT_COLLAPSE_FACTOR`` times the same config's under the
  ``budget`` policy (PR #6675's chat run: ~15 minutes where no gating takes seconds); computed from
  the same no-gating run as ``throughput_collapse``, so only when a gating flag fired.

Trace flags (``trace_warnings``, from the ``TraceSummary`` of a replayed trace):

* ``trace_arrival_units``: arrivals read as seconds look like milliseconds (whole numbers, median
  gap of 10 s or more over the first 1,000): the key to set, ``workload.trace_arrival_unit=ms``.
  (Epoch and wall-clock arrivals are detected and counted from the first one: the result's
  ``trace.note`` says so.)
* ``trace_beyond_max_sequence_length``: prompts the engine fails (longer than
  ``engine.max_sequence_length``) or whose outputs it cuts (prompt + output longer), counted, with
  the value of the key that fits every request; ``trace_beyond_max_tokens``: without chunked
  prefill, prompts longer than ``engine.max_tokens`` fail.

Load flag (open-loop arrivals only: a rate or a trace at its times; the ``load`` block):

* ``overload``: the workload offers more than the engine serves: the served output rate is below
  ``OVERLOAD_SERVED_SHARE`` of the offered one while the last arrivals waited at least
  ``OVERLOAD_BACKLOG_SHARE`` of the arrival span (and ``OVERLOAD_MIN_BACKLOG_S``) to be admitted, or
  the last request finished more
  than ``OVERLOAD_DRAIN`` of the span (and ``OVERLOAD_MIN_DRAIN_S``) after the last arrival. The
  latencies then measure a growing queue. A closed loop or ``all_at_once`` offers no load: no flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cgbench.config.schema import BenchConfig
from cgbench.results.formatting import number, percent
from cgbench.results.graph_wait import long_graph_wait_flag, starvation_threshold
from cgbench.workload.trace_summary import TraceSummary

COLLAPSE_FACTOR = 2.0
TTFT_COLLAPSE_FACTOR = 10.0  # "many times": a gate that waits for nothing, not a few slower first tokens
HEAVY_DEFERRAL = 0.5  # deferral events per step
# overload (docs/metrics.md, "Health flags", gives the reasoning and the figures behind each value)
OVERLOAD_SERVED_SHARE = 0.95  # served output rate / offered, below it ...
OVERLOAD_BACKLOG_SHARE = 0.05  # ... with the last arrivals waiting this share of the span for admission ...
OVERLOAD_MIN_BACKLOG_S = 5.0  # ... and at least this long
OVERLOAD_DRAIN = 0.25  # or the last request finishing this share of the span after the last arrival ...
OVERLOAD_MIN_DRAIN_S = 60.0  # ... and more than this
GATING_FLAGS = ("long_graph_wait", "heavy_deferral", "starvation")
DP_EAGER_GAP = 0.05  # eager step fraction above the other ranks' mean
DP_EAGER_RATIO = 2.0


def health_warnings(metrics: Mapping[str, Any], cfg: BenchConfig, trace: TraceSummary | None = None,
                    deferrals: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The flags that ``metrics`` (a result's ``metrics`` block) raises, ``trace``'s, and with the
    result's ``deferrals`` record the waits that are long for their own request."""
    flags: list[dict[str, Any]] = trace_warnings(trace, cfg) if trace is not None else []
    if metrics.get("outcome") not in (None, "completed"):
        flags.append({"code": "incomplete",
                      "message": f"run {metrics['outcome']}: {metrics.get('diagnosis') or 'no diagnosis'}"})
    req = metrics.get("requests") or {}
    if req.get("failed"):
        by_reason = req.get("failed_by_reason") or {}
        reasons = ", ".join(f"{k} {v}" for k, v in by_reason.items())
        flags.append({"code": "failed_requests",
                      "message": f"{req['failed']} of {req.get('total', '?')} requests failed ({reasons})"
                                 + _failure_fix(by_reason, cfg, trace)})
    worst, who = metrics.get("max_cg_wait_iters") or 0, metrics.get("max_cg_wait_request")
    if metrics.get("starvation_warnings"):
        flags.append({"code": "starvation",
                      "message": f"{metrics['starvation_warnings']} starvation warnings: requests waited "
                                 f"{number(starvation_threshold(cfg))}+ consecutive iterations for a graph "
                                 f"(longest: request {who}, {number(worst)} iterations)"})
    long_wait = long_graph_wait_flag(metrics, cfg, deferrals)
    if long_wait is not None:
        flags.append(long_wait)
    steps, deferrals = metrics.get("steps") or 0, metrics.get("deferral_events") or 0
    if steps and deferrals >= HEAVY_DEFERRAL * steps:
        flags.append({"code": "heavy_deferral",
                      "message": f"gating held a request back in {percent(deferrals / steps)} of steps "
                                 f"({number(deferrals)} deferrals in {number(steps)} steps; longest wait "
                                 f"{number(worst)} iterations, request {who}): the queue is served one at a time"})
    flags += memory_flags(cfg)
    flags += dp_eager_rank_flag(metrics)
    flags += overload_flag(metrics, cfg)
    return flags


def overload_flag(metrics: Mapping[str, Any], cfg: BenchConfig) -> list[dict[str, Any]]:
    """``overload`` (see the module docstring), from the ``load`` block of an open-loop run."""
    load = metrics.get("load")
    if not isinstance(load, Mapping):
        return []  # a closed loop or all_at_once: no offered load to fall short of
    span, drain, backlog = load["arrival_span_s"], load["drain_s"], load["backlog_s"]
    short = (load["served_fraction"] < OVERLOAD_SERVED_SHARE
             and backlog >= max(OVERLOAD_BACKLOG_SHARE * span, OVERLOAD_MIN_BACKLOG_S))
    long_drain = drain > max(OVERLOAD_DRAIN * span, OVERLOAD_MIN_DRAIN_S)
    if not (short or long_drain):
        return []
    w = cfg.workload
    fix = ("raise workload.time_scale (it stretches the arrivals)" if w.trace
           else "lower workload.arrival.rate")
    return [{"code": "overload", "served_fraction": load["served_fraction"], "backlog_s": backlog, "drain_s": drain,
             "message": f"the {'trace' if w.trace else 'workload'} offers {number(load['offered_req_s'], 2)} req/s "
                        f"({number(load['offered_output_tok_s'], 0)} output tok/s over {number(span)} s); the "
                        f"engine served {number(load['served_output_tok_s'], 0)} tok/s "
                        f"({percent(load['served_fraction'], 0)}), the last arrivals waited {number(backlog)} s "
                        f"to be admitted and the last request finished {number(drain)} s after the last arrival: "
                        f"latencies measure a growing queue, not the engine; {fix}, or give the engine more "
                        "capacity"}]


def dp_eager_rank_flag(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``dp_eager_rank`` (see the module docstring), from the ``dp`` block of a data-parallel run."""
    dp = metrics.get("dp")
    if not dp:
        return []
    eager, worst = dp["rank_eager_step_fraction"], dp["most_eager_rank"]
    others = [f for i, f in enumerate(eager) if i != worst]
    mean = sum(others) / len(others)
    if eager[worst] - mean < DP_EAGER_GAP or eager[worst] < DP_EAGER_RATIO * mean:
        return []
    return [{"code": "dp_eager_rank", "rank": worst,
             "message": f"data-parallel rank {worst} ran {percent(eager[worst])} of its steps eager, the other "
                        f"ranks {percent(mean)} on average: the routing (engine.dp_routing={dp['routing']}) "
                        "gives it the shapes the graphs miss"}]


def _failure_fix(by_reason: Mapping[str, int], cfg: BenchConfig, trace: TraceSummary | None) -> str:
    """The keys to raise for the length failures among ``by_reason`` ("" when there are none)."""
    fixes = []
    if by_reason.get("prompt_exceeds_max_sequence_length"):
        fit = f" to {fitting_length(trace.max_request_tokens, cfg)}" if trace is not None else ""
        fixes.append(f"raise engine.max_sequence_length{fit} (now {cfg.engine.max_sequence_length})")
    if by_reason.get("prompt_exceeds_max_tokens"):
        fixes.append(f"set engine.chunked_prefill=true or raise engine.max_tokens (now {cfg.engine.max_tokens})")
    return "; " + "; ".join(fixes) if fixes else ""


def fitting_length(tokens: int, cfg: BenchConfig) -> int:
    """The ``engine.max_sequence_length`` that holds ``tokens``: rounded up to whole KV blocks."""
    block = cfg.engine.block_size
    return -(-tokens // block) * block


def trace_warnings(trace: TraceSummary, cfg: BenchConfig) -> list[dict[str, Any]]:
    """The trace flags (module docstring) of a replayed trace."""
    flags: list[dict[str, Any]] = []
    timed = cfg.workload.open_loop  # a closed loop ignores the trace's arrival times
    assumed_seconds = trace.arrival_unit == "s" and trace.unit_how != "workload.trace_arrival_unit"
    if timed and assumed_seconds and trace.looks_like_ms():
        flags.append({"code": "trace_arrival_units",
                      "message": f"the arrivals of {trace.file} look like milliseconds read as seconds (whole "
                                 f"numbers, {trace.requests:,} requests over {number(trace.span_s)} s): set "
                                 "workload.trace_arrival_unit=ms"})
    e = cfg.engine
    msl = e.max_sequence_length
    prompts, requests = trace.over(msl)
    if requests:
        n = trace.requests
        flags.append({"code": "trace_beyond_max_sequence_length", "prompts": prompts, "cut": requests - prompts,
                      "fits": fitting_length(trace.max_request_tokens, cfg),
                      "message": f"{number(prompts)} of {number(n)} prompts ({percent(prompts / n)}) exceed "
                                 f"engine.max_sequence_length={msl} and fail, {number(requests - prompts)} more have "
                                 f"their output cut (prompt + output > {msl}); "
                                 f"engine.max_sequence_length={fitting_length(trace.max_request_tokens, cfg)} "
                                 "fits every request"})
    if not e.chunked_prefill:
        long_prompts = sum(1 for x in trace.prompt_lengths if e.max_tokens < x <= msl)
        if long_prompts:
            flags.append({"code": "trace_beyond_max_tokens", "prompts": long_prompts,
                          "message": f"{number(long_prompts)} prompts are longer than engine.max_tokens="
                                     f"{e.max_tokens} and fail without chunked prefill: set "
                                     "engine.chunked_prefill=true or raise engine.max_tokens"})
    return flags


def memory_flags(cfg: BenchConfig) -> list[dict[str, Any]]:
    """``memory``: the weights + the KV pool the engine modelled exceed the hardware's memory (a
    what-if run, or ``engine.kv_blocks=0``'s idealised pool of max_requests full-length sequences)."""
    from cgbench.backends.sim.memory import memory_need

    need = memory_need(cfg)
    if need.total_gb <= need.capacity_gb:
        return []
    fit = need.kv_blocks_that_fit(cfg)
    pool = "engine.kv_blocks=0 sizes the KV pool for max_requests full-length sequences: " if need.auto_kv else ""
    return [{"code": "memory", "message": f"{pool}weights {need.weights_gb:.1f} GB + KV {need.kv_gb:.1f} GB = "
                                          f"{need.total_gb:.1f} GB per GPU exceeds {cfg.hardware.name}'s "
                                          f"{need.capacity_gb:g} GB (engine.kv_blocks={fit} would fit)"}]


def throughput_collapse(metrics: Mapping[str, Any], no_gating: Mapping[str, Any],
                        factor: float = COLLAPSE_FACTOR) -> dict[str, Any] | None:
    """A ``throughput_collapse`` flag when output throughput fell below ``1/factor`` of the same
    config's no-gating (``budget``) run; None when it did not or a figure is missing."""
    mine, base = metrics.get("output_throughput_tok_s"), no_gating.get("output_throughput_tok_s")
    if not isinstance(mine, (int, float)) or not isinstance(base, (int, float)) or base <= 0:
        return None
    if mine * factor >= base:
        return None
    return {"code": "throughput_collapse", "ratio": base / mine if mine > 0 else None,
            "message": (f"output throughput {number(mine, 0)} tok/s is {base / mine:.1f}x below " if mine > 0
                        else "no output at all, ") + f"against the no-gating policy (budget: {number(base, 0)} tok/s)"}


def ttft_collapse(metrics: Mapping[str, Any], no_gating: Mapping[str, Any],
                  factor: float = TTFT_COLLAPSE_FACTOR) -> dict[str, Any] | None:
    """A ``ttft_collapse`` flag when p99 TTFT is at least ``factor`` times the same config's
    no-gating (``budget``) run; None when it is not or a figure is missing."""
    mine, base = _p99_ttft(metrics), _p99_ttft(no_gating)
    if mine is None or base is None or base <= 0 or mine < factor * base:
        return None
    return {"code": "ttft_collapse", "ratio": mine / base,
            "message": f"p99 TTFT {number(mine, 0)} ms is {mine / base:.1f}x the no-gating policy's "
                       f"(budget: {number(base, 0)} ms)"}


def _p99_ttft(metrics: Mapping[str, Any]) -> float | None:
    ttft = metrics.get("ttft_ms")
    value = ttft.get("p99") if isinstance(ttft, Mapping) else None
    return float(value) if isinstance(value, (int, float)) else None


def flag_codes(doc: Mapping[str, Any]) -> list[str]:
    """The codes of a result document's warnings (its health flags), in order, each once; [] is healthy."""
    return list(dict.fromkeys(str(w.get("code", "")) for w in doc.get("warnings") or []))


def gating_flag(warnings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first gating flag among ``warnings``: the one a saved ``cgbench schedule`` state explains."""
    return next((w for w in warnings if w["code"] in GATING_FLAGS), None)


def link_state_file(flag: dict[str, Any], state_path: Path) -> None:
    """Name the ``cgbench schedule`` state saved for ``flag`` (and the command that replays it)."""
    flag["explain"] = f"cgbench schedule {state_path}"
    flag["state_file"] = str(state_path)


def explain_wait_limit(metrics: Mapping[str, Any], cfg: BenchConfig, flag: Mapping[str, Any] | None = None) -> int:
    """The wait whose first case best shows a gating flag: the longest wait, capped at the flag's
    threshold (``long_graph_wait``'s), else at Megatron's starvation threshold."""
    cap = flag.get("threshold") if flag is not None else None
    if not isinstance(cap, int):
        cap = starvation_threshold(cfg)
    return max(1, min(metrics.get("max_cg_wait_iters") or 1, cap))
