"""The ``sweep``, ``compare`` and ``plot`` commands (registered on ``cgbench.cli.app.app``).

Imports stay light at module level so ``cgbench --help`` is fast; the work happens in
``cgbench.analysis.sweep.run``, ``cgbench.analysis.compare`` and ``cgbench.analysis.plots.plot``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.text import Text

from cgbench.cli import errors as ui  # consoles and user_errors
from cgbench.cli.console import print_line, print_warning, styled
from cgbench.cli.export import ExportDir, ExportFormats
from cgbench.cli.formats import check_format
from cgbench.cli.options import ConfigDirs, MegatronArgs, complete_override, config_dirs_for_children
from cgbench.config.overrides import split_override

if TYPE_CHECKING:
    from rich.table import Table

    from cgbench.analysis.sweep.command import PlanFn
    from cgbench.analysis.sweep.executors import Executor
    from cgbench.analysis.sweep.run import PointOutputs, PointResult, SweepOutcome, SweepPlan, SweepPoint

SweepOverrides = Annotated[Optional[list[str]], typer.Argument(
    help="Hydra overrides; a comma list or range() is a sweep axis (model=transformer,hybrid), a single "
    "value is fixed for every point (workload.num_requests=64). The sweep is exactly these axes over the "
    "base config. sweep=NAME brings the axes of conf/sweep/NAME.yaml, and an axis given here replaces "
    "that sweep's axis of the same key; with no overrides at all, sweep=default runs.", show_default=False,
    autocompletion=complete_override)]



def _point_label(point: SweepPoint) -> str:
    items = point.params.items() if point.params else ((k, v) for k, v in
                                                       (split_override(o) for o in point.overrides))
    return " ".join(f"{k}={v}" for k, v in items) or "defaults"


def _point_line(r: PointResult, done: int, total: int) -> str | Text:
    from cgbench.results.formatting import percent as _pct

    label = _point_label(r.point)
    if r.status != "done":
        return Text.assemble(f"[{done}/{total}] {label}: ", (r.status, "red"), f" {r.error or ''}")
    m = r.metrics
    ttft = f", p99 TTFT {m['ttft_ms.p99']:.1f} ms" if "ttft_ms.p99" in m else ""
    return (f"[{done}/{total}] {label}: eager {_pct(m.get('eager_step_fraction'))}, "
            f"longest wait {m.get('max_cg_wait_iters', '-')} iters{ttft}, health {health_cell(r.health)} "
            f"({r.wall_s:.2f} s)")


def health_cell(codes: list[str] | None) -> str:
    """A point's health, compactly: ``ok``, its flag codes (``overload, long_graph_wait``), or ``-``."""
    if codes is None:
        return "-"
    return ", ".join(codes) or "ok"


def _axes_table(plan: SweepPlan) -> Table:
    """Each axis, its values and where it came from (the sweep file or the command line)."""
    from rich import box
    from rich.table import Table

    n = len(plan.points)
    t = Table(title=f"axes: {' x '.join(str(len(v)) for v in plan.axes.values() if len(v) > 1) or '1'} = "
              f"{n} point{'s' if n != 1 else ''}", box=box.SIMPLE_HEAVY, title_justify="left")
    t.add_column("axis")
    t.add_column("values", overflow="fold")
    t.add_column("from")
    for key, values in plan.axes.items():
        t.add_row(key, ",".join(values), plan.axis_sources.get(key, ""))
    return t


def _plan_table(plan: SweepPlan, resume: bool) -> Table:
    from rich import box
    from rich.table import Table

    from cgbench.analysis.sweep.run import resume_decisions

    t = Table(title=f"sweep {plan.name}: {len(plan.points)} points -> {plan.out_dir}", box=box.SIMPLE_HEAVY,
              title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("overrides", overflow="fold")
    t.add_column("file", overflow="fold")
    kept: dict = {}
    rerun: dict = {}
    if resume:
        t.add_column("on --resume")
        kept, rerun = resume_decisions(plan)
    for i, p in enumerate(plan.points):
        row = [str(p.index + 1), " ".join(p.overrides) or "(defaults)", p.file]
        if resume:
            row.append("kept" if i in kept else "run again: config changed" if i in rerun else "run")
        t.add_row(*row)
    return t


def _print_dry_run(plan: SweepPlan, resume: bool, fmt: str, slurm: dict | None) -> None:
    """``--dry-run``: the axes and the points as tables, or in any other ``--format`` as data (json:
    one document; csv and markdown: the points)."""
    from cgbench.analysis.sweep.dry_run import dry_run_document, dry_run_rows

    if fmt == "table":
        ui.out.print(_axes_table(plan))
        ui.out.print(_plan_table(plan, resume))
        if slurm is not None:
            shown = " ".join(f"{k}={v!r}" for k, v in slurm.items()) or "(submitit's defaults)"
            ui.out.print(f"slurm: job arrays; settings {shown}", highlight=False, soft_wrap=True, markup=False)
        return
    if fmt == "json":
        text = json.dumps(dry_run_document(plan, resume, slurm), indent=1) + "\n"
    else:
        from cgbench.cli.render import csv_text, markdown_table

        cols, rows = dry_run_rows(plan, resume)
        text = csv_text(cols, rows) if fmt == "csv" else markdown_table(cols, rows)
    ui.out.print(text, end="", markup=False, highlight=False, soft_wrap=True)


def summary_table(outcome: SweepOutcome, columns: tuple[str, ...] | None = None) -> Table:
    """One row per point: its varying axes, status, health flags and metrics (``columns``, else
    ``TABLE_METRICS``: fits an 80-column CI log)."""
    from rich import box
    from rich.table import Table


    names = columns or TABLE_METRICS
    plan = outcome.plan
    keys = plan.varying
    counts = ", ".join(f"{outcome.count(s)} {s}" for s in ("done", "failed", "pending") if outcome.count(s))
    t = Table(title=f"sweep {plan.name}: {len(plan.points)} points ({counts})", box=box.SIMPLE_HEAVY,
              title_justify="left", show_edge=False, padding=0)
    labels = [[r.point.params.get(k, "") for k in keys] if keys else [" ".join(r.point.overrides) or "defaults"]
              for r in outcome.results]
    for i, k in enumerate(keys or ["point"]):
        # the point's identity stays readable; the numeric headers wrap instead
        t.add_column(k.rsplit(".", 1)[-1], no_wrap=True, min_width=max(len(row[i]) for row in labels))
    t.add_column("status", no_wrap=True)
    t.add_column("health")
    for name in names:
        t.add_column(_header(name), justify="right")
    for r, label in zip(outcome.results, labels, strict=True):
        m = r.metrics
        status = "kept" if r.reused else r.status
        if m.get("outcome") not in (None, "completed"):
            status = str(m["outcome"])
        cells = [_cell(name, _value(r, name)) for name in names]
        t.add_row(*label, status, health_cell(r.health), *cells,
                  style={"failed": "red", "pending": "yellow"}.get(r.status, ""))
    return t


def _value(r: PointResult, name: str):
    return r.metrics[name] if name in r.metrics else r.columns.get(name)


def _cell(name: str, value) -> str:
    if name in ("goodput_req_s", "goodput_fraction") and value is None:
        return "n/a"  # no slo.* bound set: no goodput
    # the default columns' p99 TTFT and throughput are whole numbers; a chosen column keeps two decimals
    from cgbench.results.formatting import metric_value

    whole = name in TABLE_METRICS and name.endswith(("_ms.p99", "_tok_s"))
    return metric_value(name, value, 0 if whole else 2)


# the summary table's metric columns (sweep.json and summary.csv hold every headline metric)
TABLE_METRICS = ("eager_step_fraction", "deferral_events", "max_cg_wait_iters", "max_queue_wait_iters",
                 "ttft_ms.p99", "output_throughput_tok_s")


def _header(name: str) -> str:
    """A two-line column header from the registry: label, then unit."""
    from cgbench.results.names import label

    text = label(name)
    head, _, unit = text.partition(" (")
    return f"{head}\n{unit.rstrip(')')}" if unit else head


def summary_markdown(outcome: SweepOutcome, columns: tuple[str, ...] | None = None) -> str:
    """The summary as a Markdown table (raw axis values, metrics formatted like the table)."""
    from cgbench.analysis.sweep.run import summary_records

    names = columns or TABLE_METRICS
    plan = outcome.plan
    keys = plan.varying or ["overrides"]
    heads = [*keys, "status", "health", *(_header(n).replace("\n", " ") for n in names)]
    lines = [f"### sweep {plan.name}: {len(plan.points)} points", "",
             "| " + " | ".join(heads) + " |", "|" + "---|" * len(keys) + "---|---|" + "---:|" * len(names)]
    for rec in summary_records(plan, outcome.results, names):
        cells = [str(rec[k]) for k in keys] + [str(rec["status"]), health_cell(rec["health"])]
        cells += [_cell(n, rec.get(n)) for n in names]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def summary_json(outcome: SweepOutcome, columns: tuple[str, ...] | None = None) -> str:
    import json

    from cgbench.analysis.sweep.run import summary_records

    plan = outcome.plan
    return json.dumps({"name": plan.name, "dir": str(plan.out_dir), "axes": plan.axes,
                       "points": summary_records(plan, outcome.results, columns)}, indent=1) + "\n"


def print_summary(outcome: SweepOutcome, fmt: str, columns: tuple[str, ...] | None = None) -> None:
    """The summary on stdout; ``columns`` (``--columns``) replaces the default metric columns (the
    table's ``TABLE_METRICS``; JSON and CSV: every headline metric)."""
    if fmt == "table":
        ui.out.print(summary_table(outcome, columns))
        return
    from cgbench.analysis.sweep.run import summary_csv

    text = {"csv": lambda: summary_csv(outcome.plan, outcome.results, columns),
            "markdown": lambda: summary_markdown(outcome, columns),
            "json": lambda: summary_json(outcome, columns)}[fmt]()
    ui.out.print(text, end="", markup=False, highlight=False, soft_wrap=True)


def _print_export(export_dir: Path, notes: list[str]) -> None:
    for note in notes:
        ui.err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"export: {export_dir}", markup=False, highlight=False, soft_wrap=True)


def _run_with_progress(plan: SweepPlan, jobs: int, resume: bool, executor: Executor | None, *,
                       outputs: PointOutputs) -> SweepOutcome:
    """The sweep with its progress on stderr (``cli/progress.py``): a bar with the time left on a
    terminal; in a log a line per point, with the time left, and a line whenever a point (one with
    ``--sensitivity``, say) keeps the log quiet for a while."""
    from cgbench.analysis.sweep.run import run_sweep
    from cgbench.cli.progress import ProgressReport

    interactive = ui.err.is_terminal
    with ProgressReport(f"sweep {plan.name}", console=ui.err) as report:
        def on_start(total: int) -> None:
            report.stage("points", total)

        def on_done(r: PointResult) -> None:
            report.advance()
            line = _point_line(r, report.done, report.total or 0)
            if not interactive:
                report.note(Text.assemble(line, report.eta_text()))
            elif r.status != "done":
                report.note(line)

        return run_sweep(plan, jobs=jobs, resume=resume, executor=executor, on_start=on_start, on_done=on_done,
                         on_note=report.note, outputs=outputs)


def _plan_with_progress(plan: PlanFn) -> SweepPlan:
    """Plan the sweep: on a terminal, a progress bar on stderr while the points are composed; in a log, a
    line every ``PLAN_NOTE_EVERY_S`` once planning has taken that long (10,000 points, the limit, take
    ~15 s: never minutes without a word)."""
    err = ui.err
    if not err.is_terminal:
        import time

        start = time.monotonic()
        last = [start]

        def note(done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PLAN_NOTE_EVERY_S and done < total:
                last[0] = now
                left = (now - start) / done * (total - done)
                err.print(f"planning: composed {done:,} of {total:,} points (about {left:.0f} s left)",
                          markup=False, highlight=False, soft_wrap=True)

        return plan(on_progress=note)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("planning: composing points"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        task = progress.add_task("plan", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return plan(on_progress=on_progress)


def _say(line: str) -> None:
    ui.err.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_planned(plan: SweepPlan, launch_text: str | None) -> None:
    if launch_text is not None:
        ui.err.print(launch_text, end="", highlight=False, markup=False, soft_wrap=True)
    for line in plan.warnings:  # gating off, and points that run the same steps: before anything runs
        print_warning(line)


def _parse_columns(text: str | None, dry_run: bool) -> tuple[str, ...] | None:
    if text is None:
        return None
    from cgbench.config.schema import ConfigError
    from cgbench.results.names import parse_columns

    if dry_run:
        raise ConfigError("--columns: chooses the summary's columns, and --dry-run prints no summary")
    return parse_columns(text)


PLAN_NOTE_EVERY_S = 5.0


def sweep_cmd(
    overrides: SweepOverrides = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Sweep folder (default: a new <out_dir>/sweeps/<time>_<name>/). A folder that "
        "already holds results is refused unless --resume.")] = None,
    jobs: Annotated[Optional[int], typer.Option(
        "--jobs", "-j", min=1, help="Points run in parallel worker processes (default: sweep.jobs). "
        "With --executor slurm: how many array tasks run at once.")] = None,
    repeat: Annotated[Optional[int], typer.Option(
        "--repeat", "-r", min=1, help="Run each point N times with seeds seed, seed+1, ... "
        "(default: sweep.repeat).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Finish the sweep in --out DIR (same arguments): run only the points whose JSON "
        "is missing or unreadable, or whose resolved config changed since it ran (a changed default in the "
        "config tree, a changed trace); each rerun is named in one line.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Compose and check every point; show the axes (and where each came from) and "
        "the points; run nothing.")] = False,
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="The summary on stdout: table, markdown, json or csv "
        "(summary.csv in the sweep folder is always written).")] = "table",
    executor: Annotated[Optional[str], typer.Option(
        "--executor", help="Where the points run: local (this machine: --jobs worker processes) or slurm "
        "(SLURM job arrays of many points a task, through submitit; see cgbench docs sweeps). Default: local, "
        "or what the sweep ran on with --resume.", show_default=False)] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", help="With --executor slurm: submit and exit (the index says submitted); `cgbench sweep "
        "--resume DIR` later collects the finished points, shows the progress of the rest and resubmits what "
        "failed.")] = False,
    slurm: Annotated[Optional[list[str]], typer.Option(
        "--slurm", help="A submitit / sbatch setting for --executor slurm, KEY=VALUE (repeatable): "
        "partition=cpu, timeout_min=10, mem_gb=4, cpus_per_task=1, gpus_per_node=1, "
        "'setup=[\"source ~/venv/bin/activate\"]'.", show_default=False)] = None,
    launcher: Annotated[Optional[str], typer.Option("--launcher", hidden=True)] = None,
    config_dirs: ConfigDirs = None,
    export_dir: ExportDir = None,
    export_format: ExportFormats = "csv,jsonl",
    with_sensitivity: Annotated[bool, typer.Option(
        "--sensitivity", help="Re-price every point over the cost model's uncertain parameters (as cgbench "
        "run --sensitivity): each point's JSON gets the block; a table says where a winner flips.")] = False,
    megatron_args: MegatronArgs = None,
    columns: Annotated[Optional[str], typer.Option(
        "--columns", metavar="METRIC,...", help="The summary's metric columns, comma-separated registry names "
        "(cgbench docs metrics): tpot_ms.p99,ttft_ms.p50,load.served_fraction. Default: eager step fraction, "
        "deferrals, longest wait, queue wait, p99 TTFT, output throughput (JSON and CSV: every headline "
        "metric). The axes, status and health columns are always shown.", show_default=False)] = None,
) -> None:
    """Run a sweep: the Cartesian product of the axes, one result JSON per point plus sweep.json
    and summary.csv, in a new folder per sweep.

    Axes given here are the whole sweep. Without overrides it runs [bold]conf/sweep/default.yaml[/bold] \
(2 models x 3 policies x 3 grids); [bold]sweep=NAME[/bold] runs conf/sweep/NAME.yaml, with axes given \
here replacing its axes of the same key. Every point is composed and checked before anything runs.

    Exit 0 when every point finished, 1 when a point failed or is missing (a cancelled SLURM task), 2 on \
a config error (also: another sweep is writing the same --out folder), 130 when interrupted (143 on \
SIGTERM; finished points are kept; [bold]--resume[/bold] runs the rest).
    """
    with ui.user_errors(), config_dirs_for_children(list(config_dirs or [])):
        from cgbench.analysis.sweep.command import DryRun, SweepHooks, SweepRequest
        from cgbench.analysis.sweep.command import sweep as run_sweep_command
        from cgbench.cli.export import export_formats

        check_format(fmt)
        chosen = _parse_columns(columns, dry_run)
        req = SweepRequest(overrides=tuple(overrides or ()), out_dir=out_dir, jobs=jobs, repeat=repeat, resume=resume,
                           dry_run=dry_run, executor=executor, detach=detach, slurm=tuple(slurm or ()),
                           launcher=launcher, config_dirs=tuple(config_dirs or ()), export_dir=export_dir,
                           sensitivity=with_sensitivity, megatron_args=megatron_args, columns=chosen or ())
        hooks = SweepHooks(plan=_plan_with_progress, planned=_print_planned, say=_say, run=_run_with_progress,
                           export_formats=lambda: export_formats(export_format, export_dir))
        ran = run_sweep_command(req, hooks)
        if isinstance(ran, DryRun):
            _print_dry_run(ran.plan, ran.resume, fmt, ran.slurm)
            return
        outcome = ran.outcome
        if export_dir is not None and ran.export_notes is not None:
            _print_export(export_dir, ran.export_notes)
    print_summary(outcome, fmt, chosen)
    for line in outcome.plan.warnings:  # again under the summary they qualify (also in sweep.json)
        print_warning(line)
    if with_sensitivity and fmt == "table":
        from cgbench.cli.render_sensitivity import sweep_sensitivity_table

        ui.out.print(sweep_sensitivity_table(outcome.plan.out_dir, [(r.point.file, _point_label(r.point))
                                                                    for r in outcome.results if r.status == "done"]))
    ui.err.print(f"index: {outcome.index_path}", highlight=False, soft_wrap=True)
    done, total = outcome.count("done"), len(outcome.results)
    if outcome.interrupted:
        print_line(ui.err, styled("interrupted:", "yellow"), f" {done} of {total} points finished and kept; "
                   f"`cgbench sweep --resume --out {outcome.plan.out_dir}` with the same arguments runs the "
                   f"other {total - done}")
        raise typer.Exit(143 if outcome.signal_name == "SIGTERM" else 130)
    failed, missing = outcome.count("failed"), outcome.count("pending")
    if detach and missing and not failed:
        print_line(ui.err, styled("submitted:", "green"), f" {missing} of {total} points are on the cluster; "
                   f"`cgbench sweep --resume {outcome.plan.out_dir}` collects them (and resubmits what fails)")
        return
    if failed:
        print_line(ui.err, styled(f"{failed} of {total} points failed", "red"), f" (errors in {outcome.index_path})")
    if missing:  # e.g. SLURM array tasks cancelled with scancel
        print_line(ui.err, styled(f"{missing} of {total} points missing", "yellow"),
                   "; `cgbench sweep --resume` with the same arguments runs them")
    if failed or missing:
        raise typer.Exit(1)


def compare_cmd(
    base: Annotated[Path, typer.Argument(help="Baseline: a result JSON or a sweep folder.", show_default=False)],
    new: Annotated[Path, typer.Argument(help="New: a result JSON or a sweep folder.", show_default=False)],
    rules: Annotated[Optional[Path], typer.Option(
        "--rules", help="Metric rules YAML (default: conf/compare/default.yaml).", show_default=False)] = None,
    fail_on: Annotated[str, typer.Option(
        "--fail-on", help="Classes that fail the gate (exit 1), comma-separated: regressed, missing, failed, "
        "changed, improved, within; or none.")] = "regressed,missing,failed,changed",
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="stdout: table (a line per point that moved; details "
        "with -v), markdown (bounded, for a CI job summary), json (the whole comparison) or csv (one row "
        "per check).")] = "table",
    markdown: Annotated[Optional[Path], typer.Option(
        "--markdown", help="Also write the Markdown summary here (e.g. $GITHUB_STEP_SUMMARY).",
        show_default=False)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Table: also every changed metric.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Table: every checked metric (implies -v).")] = False,
    pair_by: Annotated[Optional[str], typer.Option(
        "--pair-by", metavar="KEY,...", help="Pair the points of two sweeps by the values of these override keys "
        "only (the swept axes: model,cg,policy), for sweeps that differ on purpose in another key (a 16-graph "
        "baseline against an 8-graph candidate). Each differing config key is shown; exact checks are "
        "skipped, as for any unequal configs. Default: points pair only when all their overrides are equal.",
        show_default=False)] = None,
) -> None:
    """Compare two results metric by metric: a CI gate.

    BASE and NEW are result JSONs or sweep folders; sweep points are matched by their overrides \
(or by the [bold]--pair-by[/bold] keys). Each metric check is regressed, improved (beyond the \
tolerance, in the registry's direction), within tolerance, or changed (an exact metric differs); a \
health flag NEW raises and BASE did not is regressed; a point is missing (not in NEW) or failed \
(failed in NEW). Rules come from [bold]--rules[/bold].

    Exit 0: no point or check in a --fail-on class; 1: one in a --fail-on class (default: regressed, \
missing, failed, changed, so a missing or failed point fails the gate); 2: bad input (missing file, \
unreadable JSON, schema mismatch, no common points, bad rules).
    """
    with ui.user_errors():
        from cgbench import safeio
        from cgbench.analysis import compare as cmp
        from cgbench.cli import render_compare as view

        check_format(fmt)
        classes = cmp.parse_fail_on(fail_on)
        safeio.declare_inputs({"BASE": base, "NEW": new, "--rules": rules})
        safeio.declare_folder_inputs({"BASE": base, "NEW": new})
        if markdown is not None:
            safeio.check_writable(markdown, "--markdown")
        keys = cmp.parse_pair_by(pair_by)
        comp = cmp.compare_paths(base, new, cmp.load_rules(rules), keys)
        failing = comp.failing(classes)
        for w in comp.warnings:
            print_warning(w)
        if fmt == "table":
            _print_comparison(comp, classes, verbose or show_all, show_all)
        else:
            text = {"markdown": lambda: view.markdown(comp, classes),
                    "json": lambda: json.dumps(cmp.to_dict(comp, classes), indent=1) + "\n",
                    "csv": lambda: view.to_csv(comp)}[fmt]()
            ui.out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        if markdown is not None:
            safeio.write_text_atomic(markdown, view.markdown(comp, classes), "--markdown")
    if failing:
        raise typer.Exit(1)


def _print_comparison(comp, classes: tuple[str, ...], details: bool, show_all: bool) -> None:
    from cgbench.analysis import compare as cmp
    from cgbench.cli import render_compare as view

    failing = comp.failing(classes)
    moved = [p for p in comp.sorted_points() if p.status not in (cmp.SAME, cmp.SKIPPED)]
    ui.out.print(f"compare: {comp.base} -> {comp.new}", markup=False, highlight=False, soft_wrap=True)
    for p in moved:
        colour = "red" if p in failing else "green" if p.status == cmp.IMPROVED else ""
        line = view.point_line(p)
        ui.out.print(line, markup=False, highlight=False, soft_wrap=True, style=colour or None)
    if details and view.detail_rows(comp, show_all):
        ui.out.print(view.comparison_table(comp, show_all))
    ui.out.print(cmp.health_summary(comp), markup=False, highlight=False, soft_wrap=True)
    for note in comp.notes:
        ui.err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    colour = "red" if failing else "green"
    ui.out.print(cmp.verdict(comp, classes), style=f"bold {colour}", markup=False, highlight=False, soft_wrap=True)


def plot_cmd(
    target: Annotated[Path, typer.Argument(help="A sweep folder or one result JSON.", show_default=False)],
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Folder for the PNG files (default: <sweep>/plots or <result folder>/plots).",
        show_default=False)] = None,
    x: Annotated[Optional[str], typer.Option("--x", help="Sweep key on the x axis (default: cg, or the "
                                             "arrival rate).", show_default=False)] = None,
    y: Annotated[Optional[list[str]], typer.Option("--y", help="Metric to draw (repeatable; dotted: "
                                                   "ttft_ms.p99). Default: eager_step_fraction and "
                                                   "max_cg_wait_iters (bars), TTFT/TPOT p99 and output "
                                                   "throughput (load).", show_default=False)] = None,
    hue: Annotated[Optional[str], typer.Option("--hue", help="Sweep key for colours (default: policy).",
                                               show_default=False)] = None,
    row: Annotated[Optional[str], typer.Option("--row", help="Sweep key for rows of panels (default: model).",
                                               show_default=False)] = None,
    col: Annotated[Optional[str], typer.Option("--col", help="Sweep key for columns of panels (default: the "
                                               "other varying keys).", show_default=False)] = None,
    filters: Annotated[Optional[list[str]], typer.Option(
        "--filter", help="Only points with key=value (repeatable): --filter model=hybrid.",
        show_default=False)] = None,
    slo: Annotated[Optional[list[str]], typer.Option(
        "--slo", help="A bound drawn on the load curves, metric=value (repeatable): --slo ttft_ms.p99=1000. "
        "Default: the runs' slo.ttft_ms / tpot_ms / e2e_ms on the p99 panels.", show_default=False)] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table (a path a line) or json (the files and notes, "
                                     "one document on stdout).")] = "table",
) -> None:
    """Draw PNG figures of a sweep or of one run, and print their paths.

    A sweep: grouped bars per [bold]--y[/bold] metric (hue = policy, x = grid, rows = model, the other \
varying keys as columns, unless --x/--hue/--row/--col say otherwise), a Pareto view per facet, and, \
when the arrival rate is swept (sweep=rate), load curves with the SLO and each curve's maximum \
sustainable rate. One run: a summary, a per-iteration timeline (needs [bold]run --trace[/bold]) and \
queue-wait histograms (needs [bold]run --requests[/bold]).
    """
    with ui.user_errors():
        from cgbench import safeio
        from cgbench.analysis.plots.data import PlotSpec, parse_pairs, parse_slo
        from cgbench.analysis.plots.plot import plot
        from cgbench.cli.formats import TABLE_OR_JSON

        check_format(fmt, TABLE_OR_JSON)
        safeio.declare_inputs({"TARGET": target})
        safeio.declare_folder_inputs({"TARGET": target})
        spec = PlotSpec(x, list(y or []), hue, row, col, parse_pairs(list(filters or []), "--filter"),
                        parse_slo(list(slo or [])))
        files, notes = plot(target, out_dir, spec)
    if fmt == "json":
        ui.out.print(json.dumps({"files": [str(f) for f in files], "notes": list(notes)}, indent=1), highlight=False,
                     soft_wrap=True, markup=False)
        return
    for note in notes:
        ui.err.print(f"note: {note}", highlight=False, soft_wrap=True, markup=False)
    for f in files:
        ui.out.print(str(f), highlight=False, soft_wrap=True, markup=False)
