"""Figures of one run: a summary (eager steps by reason, most-hit graphs), a per-iteration timeline
(needs ``--trace``) and queue-wait histograms (needs ``--requests``).

Long timelines are downsampled into at most ``TIMELINE_BINS`` bins: each bin draws the range and
the mean of tokens per iteration, while every eager iteration and every deferral is still drawn (per
bin counts when there are more than the bins), so rare events never average away.
"""

from __future__ import annotations

import math
from typing import Any

from cgbench.analysis.plots.data import metric_label
from cgbench.results.names import label

TIMELINE_BINS = 1500
ITERATION = "iteration"  # the x axis of every timeline: one engine step = one iteration


def _run_title(doc: dict[str, Any]) -> str:
    c = doc.get("config") or {}
    parts = [f"{k}={c.get(k, {}).get(f)}" for k, f in (("model", "name"), ("cg", "kind"), ("policy", "name"),
                                                       ("workload", "name"))]
    return "cgbench run: " + " ".join(parts)


def summary_figure(plt, doc: dict[str, Any]):
    m = doc["metrics"]
    reasons = m.get("eager_steps_by_reason") or {}
    used = sorted((g for g in doc.get("graph_usage") or [] if g.get("hits")), key=lambda g: -g["hits"])[:20]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    labels = ["graphed", *(f"eager: {k}" for k in reasons)]
    values = [m.get("graphed_steps", 0), *reasons.values()]
    a1.barh(labels, values, color=["tab:green"] + ["tab:red"] * len(reasons))
    a1.invert_yaxis()
    positive = [v for v in values if v > 0]
    if len(positive) > 1 and max(positive) >= 10 * min(positive):
        a1.set_xscale("log")  # a handful of eager steps next to thousands of graphed ones
    a1.set_title(f"steps ({100.0 * m.get('eager_step_fraction', 0.0):.1f}% eager)", fontsize=10)
    a1.set_xlabel(label("steps"))
    if used:
        a2.bar(range(len(used)), [g["hits"] for g in used], color="tab:blue")
        a2.set_xticks(range(len(used)), [str(tuple(g["graph"])) for g in used], rotation=60, ha="right",
                      fontsize=7)
    a2.set_title(f"most-hit graphs (T, P, D): {len(used)} shown", fontsize=10)
    a2.set_ylabel("hits (iterations)")
    for ax in (a1, a2):
        ax.grid(axis="x" if ax is a1 else "y", alpha=0.3)
    fig.suptitle(_run_title(doc), fontsize=10)
    fig.tight_layout()
    return fig


def _bins(n: int) -> int:
    return max(1, math.ceil(n / TIMELINE_BINS))


def timeline_figure(plt, steps: list[dict[str, Any]], title: str):
    """Tokens per iteration (range and mean per bin; eager iterations on top), queue and paused
    requests, and deferrals per bin with their running total."""
    w = _bins(len(steps))
    centre, lo, hi, mean, queue, paused, deferrals, eager_bins = [], [], [], [], [], [], [], []
    for start in range(0, len(steps), w):
        chunk = steps[start:start + w]
        toks = [s["real"][0] for s in chunk]
        centre.append(chunk[0]["step"] + (chunk[-1]["step"] - chunk[0]["step"]) / 2)
        lo.append(min(toks))
        hi.append(max(toks))
        mean.append(sum(toks) / len(toks))
        queue.append(max(s.get("queue_len", 0) for s in chunk))
        paused.append(max(s.get("paused", 0) for s in chunk))
        deferrals.append(sum(s.get("deferred") is not None for s in chunk))
        eager_bins.append(sum(not s.get("graph") for s in chunk))
    eager = [(s["step"], s["real"][0]) for s in steps if not s.get("graph")]
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(12, 7.5), sharex=True, gridspec_kw={"height_ratios": [2, 1, 1]})
    if w > 1:
        a1.fill_between(centre, lo, hi, color="tab:green", alpha=0.25, lw=0, label=f"range per {w} iterations")
    a1.plot(centre, mean, color="tab:green", lw=0.8, label="mean" if w > 1 else "tokens")
    if eager:
        a1.scatter([e[0] for e in eager], [e[1] for e in eager], s=9, color="tab:red", zorder=4,
                   label=f"eager ({len(eager)})")
    a1.set_ylabel("tokens per iteration (tokens)")
    shown = f", {w} iterations per bin" if w > 1 else ""
    a1.set_title(f"{title}: {len(eager)} eager of {len(steps)} iterations{shown}", fontsize=10)
    a1.legend(fontsize=7, loc="upper right", markerscale=1.5)
    a2.plot(centre, queue, color="tab:purple", lw=0.9, label="queue (max per bin)" if w > 1 else "queue")
    a2.plot(centre, paused, color="tab:orange", lw=0.9, label="paused (max per bin)" if w > 1 else "paused")
    a2.set_ylabel("requests")
    a2.legend(fontsize=7, loc="upper right")
    a3.vlines([c for c, d in zip(centre, deferrals, strict=True) if d], 0,
              [d for d in deferrals if d], color="tab:red", lw=1.0, label="iterations with a deferral, per bin")
    a3.set_ylabel("deferrals (iterations)")
    a3.set_xlabel(ITERATION)
    total = a3.twinx()
    running, acc = [], 0
    for d in deferrals:
        acc += d
        running.append(acc)
    total.plot(centre, running, color="0.3", lw=0.9, ls="--", label="running total")
    total.set_ylabel("running total (iterations)")
    a3.legend(fontsize=7, loc="upper left")
    total.legend(fontsize=7, loc="lower right")
    for ax in (a1, a2, a3):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def integer_bins(values: list[int], max_bins: int = 50) -> list[float]:
    """Histogram edges for integer counts: each bin holds the same number of whole values and is
    centred on them (edges at half-integers), so 0 and 1 get bins [-0.5, 0.5) and [0.5, 1.5), never
    [0, 0.5) and [0.5, 1]; at most ``max_bins`` bins."""
    lo, hi = min(values), max(values)
    width = -(-(hi - lo + 1) // max_bins)  # whole values per bin
    n = -(-(hi - lo + 1) // width)
    return [lo - 0.5 + k * width for k in range(n + 1)]


def queue_wait_figure(plt, requests: list[dict[str, Any]], title: str):
    """Histograms with a log count axis, so a tail of a few long waits stays visible."""
    waits = [r["first_admit_step"] - r["arrival_step"] for r in requests if r.get("first_admit_step", -1) >= 0]
    cg = [r.get("max_cg_wait_iters", 0) for r in requests]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, values, colour, name, what in (
            (a1, waits, "tab:purple", "queue_wait_iters", f"queue wait, arrival to first admission ({len(waits)} "
                                                          "requests)"),
            (a2, cg, "tab:red", "max_cg_wait_iters", "longest gating wait per request")):
        vals = values or [0]
        ax.hist(vals, bins=integer_bins(vals), color=colour)
        ax.set_yscale("log")
        ax.set_title(what, fontsize=10)
        ax.set_xlabel(metric_label(name))
        ax.set_ylabel("requests (log)")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
