"""``cgbench calibrate``: measure graphed and eager step times of the real model and write the calibration
table that ``backend.cost_model=calibrated`` reads (the work is in ``cgbench.backends.torch.calibration``).

Registered on the app by ``cgbench.cli.app``; ``python -m cgbench.cli.calibrate`` runs it on its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from cgbench.backends.sim.host_op_default import DEFAULT_HOST_OP_US
from cgbench.cli.console import print_line
from cgbench.cli.options import ConfigDirs, MegatronArgs, complete_override, config_folders, with_launch_line

if TYPE_CHECKING:
    from rich.table import Table

CalibrateOverrides = Annotated[Optional[list[str]], typer.Argument(
    help="Hydra overrides: the model, engine limits, grid and device to measure, e.g. model=tiny_hybrid "
    "engine=small backend.device=cuda.", show_default=False, autocompletion=complete_override)]


def _pct(x: Any) -> str:
    from cgbench.results.formatting import percent

    return percent(x, 1)


def error_table(report: dict[str, Any]) -> Table:
    from rich import box
    from rich.table import Table

    hold = report["holdout"]
    title = f"Held-out steps: calibrated simulator vs measured ({100 * hold['fraction']:.0f}% held out)"
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in ("mode", "measured", "fit", "held out", "median error", "p90 error", "max error"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for mode, s in hold["modes"].items():
        table.add_row(mode, str(s["measured"]), str(s["fit"]), str(s["held_out"]),
                      _pct(s["median_rel_error"]), _pct(s["p90_rel_error"]), _pct(s["max_rel_error"]))
    return table


def summary_table(report: dict[str, Any]) -> Table:
    from rich import box
    from rich.table import Table

    cases = report["cases"]
    table = Table(title=f"Calibration: {report['model']} on {report['device']}", box=box.SIMPLE_HEAD,
                  show_header=False)
    table.add_column("item")
    table.add_column("value")
    method = ("CUDA graph replay (CUDA events)" if report["graphed_method"] == "cuda_graph_replay"
              else "padded step run eagerly (no CUDA graphs on the CPU)")
    table.add_row("torch", str(report["torch"]))
    table.add_row("steps measured", f"{cases['graphed']} graphed, {cases['eager']} eager "
                  f"(of {cases['planned']} planned; {len(cases['skipped'])} skipped)")
    table.add_row("graphed steps", method)
    table.add_row("timing", f"median of {report['repeat']} after {report['warmup']} warm-ups")
    ratio = report["decode_ratio"]
    if ratio["median"] is not None:
        per_d = ", ".join(f"D={d}: {r:.2f}x" for d, r in ratio["per_D"].items())
        table.add_row("decode eager / graphed", f"{ratio['median']:.2f}x median ({per_d})")
    if report.get("capture"):
        cap = report["capture"]
        stop = f"; stopped: {cap['stop_reason']}" if cap.get("stop_reason") else ""
        table.add_row("capture", f"{cap['captured']} graphs for {cap['grid_shapes_covered']} of "
                      f"{cap['grid_shapes']} shapes in {cap['capture_s']} s{stop}")
    table.add_row("elapsed", f"{report['elapsed_s']:.1f} s")
    return table


def cpu_warning(report: dict[str, Any]) -> str | None:
    """On a CPU (no CUDA device), a warning that the table describes this CPU, not a GPU, with the noise
    of its timed runs: the median and worst spread (slowest − fastest run, over the median) of a step."""
    if report.get("on_cuda", True):
        return None
    spreads = sorted((m["max_ms"] - m["min_ms"]) / m["ms"] for m in report.get("measured", []) if m.get("ms"))
    noise = ""
    if spreads:
        median = spreads[len(spreads) // 2] if len(spreads) % 2 else \
            (spreads[len(spreads) // 2 - 1] + spreads[len(spreads) // 2]) / 2
        noise = (f"; measured noise: a step's runs spread {100 * median:.1f}% (median) to "
                 f"{100 * spreads[-1]:.1f}% (worst) of its median over {len(spreads)} steps")
    return (f"warning: no GPU: these step times describe this CPU ({report.get('device', '?')}), computed "
            f"eagerly without CUDA graphs; they are not a GPU's and should not price a GPU run{noise}")


def calibrate_cmd(
    overrides: CalibrateOverrides = None,
    out_path: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Calibration table path; its report goes beside it as <name>.report.json "
        "(default: <out_dir>/calibration/<model>_<device>.json).")] = None,
    repeat: Annotated[Optional[int], typer.Option(
        "--repeat", "-r", help="Timed runs per step (the median is kept); default 7, 30 with --host.",
        show_default=False)] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed runs before timing each step.")] = 2,
    holdout: Annotated[float, typer.Option(
        "--holdout", help="Fraction of the measured steps (per mode, seeded by `seed`) kept out of the table "
        "to score the calibrated simulator on.")] = 0.25,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, or json (the error summary and the files "
                                     "written, one document on stdout).")] = "table",
    as_json: Annotated[bool, typer.Option("--json", hidden=True, help="Same as --format json.")] = False,
    host: Annotated[bool, typer.Option(
        "--host", help="Measure the host instead: the per-op dispatch cost of torch eager steps of a tiny model "
        "on this CPU (model=tiny_transformer or tiny_hybrid), written as a file that hardware.host_calibration "
        "names (default: <out_dir>/calibration/host_<hostname>.json). Without such a file the simulator prices "
        f"an eager step's host work at {DEFAULT_HOST_OP_US:g} µs per op, this command's figure on a 2-core "
        "AMD EPYC VM (cgbench docs cost-model, 'Host cost per engine', for its evidence and range).")] = False,
    config_dirs: ConfigDirs = None,
    megatron_args: MegatronArgs = None,
    megatron_log: Annotated[Optional[Path], typer.Option(
        "--megatron-log", metavar="LOG", show_default=False, help="Fit the simulator's cost model to a production "
        "run's Megatron step log instead (the GPU's efficiencies and the host µs per op, with their uncertainty), "
        "written as a file that hardware.host_calibration names (default: <out_dir>/calibration/"
        "megatron_log_<log>_<hardware>.json). Name the model (overrides or --megatron-args). "
        "See cgbench docs megatron-logs.")] = None,
    rank: Annotated[Optional[int], typer.Option(
        "--rank", show_default=False, help="With --megatron-log: fit one rank's steps (default: every rank's).")
        ] = None,
) -> None:
    """Measure graphed and eager step times of the real model and write the sim's calibration table.

    Graphed steps replay CUDA graphs of the configured grid (on the CPU: the padded step, run eagerly).
    Eager steps cover decode-only, prefill-only and mixed batches at several context lengths.
    Prints how well the calibrated simulator predicts held-out measured steps (median, p90 error).
    With --host: measures the host's per-op dispatch cost instead (see --host). With --megatron-log: fits the
    cost model to a production log instead (see --megatron-log)."""
    from cgbench.cli.errors import err, out, user_errors

    with user_errors():
        from cgbench.cli.formats import TABLE_OR_JSON, check_format

        check_format(fmt, TABLE_OR_JSON)
    as_json = as_json or fmt == "json"
    if megatron_log is not None:
        with user_errors(), config_folders(config_dirs):
            from cgbench.config.schema import ConfigError

            if host:
                raise ConfigError("--host: measures this host; --megatron-log fits a log: give one of them")
            for name, unused in (("--repeat", repeat is not None), ("--warmup", warmup != 2),
                                 ("--holdout", holdout != 0.25)):
                if unused:
                    raise ConfigError(f"{name}: times measured steps; --megatron-log fits the steps a log holds: "
                                      "drop it")
            _calibrate_log(megatron_log, list(overrides or []), megatron_args, out_path, rank, as_json, out, err,
                           list(config_dirs or []))
        return
    if rank is not None:
        with user_errors():
            from cgbench.config.schema import ConfigError

            raise ConfigError("--rank: reads a Megatron log: give --megatron-log LOG")

    if host:
        with user_errors(), config_folders(config_dirs):
            ovr = with_launch_line(megatron_args, list(overrides or []), config_dirs)
            _calibrate_host(ovr, out_path, 30 if repeat is None else repeat, warmup, as_json,
                            out, err, list(config_dirs or []), megatron_args)
        return
    if repeat is None:
        repeat = 7
    with user_errors(), config_folders(config_dirs):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from cgbench.backends.torch.calibration import calibrate, check_request, default_table_path, write_outputs
        from cgbench.config.load import load_config
        from cgbench.results.document import ensure_writable

        ovr = with_launch_line(megatron_args, list(overrides or []), config_dirs)
        cfg = load_config(ovr, config_dirs=list(config_dirs or []))
        check_request(cfg, repeat=repeat, warmup=warmup, holdout=holdout)
        # fail before measuring, not after, when the table could not be written
        from cgbench.backends.torch.calibration import report_path
        from cgbench.cli.guards import declare_config_inputs

        declare_config_inputs(cfg, megatron_args)
        table = out_path or default_table_path(cfg, "probe")
        ensure_writable(table)
        ensure_writable(report_path(table), "--out (its report)")
        with Progress(TextColumn("measuring steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, transient=True) as bar:
            task = bar.add_task("steps", total=None)
            result = calibrate(cfg, repeat=repeat, warmup=warmup, holdout=holdout, overrides=ovr,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
        path = out_path or default_table_path(cfg, result.table.device)
        table_path, sidecar = write_outputs(result, path)
        report = result.report
        warning = cpu_warning(report)
        if as_json:
            brief = {k: report[k] for k in ("model", "device", "torch", "graphed_method", "cases",
                                            "decode_ratio", "table")}
            if warning:
                brief["warning"] = warning
            hold = report["holdout"]
            brief["holdout"] = {"fraction": hold["fraction"], "modes": hold["modes"]}
            brief["report"] = str(sidecar)
            out.print_json(json.dumps(brief))
        else:
            out.print(summary_table(report))
            out.print(error_table(report))
        if warning:
            err.print(warning, soft_wrap=True, markup=False)
        err.print(f"table: {table_path}\nreport: {sidecar}", soft_wrap=True)


def _calibrate_host(ovr: list[str], out_path: Optional[Path], repeat: int, warmup: int, as_json: bool,
                    out: Any, err: Any, config_dirs: list[Path], megatron_args: str | None = None) -> None:
    """``cgbench calibrate --host``: measure, write the host calibration file, print the per-case table."""
    from cgbench.backends.torch.calibration import calibrate_host, check_host_request, default_host_path
    from cgbench.config.load import load_config
    from cgbench.results.document import ensure_writable, write_json_atomic

    cfg = load_config(ovr, config_dirs=config_dirs)
    check_host_request(cfg, repeat=repeat, warmup=warmup)
    from cgbench.cli.guards import declare_config_inputs

    declare_config_inputs(cfg, megatron_args)
    path = out_path or default_host_path(cfg)
    ensure_writable(path)
    result, report = calibrate_host(cfg, repeat=repeat, warmup=warmup)
    write_json_atomic(path, result.to_dict())
    if as_json:
        out.print_json(json.dumps({**result.to_dict(), "cases": report["cases"], "file": str(path)}))
    else:
        out.print(host_table(result, report))
        # its own line, never wrapped: the path is copied from here
        print_line(out, host_hint(result.host_op_us, path))
    err.print(f"host calibration: {path}", soft_wrap=True)


def _calibrate_log(log: Path, ovr: list[str], megatron_args: Optional[str], out_path: Optional[Path],
                   rank: Optional[int], as_json: bool, out: Any, err: Any, config_dirs: list[Path]) -> None:
    """``cgbench calibrate --megatron-log LOG``: fit, write the calibration file, print the fit."""
    from cgbench.analysis.megatron_log.calibrate import calibrate_megatron_log, default_calibration_path
    from cgbench.analysis.megatron_log.config import log_config
    from cgbench.cli.guards import declare_config_inputs
    from cgbench.cli.render_megatron_log import calibration_table, host_evidence_table, log_progress, residual_table
    from cgbench.results.document import ensure_writable
    from cgbench.safeio import declare_inputs, write_json_atomic

    declare_inputs({"--megatron-log": log})
    lc = log_config(ovr, megatron_args, config_dirs)
    if lc.translation:
        err.print(lc.translation, end="", highlight=False, markup=False, soft_wrap=True)
    if lc.cfg is not None:
        declare_config_inputs(lc.cfg, megatron_args)
    path = out_path or (default_calibration_path(lc.cfg, log) if lc.cfg is not None else None)
    if path is not None:
        ensure_writable(path)
    with log_progress(log) as progress:
        found = calibrate_megatron_log(log, lc, rank=rank, progress=progress)
    assert path is not None
    write_json_atomic(path, found.calibration.to_dict())
    if as_json:
        out.print_json(json.dumps({**found.calibration.to_dict(), "host_evidence": found.fit.host_evidence,
                                   "file": str(path)}))
    else:
        out.print(calibration_table(found))
        out.print(residual_table(found))
        evidence = host_evidence_table(found)
        if evidence is not None:
            out.print(evidence)
        for note in found.fit.notes:
            out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        print_line(out, f"use: cgbench run ... hardware.host_calibration={path} (add --sensitivity to price over "
                        "the fitted ranges)")
    err.print(f"log calibration: {path}", soft_wrap=True, markup=False, highlight=False)


def host_table(result: Any, report: dict[str, Any]) -> Table:
    """The per-case dispatch measurements of ``calibrate --host``."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"Host dispatch: {result.host}", box=box.SIMPLE_HEAD)
    for col in ("eager step", "aten ops", "step µs", "µs per op"):
        table.add_column(col, justify="left" if col == "eager step" else "right")
    for c in report["cases"]:
        table.add_row(c["case"], str(c["ops"]), f"{c['step_us']:.1f}", f"{c['per_op_us']:.2f}")
    return table


def host_hint(host_op_us: float, path: Path) -> str:
    return f"host_op_us = {host_op_us:.2f} (median); use hardware.host_calibration={path}"


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(calibrate_cmd)
    app()


if __name__ == "__main__":
    main()
