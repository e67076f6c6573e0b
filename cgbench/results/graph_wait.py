"""The ``long_graph_wait`` health flag: a request held back by gating long enough to matter.

Megatron's own rule (its starvation warning, ``starvation_warnings``) fires at ``max(100,
max_sequence_length)`` consecutive waits: 16,384 iterations on the Azure preset, 131,072 on
Mooncake's, waits no run reaches. This flag asks instead whether a wait is long for *this* run and
*this* request, in iterations and in seconds (docs/metrics.md, "Health flags"): a wait of at least
``LONG_WAIT_MIN_ITERS`` iterations that is

* a large share of the run: ``LONG_WAIT_RUN_SHARE`` of its steps; or
* a large share of the request's own life: ``LONG_WAIT_LIFE_SHARE`` of the iterations from its
  arrival to its finish (to the run's end if it never finished): gating, not its own work, decides
  its latency; or
* long in time: ``LONG_WAIT_S`` seconds, or ``slo.ttft_ms`` when it is set (a wait the TTFT bound
  cannot absorb), at the run's mean step time (busy time / steps: an estimate, the run records no
  per-wait clock; the steps a request waits through are mostly decode steps, shorter than the mean
  when prefills are long, so the estimate leans high); or
* Megatron's threshold itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cgbench.config.schema import BenchConfig
from cgbench.results.formatting import number, percent

LONG_WAIT_MIN_ITERS = 50  # half Megatron's floor of 100: fewer rounds are routine gating, never a flag
LONG_WAIT_RUN_SHARE = 0.1  # of the run's steps
LONG_WAIT_LIFE_SHARE = 0.5  # of the request's own life, in iterations
LONG_WAIT_S = 1.0  # seconds (without slo.ttft_ms): what a user feels in a chat's time to first token


def starvation_threshold(cfg: BenchConfig) -> int:
    """Megatron's starvation warning threshold: every ``max(100, max_sequence_length)`` waits."""
    return max(100, cfg.engine.max_sequence_length)


def seconds_threshold(cfg: BenchConfig) -> float:
    return cfg.slo.ttft_ms / 1000.0 if cfg.slo.ttft_ms is not None else LONG_WAIT_S


def mean_step_s(metrics: Mapping[str, Any]) -> float | None:
    """Busy time / steps (None without a clock or without steps)."""
    steps = metrics.get("steps") or 0
    busy = (metrics.get("graphed_time_s") or 0.0) + (metrics.get("eager_time_s") or 0.0)
    return busy / steps if steps and busy > 0 else None


def run_threshold(metrics: Mapping[str, Any], cfg: BenchConfig) -> int:
    """The shortest wait that is long for any request of this run (before its own life is asked)."""
    options = [starvation_threshold(cfg), math.ceil(LONG_WAIT_RUN_SHARE * (metrics.get("steps") or 0))]
    step_s = mean_step_s(metrics)
    if step_s is not None:
        options.append(math.ceil(seconds_threshold(cfg) / step_s))
    return max(LONG_WAIT_MIN_ITERS, min(options))


def waits(deferrals: Mapping[str, Any] | None, metrics: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(wait, request id, life in iterations) of every deferred request, longest wait first (then by
    id); the longest wait alone, its life unknown (0), without a ``deferrals`` record."""
    if deferrals is None:
        worst = metrics.get("max_cg_wait_iters") or 0
        return [(worst, metrics.get("max_cg_wait_request"), 0)] if worst else []
    columns, steps = deferrals["columns"], metrics.get("steps") or 0
    out = []
    for row in deferrals["rows"]:
        r = dict(zip(columns, row, strict=True))
        end = r["finish_step"] if r["finish_step"] >= 0 else steps
        out.append((r["max_cg_wait_iters"], r["id"], max(1, end - r["arrival_step"] + 1)))
    return sorted(out, key=lambda w: (-w[0], w[1]))


def long_graph_wait_flag(metrics: Mapping[str, Any], cfg: BenchConfig,
                         deferrals: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The flag for the longest wait that is long (module docstring), or None."""
    base = run_threshold(metrics, cfg)
    for wait, rid, life in waits(deferrals, metrics):
        if wait < LONG_WAIT_MIN_ITERS:
            break  # longest first: no later one qualifies either
        own = max(LONG_WAIT_MIN_ITERS, math.ceil(LONG_WAIT_LIFE_SHARE * life)) if life else base
        threshold = min(base, own)
        if wait >= threshold:
            return _flag(metrics, cfg, wait, rid, life, threshold)
    return None


def _flag(metrics: Mapping[str, Any], cfg: BenchConfig, wait: int, rid: int, life: int,
          threshold: int) -> dict[str, Any]:
    steps, step_s = metrics.get("steps") or 0, mean_step_s(metrics)
    seconds = wait * step_s if step_s is not None else None
    facts = []
    if seconds is not None:
        facts.append(f"about {number(seconds)} s at the run's mean step time of {number(1000 * step_s)} ms")
    if life:
        facts.append(f"{percent(wait / life, 0)} of its {number(life)}-iteration life")
    if steps:
        facts.append(f"{percent(wait / steps, 1)} of the run's {number(steps)} steps")
    return {"code": "long_graph_wait", "request": rid, "iterations": wait, "threshold": threshold,
            "seconds": seconds,
            "message": f"request {rid} waited {number(wait)} consecutive iterations for a graph ("
                       + "; ".join(facts) + f"): long for this run (from {number(threshold)} iterations; "
                       f"Megatron's own warning fires at {number(starvation_threshold(cfg))})"}
