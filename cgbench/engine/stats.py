"""Step statistics: the per-step accumulators the engine updates as it runs (``StepStats``) and
the one way a step, or a stretch of equal steps, is added to them. ``cgbench.results.metrics`` turns
them into the result's metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class StepStats:
    """Per-step accumulators the engine updates (no per-step allocation)."""

    steps: int = 0
    graphed_steps: int = 0
    eager_steps: int = 0
    eager_reasons: Counter = field(default_factory=Counter)
    tokens: int = 0
    eager_tokens: int = 0
    graphed_tokens: int = 0  # real tokens in graphed steps
    padded_tokens: int = 0  # padding in graphed steps
    graphed_time_s: float = 0.0
    eager_time_s: float = 0.0
    mixed_steps: int = 0  # steps with P > 0 and D > 0
    prefill_only_steps: int = 0
    decode_only_steps: int = 0
    # (T, P, D) -> [hits, real_tokens, padded_tokens]
    graph_usage: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    itl: dict[float, int] = field(default_factory=dict)  # inter-token gap (s) -> tokens emitted after that gap
    # whole second of the clock (int(t)) -> tokens emitted in it, first tokens included (the peak output rate)
    emitted_by_second: dict[int, int] = field(default_factory=dict)
    batch_requests: dict[int, int] = field(default_factory=dict)  # P + D of a step (its batch) -> steps
    paused_events: int = 0
    evicted_events: int = 0
    max_queue_len: int = 0
    decode_rows: int = 0  # Σ D over steps: decode row-steps (an EP rank's dummy decode included)
    prefill_emitted: int = 0  # tokens emitted by final prefill chunks (the rest are decode tokens)


def record_steps(stats: StepStats, T: int, P: int, D: int, graph: tuple[int, int, int] | None,
                 reason: str | None, durations: Sequence[float], queue_len: int) -> None:
    """Account ``len(durations)`` steps of real shape ``(T, P, D)``, all replaying ``graph`` (or all eager
    for ``reason``). Their durations are added to the busy time one by one, in step order, so a
    stretch recorded at once gives the same floats as its steps recorded one at a time."""
    k = len(durations)
    if k == 0:
        return
    busy = stats.graphed_time_s if graph is not None else stats.eager_time_s
    busy = busy + durations[0] if k == 1 else add_in_order(busy, durations)
    record_step_totals(stats, T, P, D, graph, reason, k, busy, queue_len)


def record_step_totals(stats: StepStats, T: int, P: int, D: int, graph: tuple[int, int, int] | None,
                       reason: str | None, k: int, busy_s: float, queue_len: int) -> None:
    """``record_steps`` for a caller that added the ``k`` steps' durations to the graphed (or eager) busy
    time itself, in step order: ``busy_s`` is that running sum's new value."""
    if k == 0:
        return
    stats.steps += k
    stats.tokens += k * T
    stats.decode_rows += k * D
    batch = stats.batch_requests
    batch[P + D] = batch.get(P + D, 0) + k
    if P == 0:
        stats.decode_only_steps += k
    elif D == 0:
        stats.prefill_only_steps += k
    else:
        stats.mixed_steps += k
    if graph is not None:
        stats.graphed_time_s = busy_s
        pad = graph[0] - T
        stats.graphed_steps += k
        stats.graphed_tokens += k * T
        stats.padded_tokens += k * pad
        usage = stats.graph_usage.get(graph)
        if usage is None:
            stats.graph_usage[graph] = [k, k * T, k * pad]
        else:
            usage[0] += k
            usage[1] += k * T
            usage[2] += k * pad
    else:
        stats.eager_time_s = busy_s
        stats.eager_steps += k
        stats.eager_tokens += k * T
        stats.eager_reasons[reason] += k
    if queue_len > stats.max_queue_len:
        stats.max_queue_len = queue_len


def add_emitted(stats: StepStats, t_s: float, n: int) -> None:
    """``n`` tokens emitted at time ``t_s`` (>= 0): counted in the whole second they fall in."""
    by = stats.emitted_by_second
    second = int(t_s)
    by[second] = by.get(second, 0) + n


def add_in_order(total: float, durations: Sequence[float]) -> float:
    """``total + d0 + d1 + ...`` left to right (a running sum, never reassociated)."""
    if len(durations) > 512:
        import numpy as np

        acc = np.empty(len(durations) + 1)
        acc[0] = total
        acc[1:] = durations
        return float(np.add.accumulate(acc)[-1])  # sequential: the same float as the loop below
    for dt in durations:
        total += dt
    return total
