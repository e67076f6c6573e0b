"""How ``cgbench compare`` shows a comparison (``cgbench.analysis.compare`` makes it): a line per
point that moved, the Rich detail table, the bounded Markdown summary for a CI job, and the CSV of
every check."""

from __future__ import annotations

from cgbench.analysis.compare import (
    CHANGED,
    DEFAULT_FAIL_ON,
    FAILED,
    HEALTH,
    IMPROVED,
    MISSING,
    REGRESSED,
    SAME,
    SKIPPED,
    WITHIN,
    Comparison,
    Delta,
    PointResult,
    class_text,
    health_summary,
    is_number,
    severity,
    verdict,
)
from cgbench.results.formatting import significant


def fmt_delta(d: Delta) -> tuple[str, str]:
    if not (is_number(d.base) and is_number(d.new)) or d.base == d.new:
        return "", ""
    diff = d.new - d.base
    pct = f"{100.0 * diff / abs(d.base):+.2f}%" if d.base else ""
    return (f"{diff:+,}" if isinstance(diff, int) else f"{diff:+.6g}"), pct


def is_health(d: Delta) -> bool:
    return d.metric.startswith(HEALTH)


def shown(d: Delta, value) -> str:
    """A check's value as the tables show it: a health flag as ``raised`` or ``-``."""
    if is_health(d):
        return "raised" if value else "-"
    return significant(value)


def health_text(codes: list[str] | None) -> str:
    return "-" if codes is None else ", ".join(codes) or "ok"


def describe_delta(d: Delta) -> str:
    """``eager_step_fraction 0.0171 -> 0.02 (+16.96%, regressed)``; a changed exact metric also says
    which way the registry calls its move (``eager_steps 15 -> 12 (-20.00%, changed, better)``); a
    health flag ``health.overload raised in new (regressed)``."""
    if is_health(d):
        return f"{d.metric} {d.note or 'raised in both'} ({class_text(d.status)})"
    diff, pct = fmt_delta(d)
    extra = ", ".join(x for x in (pct or diff, class_text(d.status), d.trend if d.status == CHANGED else "", d.note)
                      if x)
    return f"{d.metric} {significant(d.base)} -> {significant(d.new)}" + (f" ({extra})" if extra else "")


def point_line(p: PointResult) -> str:
    """One line per point: its class, its label and the few metrics that explain the class."""
    head = f"{class_text(p.status).upper() if p.status in (FAILED, MISSING, REGRESSED) else class_text(p.status)}"
    if p.status in (FAILED, MISSING):
        return f"{head}: {p.label}: {p.error}"
    worst = p.worst()
    more = sum(d.status not in (SAME, SKIPPED) for d in p.deltas) - len(worst)
    detail = "; ".join(describe_delta(d) for d in worst) + (f"; +{more} more" if more > 0 else "")
    return f"{head}: {p.label}" + (f": {detail}" if detail else "") + f" [health {point_health(p)}]"


def point_health(p: PointResult) -> str:
    """A point's flags in NEW, and BASE's when they differ: ``overload (base ok)``."""
    base, new = p.health.get("base"), p.health.get("new")
    text = health_text(new)
    return text if base == new or base is None else f"{text} (base {health_text(base)})"


def detail_rows(comp: Comparison, show_all: bool = False) -> list[Delta]:
    """Detail rows worth a look, worst first (every check with ``show_all``)."""
    rows = [d for d in comp.deltas if show_all or d.status not in (SAME, SKIPPED)]
    return sorted(rows, key=lambda d: severity(d.status))


def comparison_table(comp: Comparison, show_all: bool = False):
    """Details grouped by point (a bold label row, then its metrics), worst point first."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"compare: {comp.base} -> {comp.new}", box=box.SIMPLE_HEAVY, title_justify="left",
              show_edge=False, padding=(0, 1, 0, 0))
    rows = detail_rows(comp, show_all)
    t.add_column("metric", overflow="fold", min_width=max((len(d.metric) for d in rows), default=6))
    for col in ("base", "new", "change"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("rule", no_wrap=True)
    t.add_column("class")
    style = {REGRESSED: "bold red", CHANGED: "red", IMPROVED: "green", WITHIN: "", SAME: "", SKIPPED: "dim"}
    first = True
    for p in comp.sorted_points():
        mine = [d for d in rows if d.point == p.label]
        if not mine and p.status not in (FAILED, MISSING):
            continue
        if not first:
            t.add_section()
        first = False
        t.add_row(Text(p.label, style="bold"), "", "", "", "", p.status if p.status in (FAILED, MISSING) else "",
                  style="bold red" if p.status in (FAILED, MISSING) else "")
        for d in mine:
            diff, pct = fmt_delta(d)
            trend_text = d.trend if d.status == CHANGED else ""
            status = class_text(d.status) + "".join(f" ({x})" for x in (trend_text, d.note) if x)
            t.add_row(d.metric, shown(d, d.base), shown(d, d.new), pct or diff, d.rule, status,
                      style=style[d.status])
    return t


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


MARKDOWN_POINTS = 40  # point rows in the Markdown summary; the rest are counted
MARKDOWN_CELL = 300  # characters of one row's metric text


def markdown(comp: Comparison, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON,
             limit: int = MARKDOWN_POINTS) -> str:
    """A bounded Markdown summary for a CI job summary (``$GITHUB_STEP_SUMMARY``): the verdict, the
    points by class, then one row per point that moved, worst first, with its few worst metrics.

    Its size is bounded whatever the comparison: at most ``limit`` point rows of at most
    ``MARKDOWN_CELL`` characters of metrics each (about 20 KB); ``--format json`` has everything."""
    failing = comp.failing(fail_on)
    head, _, rest = verdict(comp, fail_on).partition(": ")
    lines = ["## cgbench compare", "", f"**{head}**: {rest}", "",
             f"base `{comp.base}`, new `{comp.new}`", ""]
    for w in comp.warnings:
        lines += [f"> **warning:** {_md_cell(w)}", ""]
    moved = [p for p in comp.sorted_points() if p.status not in (SAME, SKIPPED)]
    lines += [health_summary(comp), ""]
    if moved:
        lines += ["| class | point | worst metrics | health |", "|---|---|---|---|"]
        for p in moved[:limit]:
            text = p.error if p.status in (FAILED, MISSING) else "; ".join(describe_delta(d) for d in p.worst())
            more = sum(d.status not in (SAME, SKIPPED) for d in p.deltas) - len(p.worst())
            if more > 0:
                text += f"; +{more} more"
            if len(text) > MARKDOWN_CELL:
                text = text[:MARKDOWN_CELL - 1] + "…"
            cls = class_text(p.status)
            lines.append(f"| {'**' + cls + '**' if p in failing else cls} | {_md_cell(p.label[:120])} | "
                         f"{_md_cell(text)} | {_md_cell(point_health(p)[:200])} |")
        if len(moved) > limit:
            lines.append(f"\n{len(moved) - limit} more points not shown (`cgbench compare --format json` lists all).")
    else:
        lines.append("No metric changed.")
    for note in comp.notes[:5]:
        lines.append(f"\n- {_md_cell(note[:400])}")
    return "\n".join(lines) + "\n"


def to_csv(comp: Comparison) -> str:
    """One row per metric check (and one per failed or missing point), worst first."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["point", "point_class", "metric", "base", "new", "change", "change_pct", "class", "trend",
                "rule", "note"])
    for p in comp.sorted_points():
        if p.status in (FAILED, MISSING):
            w.writerow([p.label, p.status, "", "", "", "", "", p.status, "", "", p.error])
        for d in sorted(p.deltas, key=lambda d: severity(d.status)):
            diff, pct = fmt_delta(d)
            base, new = (shown(d, d.base), shown(d, d.new)) if is_health(d) else (d.base, d.new)
            w.writerow([p.label, p.status, d.metric, "" if base is None else base,
                        "" if new is None else new, diff, pct, d.status, d.trend, d.rule, d.note])
    return buf.getvalue()
