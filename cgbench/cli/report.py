"""``cgbench report RESULT|SWEEP_DIR|ADVISE -o report.html`` (registered in ``cli.app``): one
self-contained HTML page of a run, a sweep or an advise report (``cgbench.analysis.report`` builds
its content, ``cgbench.cli.report_html`` writes the page)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report_cmd(
    target: Annotated[Path, typer.Argument(metavar="RESULT|SWEEP_DIR|ADVISE", show_default=False,
                                           help="A result JSON of cgbench run, a sweep folder, an advise.json, or the "
                                                "JSON of cgbench explain --megatron-log.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", show_default=False,
                                           help="The HTML file to write (replaced if it exists; never an input).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="What is printed: table (lines on stderr) or json "
                                     "(the file written and the figures not drawn, on stdout).")] = "table",
) -> None:
    """Write one self-contained HTML report of a run, a sweep, an advise report or a Megatron log's explanation.

    A run: headline metrics, health flags, graph usage, timelines. A sweep: every point's headline
    metrics (sortable), health flags, graph usage, comparisons and load curves. An advise report: the
    recommendation against the default, robustness checks, every candidate. Styles, the sorting script
    and the figures are inside the file (it loads nothing over the network): a CI artifact as it is.
    Figures need matplotlib (the plot extra); without it the page says which are missing. Exit 2 on bad
    input."""
    from cgbench.cli.errors import err, user_errors

    with user_errors():
        from cgbench.cli.formats import TABLE_OR_JSON, check_format

        check_format(fmt, TABLE_OR_JSON)
        from cgbench.analysis.megatron_log.report import READERS
        from cgbench.analysis.report import build_report
        from cgbench.cli.report_html import render_html
        from cgbench.safeio import check_writable, declare_folder_inputs, declare_inputs, write_text_atomic

        if target.is_dir():
            declare_folder_inputs({"SWEEP_DIR": target})
        else:
            declare_inputs({"RESULT": target})
        check_writable(out_path, "--out")
        report = build_report(target, READERS)
        write_text_atomic(out_path, render_html(report), "--out")
    if fmt == "json":
        import json

        from cgbench.cli.errors import out

        out.print(json.dumps({"report": str(out_path), "kind": report.kind,
                              "missing_figures": list(report.missing_figures),
                              "figure_hint": report.figure_hint if report.missing_figures else None}, indent=1),
                  markup=False, highlight=False, soft_wrap=True)
        return
    if report.missing_figures:
        err.print(f"note: {len(report.missing_figures)} figure(s) not drawn: {report.figure_hint}", markup=False,
                  highlight=False, soft_wrap=True)
    err.print(f"report: {out_path}", markup=False, highlight=False, soft_wrap=True)
