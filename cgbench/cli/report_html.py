"""A report (``cgbench.analysis.report``) as one self-contained HTML page: the style sheet and the
table-sorting script inline (``report_assets/``, package data), figures as base64 PNG, and a
Content-Security-Policy that lets the page load nothing from anywhere. Every piece of text from a
result (names, overrides, messages) is escaped."""

from __future__ import annotations

import base64
import re
from html import escape
from importlib.resources import files

from cgbench import __version__
from cgbench.analysis.report import Cell, Figure, Report, Section, Table

# nothing outside the page: styles and scripts only inline, images only as data: URLs
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def asset(name: str) -> str:
    """The text of ``report_assets/NAME`` (shipped in the wheel with the package)."""
    return (files("cgbench.cli") / "report_assets" / name).read_text(encoding="utf-8")


def _anchor(heading: str) -> str:
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") or "section")


def _cell(c: Cell, tag: str = "td") -> str:
    if c.sort is None:
        return f"<{tag}>{escape(c.text)}</{tag}>"
    return f'<{tag} class="num" data-v="{c.sort!r}">{escape(c.text)}</{tag}>'


def _table(t: Table) -> str:
    head = "".join(f'<th scope="col">{escape(c)}</th>' for c in t.columns)
    body = "\n".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    sortable = ' class="sortable"' if t.sortable and len(t.rows) > 1 else ""
    return (f'<figure class="table"><figcaption>{escape(t.caption)}</figcaption><div class="scroll">'
            f"<table{sortable}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div></figure>")


def _figure(f: Figure) -> str:
    assert f.png is not None
    data = base64.b64encode(f.png).decode("ascii")
    return (f'<figure class="plot"><img class="figure" alt="{escape(f.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(f.caption)}</figcaption></figure>")


def _section(s: Section) -> str:
    parts = [f'<section id="{_anchor(s.heading)}"><h2>{escape(s.heading)}</h2>']
    parts += [f'<p class="note">{escape(n)}</p>' for n in s.notes]
    parts += [_table(t) for t in s.tables]
    parts += [_figure(f) for f in s.figures if f.png is not None]
    parts.append("</section>")
    return "\n".join(parts)


def _missing(r: Report) -> str:
    if not r.missing_figures:
        return ""
    items = "".join(f"<li>{escape(name)}</li>" for name in r.missing_figures)
    return (f'<div class="missing" role="note"><strong>{len(r.missing_figures)} figure(s) not drawn.</strong> '
            f"{escape(r.figure_hint)}<ul>{items}</ul></div>")


def render_html(r: Report) -> str:
    """The whole page of ``r``."""
    facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in r.facts)
    nav = "".join(f'<a href="#{_anchor(s.heading)}">{escape(s.heading)}</a>' for s in r.sections)
    sections = "\n".join(_section(s) for s in r.sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="cgbench {escape(__version__)}">
<title>{escape(r.title)}</title>
<style>
{asset("report.css")}</style>
</head>
<body data-report="{escape(r.kind)}">
<header>
<h1>{escape(r.title)}</h1>
<dl class="facts">{facts}</dl>
<nav>{nav}</nav>
{_missing(r)}
</header>
<main>
{sections}
</main>
<footer>cgbench {escape(__version__)} report ({escape(r.kind)}); one file, no network; click a column to sort.
</footer>
<script>
{asset("report.js")}</script>
</body>
</html>
"""
