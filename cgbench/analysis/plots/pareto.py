"""The Pareto view: a latency or throughput metric against the eager-step fraction, one panel per
facet (models and loads are never mixed in one frontier), the frontier of each panel circled.

Colour = policy, marker = grid. Points that coincide exactly are drawn once, ringed, and labelled
with the series that share them (``budget = megatron``). Every panel has the same y scale (log when
the values of all panels span a decade or more, else linear); a linear axis prints plain numbers (no
offset) and spans at least ``layout.MIN_RELATIVE_SPAN`` of its values, so a spread of a few
thousandths of a percent looks like one, not like the panel's full height.
"""

from __future__ import annotations

from collections import defaultdict

from cgbench.analysis.plots.data import (
    Record,
    compound,
    facet_title,
    metric_label,
    ordered_values,
    scaled,
    spans_decades,
)
from cgbench.analysis.plots.layout import (
    bottom_legend,
    declutter,
    figure_title,
    plain_linear_span,
    plain_log_ticks,
    point_labels_inside,
)
from cgbench.results.names import HIGHER, metric

X_METRIC = "eager_step_fraction"
MARKERS = "osD^v<>Px*"


def pareto_front(points: list[tuple[float, float]], maximize_y: bool) -> list[int]:
    """Indices of the points no other point beats on both axes (x lower is better)."""
    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        ya, yb = (-a[1], -b[1]) if maximize_y else (a[1], b[1])
        return a[0] <= b[0] and ya <= yb and (a[0] < b[0] or ya < yb)

    return [i for i, p in enumerate(points) if not any(beats(q, p) for q in points)]


def pareto_figure(plt, records: list[Record], facet_keys: list[str], hue: str | None, marker_key: str | None,
                  y: str, title: str):
    usable = [r for r in records if X_METRIC in r.metrics and y in r.metrics]
    facets = list(dict.fromkeys(compound(r.params, facet_keys) for r in usable)) if facet_keys else [""]
    ncols = min(4, len(facets))
    nrows = -(-len(facets) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.3 * ncols, 3.5 * nrows + 0.9), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    hues = ordered_values(usable, hue) if hue else [""]
    marks = ordered_values(usable, marker_key) if marker_key else [""]
    maximize = metric(y) is not None and metric(y).better == HIGHER
    log_y = spans_decades([scaled(y, r.metrics[y]) for r in usable])  # one rule for every panel

    def series(rs: list[Record]) -> str:
        """The names of the series that share a point: the hue values, with the grid when grids differ."""
        grids = {r.params.get(marker_key, "") for r in rs} if marker_key else set()
        names = [r.params.get(hue, "") if hue else "" for r in rs]
        if len(grids) > 1:
            names = [f"{n}/{r.params.get(marker_key, '')}" if n else r.params.get(marker_key, "")
                     for n, r in zip(names, rs, strict=True)]
        return " = ".join(dict.fromkeys(n for n in names if n)) or f"{len(rs)} points"

    for n, facet in enumerate(facets):
        ax = axes[n // ncols][n % ncols]
        pts = [r for r in usable if not facet_keys or compound(r.params, facet_keys) == facet]
        xy = [(scaled(X_METRIC, r.metrics[X_METRIC]), scaled(y, r.metrics[y])) for r in pts]
        at: dict[tuple[float, float], list[Record]] = defaultdict(list)
        for r, p in zip(pts, xy, strict=True):
            at[p].append(r)
        for p, rs in at.items():
            r = rs[0]
            k = hues.index(r.params.get(hue, "")) if hue else 0
            m = marks.index(r.params.get(marker_key, "")) if marker_key else 0
            ax.scatter([p[0]], [p[1]], marker=MARKERS[m % len(MARKERS)], color=colours[k % len(colours)], s=36,
                       zorder=3, edgecolors="k" if len(rs) > 1 else "none", linewidths=0.5)
            if len(rs) > 1:
                ax.annotate(series(rs), p, xytext=(5, -3), textcoords="offset points", fontsize=6.5,
                            gid="point-label", annotation_clip=True)
        front = sorted({xy[i] for i in pareto_front(xy, maximize)})
        ax.scatter([q[0] for q in front], [q[1] for q in front], s=150, facecolors="none", edgecolors="k",
                   lw=0.8, zorder=2)
        if len(front) > 1:
            ax.plot([q[0] for q in front], [q[1] for q in front], color="0.4", lw=1, ls="--", zorder=1)
        if log_y:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        else:
            plain_linear_span(ax, [q[1] for q in xy])
        ax.set_xlabel(metric_label(X_METRIC), fontsize=9)
        ax.set_ylabel(metric_label(y), fontsize=9)
        ax.set_title(facet_title(pts[0].params, facet_keys) if facet_keys and pts else "", fontsize=8)
        xmax = max(q[0] for q in xy) if xy else 0.0
        ax.set_xlim(-0.03 * (xmax or 1.0), 1.1 * (xmax or 1.0))  # no negative percentages when all are 0
        ax.grid(alpha=0.3, which="both")
    for n in range(len(facets), nrows * ncols):
        axes[n // ncols][n % ncols].set_visible(False)
    handles = [plt.Line2D([], [], ls="", marker="o", color=colours[k % len(colours)], label=f"{hue}={h}")
               for k, h in enumerate(hues) if hue]
    handles += [plt.Line2D([], [], ls="", marker=MARKERS[m % len(MARKERS)], color="0.3", label=f"{marker_key}={v}")
                for m, v in enumerate(marks) if marker_key]
    handles.append(plt.Line2D([], [], ls="", marker="o", ms=10, mfc="none", mec="k", label="Pareto front"))
    _, legend_h = bottom_legend(fig, handles)
    title_h = figure_title(fig, title)
    fig.tight_layout(rect=(0, legend_h + 0.08 / fig.get_figheight(), 1, 1 - title_h - 0.1 / fig.get_figheight()))
    point_labels_inside(fig)
    declutter(fig)
    return fig

