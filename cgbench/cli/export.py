"""``cgbench export RESULT|SWEEP_DIR -o DIR`` (registered in ``cli.app``), and the ``--export DIR``
option of ``run`` and ``sweep``: flat JSONL and CSV files (``cgbench.results.export``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

EXPORT_HELP = ("Also write flat files into DIR: per-request and per-step JSONL and CSV (this option records "
               "them: it implies --trace and --requests), a metrics table (one row per run or point, every "
               "metric of the registry) and columns.csv (units). DIR/requests.csv replays as workload=trace "
               "workload.trace=DIR/requests.csv. Existing files are never replaced. See docs/exports.md.")

ExportDir = Annotated[Optional[Path], typer.Option("--export", help=EXPORT_HELP, show_default=False,
                                                   metavar="DIR")]
FORMATS_HELP = ("The export's file formats, comma-separated: csv, jsonl, parquet (Parquet needs pyarrow, the "
                "parquet extra). columns.csv is always written.")
ExportFormats = Annotated[str, typer.Option("--export-format", help=FORMATS_HELP, metavar="FORMATS")]


def export_formats(text: str, export_dir: Path | None, key: str = "--export-format") -> tuple[str, ...]:
    """The formats asked for (checked before any work: pyarrow present for Parquet); a non-default
    value without ``--export`` is refused."""
    from cgbench.config.schema import ConfigError
    from cgbench.results.export_parquet import DEFAULT_FORMATS, parse_formats

    formats = parse_formats(text, key)
    if export_dir is None and formats != DEFAULT_FORMATS:
        raise ConfigError(f"{key} applies to --export DIR: add it, or leave {key} out")
    return formats


def export_cmd(
    target: Annotated[Path, typer.Argument(metavar="RESULT|SWEEP_DIR", show_default=False,
                                           help="A result JSON of cgbench run, or a sweep folder.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", show_default=False,
                                          help="The folder to write into (created if missing).")],
    force: Annotated[bool, typer.Option("--force", help="Replace files of an earlier export in DIR.")] = False,
    formats: Annotated[str, typer.Option("--format", help=FORMATS_HELP, metavar="FORMATS")] = "csv,jsonl",
) -> None:
    """Export a run or a sweep as flat JSONL and CSV files: per request, per step, and a metrics table.

    A result gives metrics.csv/.jsonl (one row), and requests.* / steps.* when it was run with --requests /
    --trace (or --export). A sweep folder gives metrics.csv/.jsonl (one row per point) and, for points that
    hold them, points/<point>/requests.* and steps.*. columns.csv names every column's unit and meaning
    (the metric registry's). Exit 2 on bad input or when a file exists (without --force)."""
    from cgbench.cli.errors import err, user_errors

    with user_errors():
        from cgbench import safeio
        from cgbench.config.schema import ConfigError

        safeio.declare_inputs({"RESULT": target})  # no export file may replace what it exports
        safeio.declare_folder_inputs({"SWEEP_DIR": target})
        chosen = export_formats(formats, out_dir, "--format")
        if target.is_dir():
            from cgbench.analysis.export_sweep import export_sweep

            written, notes = export_sweep(target, out_dir, replace=force, key="--out", formats=chosen)
        elif target.is_file():
            from cgbench.results.document import load_result
            from cgbench.results.export import export_run

            written = export_run(load_result(target), str(target), out_dir, replace=force, key="--out",
                                 formats=chosen)
            notes = []
        else:
            from cgbench.safeio import describe_missing

            raise ConfigError(f"{target}: {describe_missing(target)}")
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    err.print(f"export: {len(written)} files in {out_dir}", markup=False, highlight=False, soft_wrap=True)
