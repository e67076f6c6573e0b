"""The ``cgbench`` command line: parse, call, print. Heavy imports happen inside commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from cgbench import __version__
from cgbench.config.schema import ConfigError

app = typer.Typer(
    help="Measure CUDA-graph-aware admission gating (Megatron-LM PR #4870) in an LLM engine's prefill "
    "scheduler. Configs are Hydra overrides: [bold]cgbench run model=hybrid cg=dense policy=budget[/bold].",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
out = Console()
err = Console(stderr=True)

Overrides = Annotated[Optional[list[str]], typer.Argument(
    help="Hydra overrides: group=option (model=hybrid) or key=value (engine.max_requests=128).",
    show_default=False)]


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input -> one clear line on stderr and exit code 2; Ctrl-C -> exit 130, nothing written."""
    try:
        yield
    except ConfigError as e:
        err.print(f"[bold red]error:[/bold red] {e}", soft_wrap=True, highlight=False, markup=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("interrupted: nothing was written", highlight=False)
        raise typer.Exit(130) from None


def _version(value: bool) -> None:
    if value:
        out.print(f"cgbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    pass


def _default_run_path(cfg, out_dir: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    name = f"{stamp}_{cfg.model.name}_{cfg.cg.kind}_{cfg.policy.name}.json"
    return Path(out_dir) / "runs" / name


@app.command()
def run(
    overrides: Overrides = None,
    out_path: Annotated[Optional[Path], typer.Option("--out", "-o", help="Result JSON path "
                        "(default: <out_dir>/runs/<time>_<model>_<cg>_<policy>.json).")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="Add per-step records to the JSON.")] = False,
    requests: Annotated[bool, typer.Option("--requests", help="Add per-request records to the JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print the graph-usage table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON instead of tables.")] = False,
) -> None:
    """Run one benchmark point: a Rich table of the headline metrics and a result JSON."""
    with user_errors():
        from cgbench.cli.render import graph_usage_table, run_table
        from cgbench.config.compose import load_config
        from cgbench.pipeline import run_point
        from cgbench.results.document import ensure_writable, write_json_atomic

        ovr = list(overrides or [])
        cfg = load_config(ovr)
        path = out_path or _default_run_path(cfg, cfg.out_dir)
        ensure_writable(path)
        doc = run_point(cfg, ovr, trace=trace, requests=requests)
        written = write_json_atomic(path, doc)
        if as_json:
            out.print_json(json.dumps(doc["metrics"]))
        else:
            out.print(run_table(doc))
            if verbose:
                out.print(graph_usage_table(doc))
        err.print(f"result: {written}", highlight=False)
        if doc["metrics"]["outcome"] != "completed":
            err.print(f"[yellow]warning:[/yellow] run {doc['metrics']['outcome']}: {doc['metrics']['diagnosis']}",
                      soft_wrap=True, highlight=False)


@app.command()
def grid(
    overrides: Overrides = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
) -> None:
    """Show the captured-graph grid (stored order), token sizes and what a hit covers."""
    with user_errors():
        from cgbench.cli.render_grid import grid_json, grid_table
        from cgbench.config.compose import load_config
        from cgbench.grids.build import build_grid
        from cgbench.grids.coverage import coverage

        if fmt not in ("table", "json"):
            raise ConfigError(f"--format: {fmt!r} is not one of table, json")
        cfg = load_config(list(overrides or []))
        g = build_grid(cfg.cg, cfg.engine, cfg.model)
        if fmt == "json":
            sys.stdout.write(json.dumps(grid_json(g)) + "\n")
            return
        e = cfg.engine
        cov = coverage(g, max_requests=e.max_requests, max_tokens=e.max_tokens,
                       max_sequence_length=e.max_sequence_length, num_speculative_tokens=e.num_speculative_tokens)
        for table in grid_table(g, cov):
            out.print(table)


def _register_commands() -> None:
    # thin wrappers live next to what they drive; registering here keeps one app and one help page
    from cgbench.cli.advise import advise_cmd
    from cgbench.cli.calibrate import calibrate_cmd
    from cgbench.cli.schedule import schedule_cmd
    from cgbench.cli.sweep import compare_cmd, plot_cmd, sweep_cmd

    app.command("sweep")(sweep_cmd)
    app.command("compare")(compare_cmd)
    app.command("plot")(plot_cmd)
    app.command("schedule")(schedule_cmd)
    app.command("calibrate")(calibrate_cmd)
    app.command("advise")(advise_cmd)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
