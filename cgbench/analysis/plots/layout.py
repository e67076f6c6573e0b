"""Keeping a figure's text legible: tick labels that would run together are rotated (then thinned),
bar labels that would overprint a neighbour are dropped, and ``overlaps`` finds any pair of visible
labels whose boxes intersect (the tests hold every figure to none)."""

from __future__ import annotations

from collections.abc import Iterable

DPI = 110
PAD_PX = 1.0  # labels closer than this count as touching


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _box(text, renderer):
    return text.get_window_extent(renderer).padded(PAD_PX / 2)


def _hit(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _visible(texts: Iterable) -> list:
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _drawn_ticks(axis) -> list:
    """Tick labels matplotlib actually draws: those whose tick lies inside the view limits."""
    lo, hi = sorted(axis.get_view_interval())
    span = (hi - lo) * 1e-9
    labels = axis.get_ticklabels()
    locs = axis.get_ticklocs()
    return [t for t, loc in zip(labels, locs, strict=False) if lo - span <= loc <= hi + span]


def tick_labels(ax) -> list:
    if not ax.get_visible():
        return []
    return _visible([*_drawn_ticks(ax.xaxis), *_drawn_ticks(ax.yaxis)])


def bar_labels(ax) -> list:
    """Value labels drawn by ``label_bars`` (tagged with a gid)."""
    return _visible(t for t in ax.texts if t.get_gid() == "bar-label")


def labels_of(fig) -> list:
    out = []
    for ax in fig.axes:
        if ax.get_visible():
            out += tick_labels(ax) + bar_labels(ax) + _visible(t for t in ax.texts if t.get_gid() == "point-label")
    return out


def overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of visible tick / bar / point labels anywhere in the figure whose boxes intersect."""
    renderer = _renderer(fig)
    texts = labels_of(fig)
    boxes = [_box(t, renderer) for t in texts]
    out = []
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if _hit(boxes[i], boxes[j]):
                out.append((texts[i].get_text(), texts[j].get_text()))
    return out


def _crowded(texts: list, renderer) -> bool:
    boxes = [_box(t, renderer) for t in texts]
    return any(_hit(boxes[i], boxes[j]) for i in range(len(boxes)) for j in range(i + 1, len(boxes)))


def fit_x_ticks(fig, axes) -> None:
    """Rotate x tick labels that run together (30°, then 90°), then show every k-th."""
    renderer = _renderer(fig)
    for ax in axes:
        labels = _visible(_drawn_ticks(ax.xaxis))
        if not _crowded(labels, renderer):
            continue
        for angle, ha in ((30, "right"), (90, "center")):
            for t in labels:
                t.set_rotation(angle)
                t.set_ha(ha)
            if not _crowded(labels, renderer):
                break
        step = 2
        while _crowded(_visible(_drawn_ticks(ax.xaxis)), renderer) and step < len(labels):
            for i, t in enumerate(labels):
                t.set_visible(i % step == 0)
            step += 1


def label_bars(ax, bars, texts: list[str], fontsize: float = 6.5) -> None:
    """A value label above each bar, vertical when the bar is narrow; tagged for ``declutter``."""
    for rect, text in zip(bars, texts, strict=True):
        x = rect.get_x() + rect.get_width() / 2
        y = rect.get_height() if rect.get_height() >= 0 else 0
        ax.annotate(text, (x, y), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=fontsize, rotation=90, gid="bar-label", annotation_clip=False)


def declutter(fig) -> int:
    """Hide bar and point labels that would overprint a label already kept (tick labels first, then
    left to right); returns how many were hidden."""
    renderer = _renderer(fig)
    kept = [_box(t, renderer) for ax in fig.axes for t in tick_labels(ax)]
    hidden = 0
    for ax in fig.axes:
        candidates = [t for t in ax.texts if t.get_gid() in ("bar-label", "point-label") and t.get_visible()]
        boxes = [(t, _box(t, renderer)) for t in candidates]
        for t, b in sorted(boxes, key=lambda tb: (tb[1].x0, tb[1].y0)):
            if any(_hit(b, k) for k in kept):
                t.set_visible(False)
                hidden += 1
            else:
                kept.append(b)
    return hidden


# ---------------------------------------------------------------------------------------------- titles and legends


def legends_of(fig) -> list:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_visible() and ax.get_legend())]


def frame_texts(fig) -> list[tuple[str, object]]:
    """The texts that frame a figure, each with what it is: the figure title, every legend's title and
    entries, each visible panel's title and axis labels."""
    out: list[tuple[str, object]] = []
    if fig._suptitle is not None:
        out.append(("figure title", fig._suptitle))
    for n, leg in enumerate(legends_of(fig)):
        out += [(f"legend {n} title", leg.get_title())] + [(f"legend {n} entry", t) for t in leg.get_texts()]
    for ax in fig.axes:
        if ax.get_visible():
            out += [("panel title", ax.title), ("x label", ax.xaxis.label), ("y label", ax.yaxis.label)]
    return [(kind, t) for kind, t in out if t.get_visible() and t.get_text().strip()]


def clipped_texts(fig) -> list[str]:
    """Frame texts (``frame_texts``) that reach outside the figure: cut off in the saved image."""
    renderer = _renderer(fig)
    bounds = fig.bbox
    out = []
    for kind, t in frame_texts(fig):
        b = t.get_window_extent(renderer)
        if b.x0 < bounds.x0 - 0.5 or b.y0 < bounds.y0 - 0.5 or b.x1 > bounds.x1 + 0.5 or b.y1 > bounds.y1 + 0.5:
            out.append(f"{kind} {t.get_text()!r}")
    return out


def colliding_texts(fig) -> list[tuple[str, str]]:
    """Pairs of frame texts whose boxes intersect (a legend title run into the figure title, ...)."""
    renderer = _renderer(fig)
    texts = frame_texts(fig)
    boxes = [_box(t, renderer) for _, t in texts]
    return [(f"{texts[i][0]} {texts[i][1].get_text()!r}", f"{texts[j][0]} {texts[j][1].get_text()!r}")
            for i in range(len(texts)) for j in range(i + 1, len(texts)) if _hit(boxes[i], boxes[j])]


def bottom_legend(fig, handles: list, max_cols: int = 6, fontsize: float = 7):
    """A legend centred under the panels with as many columns (at most ``max_cols``) as the figure's
    width holds, so no entry is cut off; returns it and its height as a fraction of the figure."""
    renderer = _renderer(fig)
    ncols = max(1, min(max_cols, len(handles)))
    while True:
        leg = fig.legend(handles=handles, loc="lower center", ncols=ncols, fontsize=fontsize, frameon=False,
                         bbox_to_anchor=(0.5, 0.0))
        box = leg.get_window_extent(renderer)
        if box.width <= fig.bbox.width - 4 or ncols == 1:
            return leg, box.height / fig.bbox.height
        leg.remove()
        ncols -= 1


def plain_log_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (8360, not 8.36x10^3): a panel whose values span
    less than a decade keeps a log scale for the sake of its neighbours (one scale rule per metric)."""
    from matplotlib.ticker import LogFormatter

    class PlainLog(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            if x >= 1e6:
                return f"{x:.3g}"
            return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"

    axis.set_major_formatter(PlainLog(labelOnlyBase=False))
    axis.set_minor_formatter(PlainLog(labelOnlyBase=False))


MIN_RELATIVE_SPAN = 0.02  # a linear y axis spans at least 2% of its values' magnitude


def plain_linear_span(ax, values: Iterable[float], min_relative_span: float = MIN_RELATIVE_SPAN) -> None:
    """A linear y axis whose size says how far apart its values are: tick labels are the numbers
    themselves (no offset such as ``+5.123e3`` above ticks of ``0.002``), and values whose spread is
    under ``min_relative_span`` of their magnitude are drawn in a window that wide around their
    centre, so a 0.008 tok/s spread over 5,000 tok/s looks flat instead of filling the panel."""
    import math

    from matplotlib.ticker import ScalarFormatter

    formatter = ScalarFormatter(useOffset=False)
    formatter.set_scientific(False)
    ax.yaxis.set_major_formatter(formatter)
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return
    lo, hi = min(vals), max(vals)
    span = min_relative_span * max(abs(lo), abs(hi))
    if hi - lo < span:
        centre = (lo + hi) / 2
        ax.set_ylim(centre - span / 2, centre + span / 2)


def figure_title(fig, text: str, fontsize: float = 11) -> float:
    """The figure title at the top left, wrapped at words onto as many lines as the figure's width
    needs (a single panel is narrow); returns its height as a fraction of the figure."""
    import textwrap

    renderer = _renderer(fig)
    width = len(text)
    title = fig.suptitle(text, fontsize=fontsize, x=0.01, ha="left")
    while title.get_window_extent(renderer).width > 0.98 * fig.bbox.width and width > 10:
        width = int(width * 0.85)
        title.set_text(textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False))
    return title.get_window_extent(renderer).height / fig.bbox.height


def point_labels_inside(fig) -> None:
    """A point label that would run past its panel's right edge is put on the point's left instead."""
    renderer = _renderer(fig)
    for ax in fig.axes:
        right = ax.get_window_extent(renderer).x1
        for t in ax.texts:
            if t.get_gid() == "point-label" and t.get_window_extent(renderer).x1 > right:
                t.set_ha("right")
                t.set_position((-5, -3))
