"""``cgbench export RESULT|SWEEP_DIR -o DIR`` (registered in ``cli.app``), and the ``--export DIR``
option of ``run`` and ``sweep``: flat JSONL and CSV files (``cgbench.results.export``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

EXPORT_HELP = ("Also write flat files into DIR: per-request and per-step JSONL and CSV (this option records "
               "them: it implies --trace and --requests), a metrics table (one row per run or point, every "
               "metric of the registry) and columns.csv (units). DIR/requests.csv replays as workload=trace "
               "workload.trace=DIR/requests.csv. Existing files are never replaced. See cgbench docs exports.")

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


SHAPES = ("flat", "vllm-bench", "aiperf")


def _check_stdout_format(fmt: str) -> None:
    from cgbench.cli.formats import TABLE_OR_JSON, check_format
    from cgbench.config.schema import ConfigError
    from cgbench.results.export_parquet import FORMATS as FILE_FORMATS

    if fmt not in TABLE_OR_JSON and all(f.strip() in FILE_FORMATS for f in fmt.split(",")):
        raise ConfigError(f"--format: {fmt!r} names file formats; those are --export-format {fmt} (as on run and "
                          "sweep); --format is what this command prints: table or json")
    check_format(fmt, TABLE_OR_JSON)


def export_cmd(
    target: Annotated[Path, typer.Argument(metavar="RESULT|SWEEP_DIR", show_default=False,
                                           help="A result JSON of cgbench run, or a sweep folder.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", show_default=False,
                                          help="The folder to write into (created if missing).")],
    force: Annotated[bool, typer.Option("--force", help="Replace files of an earlier export in DIR.")] = False,
    export_format: ExportFormats = "csv,jsonl",
    shape: Annotated[str, typer.Option(
        "--as", metavar="SHAPE", help="flat (the tables: CSV, JSONL, Parquet), vllm-bench (the result JSON of "
        "vllm bench serve --save-result) or aiperf (AIPerf's profile_export_aiperf.json): one file per run or "
        "sweep point.")] = "flat",
    fmt: Annotated[str, typer.Option("--format", "-f", help="What is printed: table (a line on stderr) or json "
                                     "(the files written, on stdout).")] = "table",
) -> None:
    """Export a run or a sweep: flat JSONL, CSV or Parquet tables (per request, per step, and a metrics
    table), or a peer benchmark's result files.

    A result gives metrics.* (one row), and requests.* / steps.* when it was run with --requests /
    --trace (or --export). A sweep folder gives metrics.* (one row per point) and, for points that
    hold them, points/<point>/requests.* and steps.*. columns.csv names every column's type, unit and meaning
    (the metric registry's); every run's files share one schema. [bold]--as vllm-bench|aiperf[/bold] writes
    each run in that tool's shape instead (see the exports guide: cgbench docs exports). Exit 2 on bad
    input or when a file exists (without --force)."""
    from cgbench.cli.errors import err, out, user_errors

    with user_errors():
        from cgbench import safeio
        from cgbench.config.schema import ConfigError

        _check_stdout_format(fmt)
        safeio.declare_inputs({"RESULT": target})  # no export file may replace what it exports
        safeio.declare_folder_inputs({"SWEEP_DIR": target})
        if shape not in SHAPES:
            raise ConfigError(f"--as: {shape!r} is not one of {', '.join(SHAPES)}")
        if shape != "flat" and export_format != "csv,jsonl":
            raise ConfigError(f"--export-format applies to --as flat (the tables); --as {shape} writes JSON")
        chosen = export_formats(export_format, out_dir)
        if not target.is_dir() and not target.is_file():
            from cgbench.safeio import describe_missing

            raise ConfigError(f"{target}: {describe_missing(target)}")
        if shape != "flat":
            written, notes = _export_peer(target, out_dir, shape, force)
        elif target.is_dir():
            from cgbench.analysis.sweep.export import export_sweep

            written, notes = export_sweep(target, out_dir, replace=force, key="--out", formats=chosen)
        else:
            from cgbench.results.document import load_result
            from cgbench.results.export import export_run

            written = export_run(load_result(target), str(target), out_dir, replace=force, key="--out",
                                 formats=chosen)
            notes = []
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if fmt == "json":
        import json

        out.print(json.dumps({"as": shape, "dir": str(out_dir), "files": [str(p) for p in written],
                              "notes": notes}, indent=1), markup=False, highlight=False, soft_wrap=True)
    else:
        err.print(f"export: {len(written)} files in {out_dir}", markup=False, highlight=False, soft_wrap=True)


def _export_peer(target: Path, out_dir: Path, shape: str, force: bool) -> tuple[list[Path], list[str]]:
    """``target`` (a result or a sweep folder) in a peer's shape: one file per run or done point."""
    from cgbench.results.export import write_files
    from cgbench.results.export_peers import peer_file, peer_text

    if target.is_dir():
        from cgbench.analysis.sweep.export import sweep_peer_files

        files, notes = sweep_peer_files(target, out_dir, shape)
    else:
        from cgbench.results.document import load_result

        files, notes = {peer_file(out_dir, target.stem, shape): peer_text(load_result(target), shape)}, []
    return write_files(files, replace=force, key="--out"), notes
