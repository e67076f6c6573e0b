"""The ``cgbench`` command line: parse, call, print. Heavy imports happen inside commands."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer

from cgbench import __version__
from cgbench.cli.console import err, out, print_error, print_held, print_warning
from cgbench.cli.errors import OneLineUsageErrors, user_errors
from cgbench.cli.export import ExportDir, ExportFormats
from cgbench.cli.formats import check_format
from cgbench.cli.options import ConfigDirs, MegatronArgs, complete_override, config_folders, with_launch_line
from cgbench.errors import ConfigError  # the schema's (config.schema re-exports it): light to import

APP_SETTINGS = dict(
    help="Measure CUDA-graph-aware admission gating (Megatron-LM PR #4870) in an LLM engine's prefill "
    "scheduler. Configs are Hydra overrides: [bold]cgbench run model=hybrid cg=dense policy=budget[/bold].",
    cls=OneLineUsageErrors,
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app = typer.Typer(**APP_SETTINGS)

Overrides = Annotated[Optional[list[str]], typer.Argument(
    help="Hydra overrides: group=option (model=hybrid) or key=value (engine.max_requests=128).",
    show_default=False, autocompletion=complete_override)]


def warn_before_running(cfg, grid=None) -> None:
    """Configuration warnings known before any work (one line each on stderr)."""
    from cgbench.pipeline import preflight_warnings

    for w in preflight_warnings(cfg, grid):
        print_warning(w["message"])


def _version(value: bool) -> None:
    if value:
        out.print(f"cgbench {__version__}")
        raise typer.Exit()


def _main(version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    pass


def _groups_epilog() -> str:
    """The config groups and their options, for ``run --help``."""
    from rich.markup import escape

    from cgbench.config.paths import GROUPS, group_options

    try:  # help is Rich markup: an option file of the user's named "[b].yaml" must print as it is
        lines = [escape(f"{g}: {', '.join(group_options(g))}") for g in GROUPS if g != "sweep"]
    except ConfigError:
        lines = []
    plugins: list[str] = []
    if {"-h", "--help"} & set(sys.argv[1:]) and "run" in sys.argv[1:]:  # plug-ins load only for run's help
        from cgbench.config.plugin_schema import plugin_help

        plugins = plugin_help()
    if plugins:
        lines += ["Plug-ins (installed, or in a plugins.yaml of CGBENCH_CONFIG_DIR):", *plugins]
    return "\n\n".join(["Config groups (pick one option each, e.g. cg=dense):", *lines,
                        "Own options: --config-dir DIR (or CGBENCH_CONFIG_DIR) adds DIR/<group>/<name>.yaml. "
                        "See the composed config with --cfg job."])


def _default_run_path(labels: dict, out_dir: str) -> Path:
    """``<out_dir>/runs/<time>_<labels name>.json`` (``cgbench.config.labels``); never an existing file."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    base = Path(out_dir) / "runs" / f"{stamp}_{labels['name']}"
    path, n = base.with_name(base.name + ".json"), 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}.json"), n + 1
    return path


Fmt = Annotated[str, typer.Option("--format", "-f", help="table, markdown, json or csv.")]


def _refuse_sweep_keys(command: str, overrides: list[str]) -> None:
    """The sweep group configures ``cgbench sweep`` only: on another command it would change nothing."""
    from cgbench.config.overrides import override_key

    for o in overrides:
        key = override_key(o)
        if key == "sweep" or key.startswith("sweep."):
            raise ConfigError(f"{key}: only cgbench sweep reads the sweep group, not cgbench {command}: "
                              f"cgbench sweep {o}")


def run(
    overrides: Overrides = None,
    out_path: Annotated[Optional[Path], typer.Option("--out", "-o", help="Result JSON path (default: "
                        "<out_dir>/runs/<time>_<model>_<cg>_<policy>_<workload>[_<engine>][_<backend>][_<hardware>]"
                        "[_chunked].json); a file, not a folder (a trailing slash is refused).")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="Add per-step records to the JSON.")] = False,
    requests: Annotated[bool, typer.Option("--requests", help="Add per-request records to the JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print the graph-usage table.")] = False,
    fmt: Fmt = "table",
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.", hidden=True)] = False,
    cfg_only: Annotated[Optional[str], typer.Option(
        "--cfg", "-c", help="Print the composed config (job, or all with Hydra's own settings) and exit.",
        show_default=False)] = None,
    resolve: Annotated[bool, typer.Option("--resolve", help="With --cfg: resolve ${...} interpolations.")] = False,
    info: Annotated[bool, typer.Option(
        "--info", help="Print where the config comes from and exit: the config search path and the defaults list "
        "(each group's option, its file, what chose it: default, command line, a preset, +experiment); "
        "--format json for one document.")] = False,
    multirun: Annotated[bool, typer.Option("--multirun", "-m", help="Several points: use cgbench sweep.")] = False,
    config_dirs: ConfigDirs = None,
    allow_oversize: Annotated[bool, typer.Option(
        "--allow-oversize", help="Run even if weights + KV cache exceed hardware.memory_gb x tp_size "
        "(what-if studies).")] = False,
    megatron_args: MegatronArgs = None,
    export_dir: ExportDir = None,
    export_format: ExportFormats = "csv,jsonl",
    with_sensitivity: Annotated[bool, typer.Option(
        "--sensitivity", help="Re-price the run over the cost model's uncertain parameters (host us per op, "
        "kernel launch, efficiencies) against the lines users run: the config with gating off, your "
        "--megatron-args line, Megatron's default line, no graphs. Does the winner change, and the break-even "
        "host cost. Simulator only; see cgbench docs sensitivity.")] = False,
    emit_megatron_log: Annotated[Optional[Path], typer.Option(
        "--emit-megatron-log", metavar="FILE", help="Also write the simulated run as Megatron's console step log "
        "(one line per step, the run's megatron_rules format; gzip'd if FILE ends in .gz), for explain or "
        "calibrate --megatron-log. See cgbench docs megatron-logs.", show_default=False)] = None,
) -> None:
    """Run one benchmark point: a table of the headline metrics and health flags, and a result JSON."""
    with user_errors(), config_folders(config_dirs):
        from cgbench.cli.guards import check_device_memory, check_host_memory, declare_config_inputs, require_torch
        from cgbench.cli.render import graph_usage_table, run_output, run_title
        from cgbench.config.labels import run_labels
        from cgbench.config.load import load_config
        from cgbench.results.document import ensure_writable, write_json_atomic

        ovr = list(overrides or [])
        dirs = list(config_dirs or [])
        if multirun:
            raise ConfigError("--multirun: run takes one point; for several use: cgbench sweep "
                              + " ".join(ovr))
        fmt = "json" if as_json else fmt
        check_format(fmt)
        _refuse_sweep_keys("run", ovr)
        ovr = with_launch_line(megatron_args, ovr, dirs)
        launch_line = None
        if megatron_args is not None:
            from cgbench.config.megatron_args import read_launch_text

            launch_line = read_launch_text(megatron_args)
        if cfg_only is not None:
            if emit_megatron_log is not None:
                raise ConfigError("--emit-megatron-log: --cfg prints the config and runs nothing: drop one of them")
            from cgbench.config.compose import composed_yaml

            sys.stdout.write(composed_yaml(ovr, which=cfg_only, resolve=resolve, config_dirs=dirs))
            return
        if info:
            _print_info(ovr, dirs, fmt)
            return
        cfg = load_config(ovr, config_dirs=dirs)
        declare_config_inputs(cfg, megatron_args)
        warn_before_running(cfg)
        if cfg.backend.name == "torch":
            require_torch()
            check_host_memory(cfg)
        if not allow_oversize:
            check_device_memory(cfg)
        if with_sensitivity:
            from cgbench.analysis.sensitivity import check_sensitivity

            check_sensitivity(cfg)
        if emit_megatron_log is not None:
            from cgbench.analysis.megatron_log.emit import check_emittable

            check_emittable(cfg)
        from cgbench.pipeline import run_device

        labels = run_labels(cfg, ovr, device=run_device(cfg))
        path = out_path or _default_run_path(labels, cfg.out_dir)
        ensure_writable(path)
        ensure_writable(path.with_name(path.stem + ".state.json"), "--out (its state file)")
        if emit_megatron_log is not None:
            ensure_writable(emit_megatron_log, "--emit-megatron-log")
            if emit_megatron_log.resolve() in (path.resolve(), path.with_name(path.stem + ".state.json").resolve()):
                raise ConfigError(f"--emit-megatron-log {emit_megatron_log}: is the result's own path")
        from cgbench.cli.export import export_formats

        formats = export_formats(export_format, export_dir)
        if export_dir is not None:  # a user asking for exports wants the records they are made of
            from cgbench.results.export import check_export_folder, run_files

            check_export_folder(export_dir, run_files(formats))
            trace = requests = True
        from cgbench.pipeline import explain_gating_flag, run_point

        state_path = path.with_name(path.stem + ".state.json")
        with progress(f"running {labels['name']}"):
            doc = run_point(cfg, ovr, trace=trace, requests=requests)
            state = explain_gating_flag(cfg, doc, state_path)
        if with_sensitivity:
            from cgbench.analysis.sensitivity import sensitivity
            from cgbench.cli.progress import ProgressReport

            with ProgressReport("run --sensitivity", console=err) as report:
                report.stage("pricing", None)
                doc["sensitivity"] = sensitivity(cfg, doc["metrics"], overrides=ovr, launch_line=launch_line,
                                                 config_dirs=dirs, progress=report.update)
        if emit_megatron_log is not None:
            from cgbench.analysis.megatron_log.emit import log_bytes

            emitted = log_bytes(cfg, doc["metrics"], emit_megatron_log)
        if state is not None:  # written with the result, after every computation (Ctrl-C writes nothing)
            write_json_atomic(state_path, state)
        written = write_json_atomic(path, doc)
        if emit_megatron_log is not None:
            from cgbench.safeio import write_bytes_atomic

            write_bytes_atomic(emit_megatron_log, emitted.data, "--emit-megatron-log")
        if export_dir is not None:
            from cgbench.results.export import export_run

            export_run(doc, str(written), export_dir, formats=formats)
        shown = run_output(doc, fmt, str(written))
        if isinstance(shown, str):
            sys.stdout.write(shown)
        else:
            out.print(run_title(doc), markup=False, highlight=False, soft_wrap=True)
            out.print(shown)
            if verbose:
                out.print(graph_usage_table(doc))
            if "sensitivity" in doc:
                from cgbench.cli.render_sensitivity import sensitivity_baselines, sensitivity_ranges, sensitivity_table

                out.print(sensitivity_table(doc["sensitivity"]))
                for line in sensitivity_baselines(doc["sensitivity"]) + sensitivity_ranges(doc["sensitivity"]):
                    out.print(line, markup=False, highlight=False, soft_wrap=True)
        err.print(f"result: {written}", highlight=False, markup=False, soft_wrap=True)
        if emit_megatron_log is not None:
            err.print(f"megatron log: {emit_megatron_log} ({emitted.lines:,} step lines, megatron-core "
                      f"{emitted.version} format)", highlight=False, markup=False, soft_wrap=True)
        if doc.get("trace"):  # what the trace reader assumed (format, arrival unit), one line
            err.print(f"note: {doc['trace']['note']}", highlight=False, markup=False, soft_wrap=True)
        if export_dir is not None:
            err.print(f"export: {export_dir}", highlight=False, markup=False, soft_wrap=True)
        for w in doc["warnings"]:
            err.print(f"warning: {w['message']}" + (f"; explain: {w['explain']}" if w.get("explain") else ""),
                      highlight=False, markup=False, soft_wrap=True)


def _print_info(overrides: list[str], dirs: list, fmt: str) -> None:
    """``run --info``: the search path and the defaults list (``cgbench.config.info``)."""
    from cgbench.config.info import config_info
    from cgbench.config.load import load_config

    load_config(overrides, config_dirs=dirs)  # the same checks as a run: a bad override is one line
    doc = config_info(overrides, dirs)
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    from rich import box
    from rich.table import Table

    search = Table(title="config search path (searched in this order)", box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("#", "folder", "provider"):
        search.add_column(col, overflow="fold")
    for i, entry in enumerate(doc["search_path"], 1):
        search.add_row(str(i), entry["path"], entry["provider"])
    defaults = Table(title="defaults list", box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("group", "option", "from", "file"):
        defaults.add_column(col, overflow="fold")
    for row in doc["defaults"]:
        defaults.add_row(row["group"], row["option"], row["from"], row["file"] or "(not found)")
    out.print(f"cgbench {doc['cgbench_version']}", markup=False, highlight=False)
    out.print(search)
    out.print(defaults)


@contextmanager
def progress(label: str, after_s: float = 2.0) -> Iterator[None]:
    """A spinner with the elapsed time on stderr, only on a terminal and only after ``after_s``."""
    print_held()  # the work starts: the command's input was accepted
    if not err.is_terminal:
        yield
        return
    import threading

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn(label, markup=False), TimeElapsedColumn(), console=err,
                   transient=True)
    timer = threading.Timer(after_s, lambda: (bar.start(), bar.add_task(label, total=None)))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        bar.stop()


def grid(
    overrides: Overrides = None,
    fmt: Fmt = "table",
    config_dirs: ConfigDirs = None,
    megatron_args: MegatronArgs = None,
) -> None:
    """Show the captured-graph grid (stored order), token sizes, what a hit covers and the estimated capture
    cost (time, graph-pool memory, and whether weights, KV pool and graphs fit the device)."""
    with user_errors(), config_folders(config_dirs):
        from cgbench.cli.render import csv_text, markdown_table
        from cgbench.cli.render_grid import grid_json, grid_table
        from cgbench.config.load import load_config
        from cgbench.grids.build import build_grid
        from cgbench.grids.coverage import coverage

        check_format(fmt)
        _refuse_sweep_keys("grid", list(overrides or []))
        ovr = with_launch_line(megatron_args, list(overrides or []), config_dirs)
        cfg = load_config(ovr, config_dirs=list(config_dirs or []))
        g = build_grid(cfg.cg, cfg.engine, cfg.model)
        warn_before_running(cfg, g)
        from cgbench.backends.sim.capture import grid_capture_estimate
        from cgbench.grids.megatron import family_sizing

        capture = grid_capture_estimate(g, cfg.model, cfg.hardware, cfg.engine)
        families = family_sizing(cfg.cg, cfg.engine)
        if fmt == "json":
            sys.stdout.write(json.dumps(grid_json(g, capture, families)) + "\n")
            return
        if fmt in ("csv", "markdown"):
            cols = ("order", "T", "P", "D")
            rows = [(i, *g_) for i, g_ in enumerate(grid_json(g)["graphs"])]
            sys.stdout.write(csv_text(cols, rows) if fmt == "csv" else markdown_table(cols, rows))
            return
        e = cfg.engine
        cov = coverage(g, max_requests=e.max_requests, max_tokens=e.max_tokens,
                       max_sequence_length=e.max_sequence_length, num_speculative_tokens=e.num_speculative_tokens)
        for table in grid_table(g, cov, capture, families):
            out.print(table)


def _command_table() -> dict[str, tuple]:
    """Every command: name -> (function, its Typer settings), in the help page's order. The wrappers
    live next to what they drive; one table keeps one app and one help page."""
    from cgbench.cli.advise import advise_cmd
    from cgbench.cli.calibrate import calibrate_cmd
    from cgbench.cli.cost import cost_cmd
    from cgbench.cli.docs import docs_cmd
    from cgbench.cli.explain import explain_cmd
    from cgbench.cli.export import export_cmd
    from cgbench.cli.report import report_cmd
    from cgbench.cli.schedule import schedule_cmd
    from cgbench.cli.schema import schema_cmd
    from cgbench.cli.sweep import compare_cmd, plot_cmd, sweep_cmd

    return {"run": (run, {"epilog": _groups_epilog()}), "grid": (grid, {}), "sweep": (sweep_cmd, {}),
            "compare": (compare_cmd, {}), "plot": (plot_cmd, {}), "schedule": (schedule_cmd, {}),
            "explain": (explain_cmd, {}), "export": (export_cmd, {}), "report": (report_cmd, {}),
            "calibrate": (calibrate_cmd, {}), "cost": (cost_cmd, {}), "advise": (advise_cmd, {}),
            "schema": (schema_cmd, {}), "docs": (docs_cmd, {})}


COMMANDS = _command_table()


def _registered(target: typer.Typer, names: list[str]) -> typer.Typer:
    target.callback()(_main)
    for name in names:
        function, settings = COMMANDS[name]
        target.command(name, **settings)(function)
    return target


_registered(app, list(COMMANDS))


def app_for(argv: list[str]) -> typer.Typer:
    """The app that runs ``argv``: for a command named first, one that holds only that command, the same
    command as the whole app's (Typer builds every command it holds on each call, ~20 ms for all of
    them); the whole app for anything else (the group's help, ``--version``, a mistyped command, shell
    completion, which lists every command)."""
    name = argv[0] if argv else None
    completing = any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)
    if name not in COMMANDS or completing:
        return app
    return _registered(typer.Typer(**APP_SETTINGS), [name])


def main() -> None:
    try:
        app_for(sys.argv[1:])()
    except BrokenPipeError:  # `cgbench ... | head`: the reader left; nothing to report
        _quiet_stdout()
        sys.exit(141)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO):
            raise
        _quiet_stdout()
        print_error(f"cannot write the output: {os.strerror(e.errno)} (any result file was written whole first)")
        sys.exit(2)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
    except OSError:
        pass


if __name__ == "__main__":
    main()
