"""Figures (PNG) of a sweep or of one run. matplotlib is imported only here, lazily, with Agg.

Sweep: eager-step fraction and longest gating wait per policy x grid for each model (grouped bars),
and a Pareto view (p99 TTFT and output throughput against the eager-step fraction).
One run: a summary (eager steps by reason, most-hit graphs), a per-step timeline (needs ``--trace``)
and a histogram of queue waits (needs ``--requests``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cgbench.config.overrides import overrides_by_key
from cgbench.config.schema import ConfigError
from cgbench.results.names import number

DPI = 110


@dataclass
class SweepRow:
    model: str
    policy: str
    grid: str  # the cg option (plus any other varying axis), the x group
    metrics: dict[str, Any]


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise ConfigError("cgbench plot needs matplotlib: pip install 'cgbench[plot]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(target: Path, out_dir: Path | None = None) -> tuple[list[Path], list[str]]:
    """Plot a sweep directory or one result JSON; (written PNG paths, notes about skipped figures)."""
    target = Path(target)
    if target.is_dir():
        return plot_sweep(target, out_dir or target / "plots")
    if target.is_file():
        return plot_run(target, out_dir or target.parent / "plots")
    raise ConfigError(f"{target}: no such file or directory")


# ---------------------------------------------------------------------------------------------- sweep


def _metric(m: dict[str, Any], name: str) -> float | None:
    return number(m, name)


def sweep_rows(sweep_dir: Path) -> list[SweepRow]:
    """One row per finished point, repeats (seeds) averaged."""
    from cgbench.analysis.sweep import DONE, load_index
    from cgbench.results.document import load_result

    index = load_index(sweep_dir)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for p in index["points"]:
        if p.get("status") != DONE:
            continue
        doc = load_result(sweep_dir / p["file"])
        cfg, params = doc.get("config") or {}, p.get("params") or {}
        # the option names as given (cg=dense, not its cg.kind), whether the axis varied or not
        given = overrides_by_key(p["overrides"])
        model = given.get("model") or cfg.get("model", {}).get("name", "?")
        policy = given.get("policy") or cfg.get("policy", {}).get("name", "?")
        grid = given.get("cg") or cfg.get("cg", {}).get("kind", "?")
        extra = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in params.items()
                 if k not in ("model", "policy", "cg", "seed", "model.name", "policy.name", "cg.kind")]
        groups[(str(model), str(policy), " ".join([str(grid), *extra]))].append(doc["metrics"])
    if not groups:
        raise ConfigError(f"{sweep_dir}: no finished points to plot")
    rows = []
    for (model, policy, grid), ms in groups.items():
        names = ("eager_step_fraction", "max_cg_wait_iters", "ttft_ms.p99", "ttft_steps.p99",
                 "output_throughput_tok_s")
        avg = {}
        for n in names:
            vals = [v for m in ms if (v := _metric(m, n)) is not None]
            if vals:
                avg[n] = sum(vals) / len(vals)
        rows.append(SweepRow(model, policy, grid, avg))
    return rows


def _ordered(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def plot_sweep(sweep_dir: Path, out_dir: Path) -> tuple[list[Path], list[str]]:
    rows = sweep_rows(sweep_dir)
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [_bars(plt, rows, out_dir / "sweep_eager_wait.png", sweep_dir.name)]
    notes: list[str] = []
    pareto = _pareto(plt, rows, out_dir / "sweep_pareto.png", sweep_dir.name)
    if pareto is None:
        notes.append("pareto: no TTFT metrics in the sweep's results")
    else:
        files.append(pareto)
    return files, notes


def _bars(plt, rows: list[SweepRow], path: Path, title: str) -> Path:
    models = _ordered([r.model for r in rows])
    policies = _ordered([r.policy for r in rows])
    grids = _ordered([r.grid for r in rows])
    by = {(r.model, r.policy, r.grid): r.metrics for r in rows}
    panels = (("eager_step_fraction", "eager-step fraction (%)", 100.0),
              ("max_cg_wait_iters", "longest gating wait (iterations)", 1.0))
    fig, axes = plt.subplots(len(models), 2, figsize=(12, 3.4 * len(models)), squeeze=False)
    width = 0.8 / max(1, len(policies))
    for i, model in enumerate(models):
        for j, (name, label, scale) in enumerate(panels):
            ax = axes[i][j]
            top = 0.0
            for k, policy in enumerate(policies):
                xs = [g + (k - (len(policies) - 1) / 2) * width for g in range(len(grids))]
                ys = [by.get((model, policy, g), {}).get(name, 0.0) * scale for g in grids]
                bars = ax.bar(xs, ys, width=width, label=policy)
                ax.bar_label(bars, fmt="%.3g", fontsize=6, padding=1)
                top = max(top, *ys)
            ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
            if top == 0:
                ax.text(0.5, 0.5, "0 for every point", transform=ax.transAxes, ha="center", color="0.4")
            ax.set_xticks(range(len(grids)), grids, fontsize=8)
            ax.set_title(f"{model}: {label}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(title="policy", fontsize=8)
    fig.suptitle(f"sweep {title}: policy x grid", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def pareto_front(points: list[tuple[float, float]], maximize_y: bool) -> list[int]:
    """Indices of the points no other point beats on both axes (x lower is better)."""
    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        ya, yb = (-a[1], -b[1]) if maximize_y else (a[1], b[1])
        return a[0] <= b[0] and ya <= yb and (a[0] < b[0] or ya < yb)

    return [i for i, p in enumerate(points) if not any(beats(q, p) for q in points)]


def _pareto(plt, rows: list[SweepRow], path: Path, title: str) -> Path | None:
    ttft = "ttft_ms.p99" if any("ttft_ms.p99" in r.metrics for r in rows) else "ttft_steps.p99"
    panels = [(ttft, f"p99 TTFT ({'ms' if ttft.startswith('ttft_ms') else 'steps'})", False)]
    if any("output_throughput_tok_s" in r.metrics for r in rows):
        panels.append(("output_throughput_tok_s", "output throughput (tok/s)", True))
    usable = [r for r in rows if ttft in r.metrics and "eager_step_fraction" in r.metrics]
    if not usable:
        return None
    policies = _ordered([r.policy for r in usable])
    models = _ordered([r.model for r in usable])
    markers = "osD^v<>Px*"
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    for ax, (name, label, maximize) in zip(axes[0], panels, strict=True):
        pts = [r for r in usable if name in r.metrics]
        xy = [(100.0 * r.metrics["eager_step_fraction"], r.metrics[name]) for r in pts]
        for r, (x, y) in zip(pts, xy, strict=True):
            k = policies.index(r.policy)
            # later policies draw smaller, so points that coincide (identical runs) stay visible
            ax.scatter(x, y, marker=markers[models.index(r.model) % len(markers)], color=colors[k % len(colors)],
                       s=max(12, 80 - 22 * k), zorder=3 + k)
            ax.annotate(r.grid, (x, y), fontsize=6, xytext=(4, 4), textcoords="offset points")
        front = sorted(xy[i] for i in pareto_front(xy, maximize))
        ax.scatter([p[0] for p in front], [p[1] for p in front], s=170, facecolors="none", edgecolors="k",
                   lw=0.8, zorder=2, label="Pareto front")
        if len(front) > 1:
            ax.plot([p[0] for p in front], [p[1] for p in front], color="0.4", lw=1, ls="--", zorder=1)
        for k, policy in enumerate(policies):
            ax.scatter([], [], color=colors[k % len(colors)], marker="o", label=f"policy={policy}")
        for k, model in enumerate(models):
            ax.scatter([], [], color="0.3", marker=markers[k % len(markers)], label=f"model={model}")
        ax.set_xlabel("eager-step fraction (%)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"sweep {title}: Pareto view", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------- one run


def plot_run(result: Path, out_dir: Path) -> tuple[list[Path], list[str]]:
    from cgbench.results.document import load_result

    doc = load_result(result)
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = result.stem
    files = [_summary(plt, doc, out_dir / f"{stem}_summary.png")]
    notes = []
    if doc.get("steps"):
        files.append(_timeline(plt, doc["steps"], out_dir / f"{stem}_timeline.png", stem))
    else:
        notes.append("timeline: skipped, the result has no per-step records (run with --trace)")
    if doc.get("requests"):
        files.append(_queue_waits(plt, doc["requests"], out_dir / f"{stem}_queue_wait.png", stem))
    else:
        notes.append("queue-wait histogram: skipped, the result has no per-request records (run with --requests)")
    return files, notes


def _summary(plt, doc: dict[str, Any], path: Path) -> Path:
    m = doc["metrics"]
    reasons = m.get("eager_steps_by_reason") or {}
    used = sorted((g for g in doc.get("graph_usage") or [] if g.get("hits")), key=lambda g: -g["hits"])[:20]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    labels = ["graphed", *(f"eager: {k}" for k in reasons)]
    values = [m.get("graphed_steps", 0), *reasons.values()]
    a1.barh(labels, values, color=["tab:green"] + ["tab:red"] * len(reasons))
    a1.invert_yaxis()
    a1.set_title(f"steps ({100.0 * m.get('eager_step_fraction', 0.0):.1f}% eager)", fontsize=10)
    a1.set_xlabel("steps")
    if used:
        a2.bar(range(len(used)), [g["hits"] for g in used], color="tab:blue")
        a2.set_xticks(range(len(used)), [str(tuple(g["graph"])) for g in used], rotation=60, ha="right",
                      fontsize=7)
    a2.set_title(f"most-hit graphs (T, P, D): {len(used)} shown", fontsize=10)
    a2.set_ylabel("hits")
    for ax in (a1, a2):
        ax.grid(axis="x" if ax is a1 else "y", alpha=0.3)
    fig.suptitle(_run_title(doc), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _run_title(doc: dict[str, Any]) -> str:
    c = doc.get("config") or {}
    parts = [f"{k}={c.get(k, {}).get(f)}" for k, f in (("model", "name"), ("cg", "kind"), ("policy", "name"),
                                                       ("workload", "name"))]
    return "cgbench run: " + " ".join(parts)


def _timeline(plt, steps: list[dict[str, Any]], path: Path, title: str) -> Path:
    x = [s["step"] for s in steps]
    tokens = [s["real"][0] for s in steps]
    graphed = [(s["step"], s["real"][0], s["graph"][0]) for s in steps if s.get("graph")]
    eager = [(s["step"], s["real"][0]) for s in steps if not s.get("graph")]
    cum, total = [], 0
    for s in steps:
        total += s.get("deferred") is not None
        cum.append(total)
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(12, 7.5), sharex=True,
                                     gridspec_kw={"height_ratios": [2, 1, 1]})
    a1.plot(x, tokens, color="0.75", lw=0.6, zorder=1)
    if graphed:
        a1.scatter([g[0] for g in graphed], [g[2] for g in graphed], s=3, color="tab:blue", alpha=0.35,
                   label="graph T (padded)", zorder=2)
        a1.scatter([g[0] for g in graphed], [g[1] for g in graphed], s=4, color="tab:green", label="graphed",
                   zorder=3)
    if eager:
        a1.scatter([e[0] for e in eager], [e[1] for e in eager], s=6, color="tab:red", label="eager", zorder=4)
    a1.set_ylabel("tokens per step")
    a1.set_title(f"{title}: {len(eager)} eager of {len(steps)} steps", fontsize=10)
    a1.legend(fontsize=7, loc="upper right", markerscale=2)
    a2.plot(x, [s.get("queue_len", 0) for s in steps], color="tab:purple", lw=0.9, label="queue")
    a2.plot(x, [s.get("paused", 0) for s in steps], color="tab:orange", lw=0.9, label="paused")
    a2.set_ylabel("requests")
    a2.legend(fontsize=7, loc="upper right")
    a3.plot(x, cum, color="tab:red", lw=1.0)
    a3.set_ylabel("steps with a deferral\n(cumulative)")
    a3.set_xlabel("step")
    for ax in (a1, a2, a3):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _queue_waits(plt, requests: list[dict[str, Any]], path: Path, title: str) -> Path:
    waits = [r["first_admit_step"] - r["arrival_step"] for r in requests if r.get("first_admit_step", -1) >= 0]
    cg = [r.get("max_cg_wait_iters", 0) for r in requests]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    a1.hist(waits or [0], bins=min(50, max(1, len(set(waits)))), color="tab:purple")
    a1.set_title(f"queue wait, arrival to first admission ({len(waits)} requests)", fontsize=10)
    a1.set_xlabel("steps")
    a1.set_ylabel("requests")
    a2.hist(cg or [0], bins=min(50, max(1, len(set(cg)))), color="tab:red")
    a2.set_title("longest gating wait per request (cg_wait_iters)", fontsize=10)
    a2.set_xlabel("iterations")
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
