"""Grouped bars of one metric over a sweep: x groups, one bar per hue value, facets by row / col. The
legend (``policy=budget``, ...) sits under the panels, clear of the figure title (wrapped to fit)."""

from __future__ import annotations

from cgbench.analysis.plots.data import (
    Record,
    Roles,
    compound,
    facet_title,
    metric_label,
    ordered_values,
    scaled,
    setting_label,
)
from cgbench.analysis.plots.layout import bottom_legend, declutter, figure_title, fit_x_ticks, label_bars
from cgbench.results.formatting import significant

PANEL_W, PANEL_H = 4.2, 3.2  # inches per facet


def _value_text(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return significant(v, 3)


def facet_grid(records: list[Record], roles: Roles) -> tuple[list[str], list[str]]:
    rows = list(dict.fromkeys(compound(r.params, roles.row) for r in records)) if roles.row else [""]
    cols = list(dict.fromkeys(compound(r.params, roles.col) for r in records)) if roles.col else [""]
    return rows, cols


def bars_figure(plt, records: list[Record], roles: Roles, y: str, title: str):
    """One panel per (row, col) facet; in each, x groups and one bar per hue value."""
    rows, cols = facet_grid(records, roles)
    hues = ordered_values(records, roles.hue) if roles.hue else [""]
    xs = list(dict.fromkeys(compound(r.params, roles.x) for r in sorted(
        records, key=lambda r: [_order(records, k, r.params.get(k, "")) for k in roles.x]))) if roles.x else [""]
    width_in = max(PANEL_W, 0.32 * len(xs) * max(1, len(hues)) + 1.2)
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(width_in * len(cols), PANEL_H * len(rows) + 0.9),
                             squeeze=False, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    by = {(compound(r.params, roles.row), compound(r.params, roles.col), compound(r.params, roles.x),
           r.params.get(roles.hue, "") if roles.hue else ""): r for r in records}
    top = max((scaled(y, r.metrics[y]) for r in records if y in r.metrics), default=0.0)
    width = 0.8 / len(hues)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            ax = axes[i][j]
            for k, hue in enumerate(hues):
                pos, vals = [], []
                for g, xv in enumerate(xs):
                    rec = by.get((row if roles.row else "", col if roles.col else "", xv, hue))
                    if rec is not None and y in rec.metrics:
                        pos.append(g + (k - (len(hues) - 1) / 2) * width)
                        vals.append(scaled(y, rec.metrics[y]))
                bars = ax.bar(pos, vals, width=width * 0.95, color=colours[k % len(colours)])
                label_bars(ax, bars, [_value_text(v) for v in vals])
            ax.set_xticks(range(len(xs)), xs, fontsize=8)
            ax.set_xlim(-0.6, len(xs) - 0.4)
            ax.set_ylim(0, top * 1.25 if top > 0 else 1.0)
            if top == 0:
                ax.text(0.5, 0.5, "0 for every point", transform=ax.transAxes, ha="center", color="0.4")
            sample = next((r.params for r in records if compound(r.params, roles.row) == row
                           and compound(r.params, roles.col) == col), {})
            ax.set_title(facet_title(sample, roles.row + roles.col), fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if j == 0:
                ax.set_ylabel(metric_label(y), fontsize=9)
            if i == len(rows) - 1:
                ax.set_xlabel(setting_label(roles.x) if roles.x else "", fontsize=9)
    legend_h = 0.0
    if roles.hue:
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k % len(colours)], label=f"{roles.hue}={hue}")
                   for k, hue in enumerate(hues)]
        _, legend_h = bottom_legend(fig, handles, fontsize=8)
    title_h = figure_title(fig, title)
    rect = (0, legend_h + (0.08 / fig.get_figheight() if legend_h else 0), 1, 1 - title_h - 0.2 / fig.get_figheight())
    fig.tight_layout(rect=rect)
    fit_x_ticks(fig, fig.axes)
    fig.tight_layout(rect=rect)
    declutter(fig)
    return fig


def _order(records: list[Record], key: str, value: str) -> int:
    return ordered_values(records, key).index(value)
