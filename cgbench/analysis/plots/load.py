"""Latency and throughput against load: one curve per policy (hue) and facet, the SLO drawn as a
line and each curve's maximum sustainable rate marked.

The maximum sustainable rate of a curve is the highest measured rate at which the metric meets the
SLO at that rate and at every lower rate (no interpolation between measured rates: a rate that was
not run is not claimed). A curve that misses the SLO at its lowest rate has none.

A metric has one y scale in every row: the same kind (log when its values over all rows, with the
SLO, span a decade or more, else linear) and the same limits (a metric's column shares its y axis),
so the rows compare by eye.
"""

from __future__ import annotations

import math

from cgbench.analysis.plots.data import (
    Record,
    Roles,
    compound,
    facet_title,
    metric_label,
    ordered_values,
    scaled,
    setting_label,
    spans_decades,
)
from cgbench.analysis.plots.layout import declutter, figure_title, plain_log_ticks
from cgbench.results.names import HIGHER, metric

DEFAULT_Y = ("ttft_ms.p99", "tpot_ms.p99", "output_throughput_tok_s")
MARKERS = "osD^v<>Px*"
LINESTYLES = ("-", "--", "-.", ":")
JITTER = 0.012  # relative x offset between curves, so identical curves stay visible side by side


def max_sustainable(points: list[tuple[float, float]], bound: float, higher_is_better: bool = False) -> float | None:
    """The highest x whose y meets ``bound`` at it and at every lower x (points in any order)."""
    best = None
    for x, y in sorted(points):
        ok = y >= bound if higher_is_better else y <= bound
        if not ok or math.isnan(y):
            break
        best = x
    return best


def _curves(records: list[Record], roles: Roles, facet: tuple[str, str],
            y: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if (compound(r.params, roles.row), compound(r.params, roles.col)) != facet or y not in r.metrics:
            continue
        try:
            x = float(compound(r.params, roles.x))
        except ValueError:
            continue
        out.setdefault(r.params.get(roles.hue, "") if roles.hue else "", []).append((x, scaled(y, r.metrics[y])))
    return {k: sorted(v) for k, v in out.items()}


def load_figure(plt, records: list[Record], roles: Roles, ys: list[str], slo: dict[str, float], title: str):
    """Rows: the row facets (x) col facets; columns: one per y metric."""
    from matplotlib.ticker import NullLocator

    rows = list(dict.fromkeys((compound(r.params, roles.row), compound(r.params, roles.col)) for r in records))
    hues = ordered_values(records, roles.hue) if roles.hue else [""]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(len(rows), len(ys), figsize=(4.6 * len(ys), 3.3 * len(rows) + 1.0), squeeze=False,
                             sharey="col")
    xs_all = sorted({float(compound(r.params, roles.x)) for r in records})
    log_x = spans_decades(xs_all) or (len(xs_all) > 2 and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 4)
    log_y = {y: spans_decades([v for facet in rows for pts in _curves(records, roles, facet, y).values()
                               for _, v in pts] + ([scaled(y, slo[y])] if y in slo else [])) for y in ys}
    for i, facet in enumerate(rows):
        for j, y in enumerate(ys):
            ax = axes[i][j]
            curves = _curves(records, roles, facet, y)
            bound = scaled(y, slo[y]) if y in slo else None
            better_high = (metric(y) is not None and metric(y).better == HIGHER)
            drawn: dict[tuple, str] = {}
            for k, hue in enumerate(hues):
                pts = curves.get(hue)
                if not pts:
                    continue
                same_as = drawn.get(tuple(pts))
                shift = (1 + JITTER * (k - (len(hues) - 1) / 2)) if log_x else 0.0
                px = [x * shift if log_x else x + JITTER * (xs_all[-1] - xs_all[0]) * (k - (len(hues) - 1) / 2)
                      for x, _ in pts]
                name = (hue or "all") + (f" (= {same_as})" if same_as else "")
                if bound is not None:
                    best = max_sustainable(pts, bound, better_high)
                    name += f", max {best:g}" if best is not None else ", max: none"
                    if best is not None:
                        yb = dict(pts)[best]
                        ax.scatter([px[[x for x, _ in pts].index(best)]], [yb], s=110, marker="*",
                                   color=colours[k % len(colours)], edgecolors="k", linewidths=0.6, zorder=5)
                ax.plot(px, [v for _, v in pts], marker=MARKERS[k % len(MARKERS)], ms=4.5,
                        ls=LINESTYLES[k % len(LINESTYLES)], color=colours[k % len(colours)], lw=1.3,
                        label=name, zorder=3)
                drawn.setdefault(tuple(pts), hue)
            if bound is not None:
                ax.axhline(bound, color="crimson", lw=1.0, ls="--", zorder=2)
                ax.annotate(f"SLO {bound:g}", (0.01, bound), xycoords=("axes fraction", "data"), xytext=(0, 2),
                            textcoords="offset points", fontsize=7, color="crimson", va="bottom")
            if log_y[y]:
                ax.set_yscale("log")
                plain_log_ticks(ax.yaxis)
            if log_x:
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs_all, [f"{x:g}" for x in xs_all])
                ax.xaxis.set_minor_locator(NullLocator())  # the y axis keeps its own (a log scale's labels)
            ax.set_ylabel(metric_label(y), fontsize=9)
            ax.set_xlabel(setting_label(roles.x), fontsize=9)
            sample = next((r.params for r in records
                           if (compound(r.params, roles.row), compound(r.params, roles.col)) == facet), {})
            ax.set_title(facet_title(sample, roles.row + roles.col), fontsize=9)
            ax.grid(alpha=0.3, which="both")
            if roles.hue or bound is not None:
                ax.legend(fontsize=6.5, title=roles.hue, title_fontsize=7, loc="best")
    title_h = figure_title(fig, title + ("  (★ = maximum sustainable rate under the SLO)" if slo else ""))
    fig.tight_layout(rect=(0, 0, 1, 1 - title_h - 0.1 / fig.get_figheight()))
    declutter(fig)
    return fig
