"""The figure of an advise report: the objective against the number of captured graphs, every
completed candidate by search space, the Pareto front joined and the recommendation circled
(``cgbench advise --plot`` saves it; ``cgbench report`` embeds it)."""

from __future__ import annotations

from typing import Any


def advise_pareto_figure(plt, doc: dict[str, Any]):
    """Objective against graph count of the advise report ``doc``: a matplotlib Figure."""
    obj = doc["objective"]
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    done = [c for c in doc["candidates"] if c["metrics"].get("outcome") == "completed" and c["objective"] is not None]
    for space, marker in (("megatron", "o"), ("explicit", "s"), ("default", "*")):
        pts = [c for c in done if c["space"] == space]
        if pts:
            ax.scatter([c["num_graphs"] for c in pts], [c["objective"] for c in pts], marker=marker,
                       s=140 if space == "default" else 36, label=space, zorder=2 if space == "default" else 3,
                       alpha=0.8)
    by_name = {c["name"]: c for c in done}
    front = [by_name[n] for n in doc["pareto"] if n in by_name]
    ax.plot([c["num_graphs"] for c in front], [c["objective"] for c in front], color="0.3", ls="--", lw=1,
            label="Pareto front", zorder=2)
    rec = doc["recommended"]
    if rec is not None and rec["name"] in by_name:
        c = by_name[rec["name"]]
        ax.scatter([c["num_graphs"]], [c["objective"]], s=220, facecolors="none", edgecolors="red", lw=1.2,
                   label=f"recommended ({c['name']})", zorder=4)
    ax.axvline(doc["budgets"]["graphs"], color="0.6", lw=0.8, ls=":", label="graph budget")
    values = [c["objective"] for c in done]
    if values and min(values) > 0 and max(values) > 20 * min(values):
        ax.set_yscale("log")  # a starved candidate would flatten every other point
    ax.set_xlabel("captured graphs")
    ax.set_ylabel(f"{obj['metric']}" + (f" ({obj['unit']})" if obj["unit"] else ""))
    ax.set_title(f"cgbench advise: {' '.join(doc['overrides']) or 'defaults'}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
