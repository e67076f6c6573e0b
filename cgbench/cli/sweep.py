"""The ``sweep``, ``compare`` and ``plot`` commands (registered on ``cgbench.cli.app.app``).

Imports stay light at module level so ``cgbench --help`` is fast; the work happens in
``cgbench.analysis.sweep``, ``cgbench.analysis.compare`` and ``cgbench.analysis.plots``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

if TYPE_CHECKING:
    from rich.table import Table

    from cgbench.analysis.sweep import PointResult, SweepOutcome, SweepPlan, SweepPoint

SweepOverrides = Annotated[Optional[list[str]], typer.Argument(
    help="Hydra overrides; a comma list or range() is a sweep axis (model=transformer,hybrid), a single "
    "value is fixed for every point (workload.num_requests=64). sweep=NAME picks conf/sweep/NAME.yaml, "
    "whose sweep.params are the default axes; a key given here replaces that axis. hydra.* overrides "
    "go to the launcher (with --launcher).", show_default=False)]


def _ui():
    from cgbench.cli import app as cli  # late: cli.py imports this module to register the commands

    return cli


def _pct(x: Any) -> str:
    return f"{100.0 * x:.2f}%" if isinstance(x, (int, float)) else "-"


def _num(x: Any, digits: int = 2) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-"
    return f"{x}" if isinstance(x, int) else f"{x:.{digits}f}"


def _point_label(point: SweepPoint) -> str:
    items = point.params.items() if point.params else ((k, v) for k, v in
                                                       (o.partition("=")[::2] for o in point.overrides))
    return " ".join(f"{k}={v}" for k, v in items) or "defaults"


def _point_line(r: PointResult, done: int, total: int) -> str:
    label = _point_label(r.point)
    if r.status != "done":
        return f"[{done}/{total}] {label}: [red]{r.status}[/red] {r.error or ''}"
    m = r.metrics
    ttft = f", p99 TTFT {m['ttft_ms.p99']:.1f} ms" if "ttft_ms.p99" in m else ""
    return (f"[{done}/{total}] {label}: eager {_pct(m.get('eager_step_fraction'))}, "
            f"longest wait {m.get('max_cg_wait_iters', '-')} iters{ttft} ({r.wall_s:.2f} s)")


def _plan_table(plan: SweepPlan, resume: bool) -> Table:
    from rich import box
    from rich.table import Table

    from cgbench.analysis.sweep import complete_result

    t = Table(title=f"sweep {plan.name}: {len(plan.points)} points -> {plan.out_dir}", box=box.SIMPLE_HEAVY,
              title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("overrides", overflow="fold")
    t.add_column("file", overflow="fold")
    if resume:
        t.add_column("on --resume")
    for p in plan.points:
        row = [str(p.index + 1), " ".join(p.overrides) or "(defaults)", p.file]
        if resume:
            kept = complete_result(plan.out_dir / p.file, p.overrides) is not None
            row.append("kept" if kept else "run")
        t.add_row(*row)
    return t


def summary_table(outcome: SweepOutcome) -> Table:
    """One row per point: its varying axes, status and headline metrics (fits an 80-column CI log)."""
    from rich import box
    from rich.table import Table

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
    rows = []
    for r in outcome.results:
        m = r.metrics
        status = "kept" if r.reused else r.status
        if m.get("outcome") not in (None, "completed"):
            status = str(m["outcome"])
        rows.append((r.status, status, [_pct(m.get("eager_step_fraction")), _num(m.get("deferral_events")),
                                        _num(m.get("max_cg_wait_iters")), _num(m.get("max_queue_wait_iters")),
                                        _num(m.get("ttft_ms.p99"), 0), _num(m.get("output_throughput_tok_s"), 0)]))
    for col in ("eager\n%", "defer\nevents", "max\nwait", "max\nqueue", "TTFT\np99 ms", "out\ntok/s"):
        t.add_column(col, justify="right")
    for (kind, status, cells), label in zip(rows, labels, strict=True):
        t.add_row(*label, status, *cells, style={"failed": "red", "pending": "yellow"}.get(kind, ""))
    return t


def _run_in_process(plan: SweepPlan, jobs: int, resume: bool) -> SweepOutcome:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from cgbench.analysis.sweep import run_sweep

    err = _ui().err
    interactive = err.is_terminal
    state = {"done": 0, "total": 0}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=err, transient=True, disable=not interactive) as progress:
        task = progress.add_task(f"sweep {plan.name}", total=None)

        def on_start(total: int) -> None:
            state["total"] = total
            progress.update(task, total=total)

        def on_done(r: PointResult) -> None:
            state["done"] += 1
            progress.update(task, advance=1, description=f"sweep {plan.name}: {_point_label(r.point)}")
            if not interactive or r.status != "done":
                progress.console.print(_point_line(r, state["done"], state["total"]), highlight=False,
                                       soft_wrap=True)

        return run_sweep(plan, jobs=jobs, resume=resume, on_start=on_start, on_done=on_done)


def sweep_cmd(
    overrides: SweepOverrides = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Sweep folder (default: <out_dir>/sweeps/<sweep.name>/).")] = None,
    jobs: Annotated[Optional[int], typer.Option(
        "--jobs", "-j", min=1, help="Points run in parallel worker processes (default: sweep.jobs). "
        "With --launcher joblib: its n_jobs; submitit_slurm: the array's array_parallelism.")] = None,
    repeat: Annotated[Optional[int], typer.Option(
        "--repeat", "-r", min=1, help="Run each point N times with seeds seed, seed+1, ... "
        "(default: sweep.repeat).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Run only the points whose JSON is missing or unreadable.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Compose and check every point, list them, run nothing.")] = False,
    launcher: Annotated[Optional[str], typer.Option(
        "--launcher", help="Hand the sweep to a Hydra launcher plugin: joblib, submitit_local, "
        "submitit_slurm (configure it with hydra.launcher.* overrides; see docs/sweeps.md).",
        show_default=False)] = None,
) -> None:
    """Run a sweep: the Cartesian product of the axes, one result JSON per point plus sweep.json.

    Without overrides it runs [bold]conf/sweep/default.yaml[/bold] (2 models x 3 policies x 3 grids). \
Every point is composed and checked before anything runs.

    Exit 0 when every point finished, 1 when a point failed or is missing (a cancelled SLURM task), 2 on \
a config error, 130 when interrupted (finished points are kept; [bold]--resume[/bold] runs the rest).
    """
    ui = _ui()
    with ui.user_errors():
        from cgbench.analysis.sweep import plan_sweep

        if launcher is not None:
            from cgbench.config.launcher_app import check_launcher

            check_launcher(launcher)
        plan = plan_sweep(list(overrides or []), repeat=repeat, out_dir=out_dir, allow_hydra=launcher is not None)
        n_jobs = jobs if jobs is not None else plan.jobs
        if dry_run:
            ui.out.print(_plan_table(plan, resume))
            if launcher:
                from cgbench.config.launcher_app import JOBS_FOLDER, hydra_argv

                argv = hydra_argv(plan, launcher, plan.out_dir / JOBS_FOLDER / "<time>", jobs=n_jobs, resume=resume,
                                  parallel=jobs)
                ui.out.print("hydra command line: " + " ".join(argv[1:]), highlight=False, soft_wrap=True,
                             markup=False)
            return
        where = f"launcher {launcher}" if launcher else f"{n_jobs} process{'es' if n_jobs > 1 else ''}"
        ui.err.print(f"sweep {plan.name}: {len(plan.points)} points, {where} -> {plan.out_dir}", highlight=False,
                     soft_wrap=True)
        if launcher:
            from cgbench.config.launcher_app import launch

            outcome = launch(plan, launcher, jobs=n_jobs, resume=resume, parallel=jobs)
        else:
            outcome = _run_in_process(plan, n_jobs, resume)
    ui.out.print(summary_table(outcome))
    if launcher:  # the launcher's jobs printed nothing here: name each point they left unfinished
        for r in outcome.results:
            if r.status != "done":
                ui.err.print(_point_line(r, r.point.index + 1, len(outcome.results)), highlight=False,
                             soft_wrap=True)
    ui.err.print(f"index: {outcome.index_path}", highlight=False, soft_wrap=True)
    done, total = outcome.count("done"), len(outcome.results)
    if outcome.interrupted:
        ui.err.print(f"[yellow]interrupted:[/yellow] {done} of {total} points finished and kept; "
                     f"`cgbench sweep --resume` with the same arguments runs the other {total - done}",
                     highlight=False, soft_wrap=True)
        raise typer.Exit(130)
    failed, missing = outcome.count("failed"), outcome.count("pending")
    if failed:
        ui.err.print(f"[red]{failed} of {total} points failed[/red] (errors in {outcome.index_path})",
                     highlight=False, soft_wrap=True)
    if missing:  # e.g. SLURM array tasks cancelled with scancel
        ui.err.print(f"[yellow]{missing} of {total} points missing[/yellow]; `cgbench sweep --resume` with the "
                     "same arguments runs them", highlight=False, soft_wrap=True)
    if failed or missing:
        raise typer.Exit(1)


def compare_cmd(
    base: Annotated[Path, typer.Argument(help="Baseline: a result JSON or a sweep folder.", show_default=False)],
    new: Annotated[Path, typer.Argument(help="New: a result JSON or a sweep folder.", show_default=False)],
    rules: Annotated[Optional[Path], typer.Option(
        "--rules", help="Metric rules YAML (default: conf/compare/default.yaml).", show_default=False)] = None,
    markdown: Annotated[Optional[Path], typer.Option(
        "--markdown", help="Also write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY).",
        show_default=False)] = None,
    show_all: Annotated[bool, typer.Option("--all", help="List every checked metric, not only changes.")] = False,
) -> None:
    """Compare two results metric by metric: a CI gate.

    BASE and NEW are result JSONs or sweep folders; sweep points are matched by their overrides. \
Rules (direction, tolerance) come from [bold]--rules[/bold].

    Exit 0: no regression; 1: a regression (a metric moved the wrong way beyond its tolerance, an \
exact sim metric changed, a point failed or is missing); 2: bad input (missing file, unreadable \
JSON, schema mismatch, no common points).
    """
    ui = _ui()
    with ui.user_errors():
        from cgbench.analysis.compare import compare_paths, comparison_table, load_rules, shown, summary_line
        from cgbench.analysis.compare import markdown as to_markdown

        comp = compare_paths(base, new, load_rules(rules))
        if shown(comp, show_all):
            ui.out.print(comparison_table(comp, show_all))
        else:
            ui.out.print(f"compare: {base} -> {new}: no metric changed", highlight=False, soft_wrap=True)
        for note in comp.notes:
            ui.err.print(f"note: {note}", highlight=False, soft_wrap=True)
        colour = "red" if comp.regressions else "green"
        ui.out.print(f"[bold {colour}]{summary_line(comp)}[/bold {colour}]", highlight=False, soft_wrap=True)
        if markdown is not None:
            from cgbench.config.schema import ConfigError

            try:
                markdown.write_text(to_markdown(comp))
            except OSError as e:
                raise ConfigError(f"--markdown: cannot write {markdown}: {e.strerror or e}") from e
    if comp.regressions:
        raise typer.Exit(1)


def plot_cmd(
    target: Annotated[Path, typer.Argument(help="A sweep folder or one result JSON.", show_default=False)],
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Folder for the PNG files (default: <sweep>/plots or <result folder>/plots).",
        show_default=False)] = None,
) -> None:
    """Draw PNG figures of a sweep or of one run, and print their paths.

    A sweep: eager-step fraction and longest wait per policy x grid for each model, and a Pareto \
view. One run: a summary, a per-step timeline (needs [bold]run --trace[/bold]) and a queue-wait \
histogram (needs [bold]run --requests[/bold]).
    """
    ui = _ui()
    with ui.user_errors():
        from cgbench.analysis.plots import plot

        files, notes = plot(target, out_dir)
    for note in notes:
        ui.err.print(f"note: {note}", highlight=False, soft_wrap=True)
    for f in files:
        ui.out.print(str(f), highlight=False, soft_wrap=True, markup=False)
