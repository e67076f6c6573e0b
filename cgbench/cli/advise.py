"""The ``advise`` command (registered on ``cgbench.cli.app.app``): search the captured-graph grid a
workload needs under a budget. The search is ``cgbench.analysis.advise.run``; this module parses,
prints and writes files."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from cgbench.cli import errors as ui  # consoles and user_errors
from cgbench.cli.options import ConfigDirs, MegatronArgs, complete_override, config_dirs_for_children, with_launch_line
from cgbench.errors import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

EAGER_FREE_NOTES = ("eager-free grid:", "no candidate within the budgets and SLOs ran without eager steps")
GROUP_NAME = "advised"  # <out>/cg/advised.yaml: cgbench run --config-dir <out> cg=advised



def _parse_number(text: str | None, option: str, kind: type) -> Any:
    if text is None:
        return None
    try:
        v = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{option}: must be {what}, got {text!r}") from None
    if kind is float and not math.isfinite(v):
        raise ConfigError(f"{option}: must be finite, got {text!r}")
    return v


def _short(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def _objective_text(doc: dict[str, Any], v: Any) -> str:
    from cgbench.results.formatting import compact, percent

    if doc["objective"]["name"] == "eager_fraction":
        return percent(v, 1)
    return compact(v, 1)


def ranked_table(doc: dict[str, Any]) -> Table:
    """One row per candidate, best first (fits 80 columns; reasons a candidate is not eligible are
    listed by ``ineligible_lines``)."""
    from rich import box
    from rich.table import Table

    from cgbench.results.formatting import compact, percent

    obj = doc["objective"]
    unit = f" ({obj['unit']})" if obj["unit"] else ""
    t = Table(title=f"{len(doc['candidates'])} candidates, best first by {obj['name']}{unit} "
                    f"({'higher' if obj['direction'] == 'max' else 'lower'} is better); * on the Pareto front "
                    "(objective vs graphs), x not eligible; defer: deferral events, wait: longest wait (iterations), "
                    "pad: padded share of graphed tokens; GB, cap: estimated graph memory and capture seconds",
              box=box.SIMPLE_HEAVY, title_justify="left", show_edge=False, padding=(0, 1, 0, 0))
    t.add_column("candidate", no_wrap=True)
    header = {"throughput": "tok/s", "ttft_p99": "TTFT\np99 ms", "tpot_p99": "TPOT\np99 ms",
              "eager_fraction": "eager\n(obj.)"}[obj["name"]]
    for col in ("graphs", header, "eager", "defer", "wait", "pad", "GB", "cap"):
        t.add_column(col, justify="right", no_wrap=True)
    front = set(doc["pareto"])
    for c in doc["candidates"]:
        m = c["metrics"]
        mark = "x" if c["violations"] else ("*" if c["name"] in front else " ")
        t.add_row(f"{mark}{c['name']}", str(c["num_graphs"]), _objective_text(doc, c["objective"]),
                  percent(m.get("eager_step_fraction"), 1), compact(m.get("deferral_events")),
                  compact(m.get("max_cg_wait_iters")), percent(m.get("padded_token_fraction"), 1),
                  f"{c['estimate']['memory_gb']:.2f}", _short(c["estimate"]["capture_s"]),
                  style="dim" if c["violations"] else ("bold" if c["rank"] == 1 else ""))
    return t


def ineligible_lines(doc: dict[str, Any]) -> list[str]:
    return [f"x {c['name']}: {'; '.join(c['violations'])}" for c in doc["candidates"] if c["violations"]]


def robustness_table(doc: dict[str, Any]) -> Table | None:
    from rich import box
    from rich.table import Table

    from cgbench.results.formatting import percent

    if not doc["robustness"]:
        return None
    name = doc["objective"]["name"]
    t = Table(title="robustness: the recommendation and the default re-run elsewhere; advantage = how much "
                    "better the recommendation is than the default (on the search -> there)",
              box=box.SIMPLE_HEAVY, title_justify="left", show_edge=False, padding=(0, 1, 0, 0))
    for col in ("check", f"recommended\n{name}", f"default\n{name}", "advantage", "recommended\neager"):
        t.add_column(col, justify="left" if col == "check" else "right", overflow="fold")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:+.2f}%"

    for c in doc["robustness"]:
        t.add_row(c["check"], _objective_text(doc, c["recommended"]["objective"]),
                  _objective_text(doc, c["default"]["objective"]),
                  f"{pct(c['advantage_on_search'])} -> {pct(c['advantage_over_default'])}",
                  percent(c["recommended"]["metrics"].get("eager_step_fraction"), 1))
    return t


def summary_lines(doc: dict[str, Any], files: dict[str, Path]) -> list[str]:
    from cgbench.results.formatting import percent

    rec = doc["recommended"]
    lines = []
    if rec is None:
        return ["no recommendation: " + "; ".join(doc["notes"])]
    imp = doc["improvement"]
    o = imp["objective"]
    frac = o["better_by_fraction"]
    change = "" if frac is None else f" ({'+' if frac >= 0 else ''}{100 * frac:.2f}% better)" if frac else " (equal)"
    lines.append(f"recommended: {rec['name']} ({rec['space']}), {rec['num_graphs']} graphs "
                 f"(default {imp['num_graphs']['default']}); {doc['objective']['name']} "
                 f"{_objective_text(doc, o['recommended'])} vs default {_objective_text(doc, o['default'])}"
                 f"{change}; eager steps {percent(imp['eager_step_fraction']['recommended'], 1)} vs "
                 f"{percent(imp['eager_step_fraction']['default'], 1)}")
    gates = [f"{who} {'yes' if g['active'] else 'no'} — {g['reason']}" for who, g in
             (("recommended", rec.get("gating")), ("default", doc["default"].get("gating"))) if g]
    if gates:
        lines.append("gating active: " + "; ".join(gates))
    lines += baseline_lines(doc)
    trade_off = next((n for n in doc["notes"] if n.startswith(EAGER_FREE_NOTES)), None)
    if trade_off is not None:
        lines.append(trade_off)
    if rec["megatron_command"]:
        src = rec["megatron_args_from"]
        own = src == rec["name"]
        lines.append(f"Megatron arguments{'' if own else f' (best Megatron setting, {src})'}: "
                     f"{rec['megatron_command']}")
        if rec.get("megatron_line"):
            from cgbench.config.megatron_lines import change_text

            lines.append("  " + change_text(rec["megatron_line"]))
    if "cg_file" in files:
        out = files["cg_file"].parent.parent.resolve()
        lines.append(f"explicit list ({rec['num_graphs']} graphs): {files['cg_file']}  ->  cgbench run "
                     f"--config-dir {out} cg={GROUP_NAME} ...")
        lines.append(f"  or: cgbench run cg=explicit cg.all_prefills={str(rec['all_prefills']).lower()} "
                     f"\"cg.graphs=$(cat {files['graphs_file']})\" ...")
    return lines


def baseline_lines(doc: dict[str, Any]) -> list[str]:
    """The recommendation against each line users run (``baselines``), then the ones not compared."""
    name = doc["objective"]["name"]
    lines = []
    for b in doc.get("baselines") or []:
        frac = b["recommended_better_by_fraction"]
        change = "" if frac is None else f", the recommendation {'+' if frac >= 0 else ''}{100 * frac:.2f}%"
        lines.append(f"versus {b['name']}: {name} {_objective_text(doc, b['objective'])}{change}  [{b['label']}: "
                     f"{' '.join(b['overrides']) or '(defaults)'}]")
    return lines + [f"not compared: {n}" for n in doc.get("baseline_notes") or []]


def write_outputs(doc: dict[str, Any], out_dir: Path, plot: bool) -> dict[str, Path]:
    """advise.json, the recommended grid as a cg-group YAML and as a JSON list, and the Pareto plot."""
    from cgbench.results.document import write_json_atomic

    files = {"report": write_json_atomic(out_dir / "advise.json", doc)}
    rec = doc["recommended"]
    if rec is not None:
        files["cg_file"] = _write_text(out_dir / "cg" / f"{GROUP_NAME}.yaml", cg_yaml(doc))
        files["graphs_file"] = _write_text(out_dir / "recommended_graphs.json", json.dumps(rec["graphs"]) + "\n")
    if plot:
        files["plot"] = pareto_plot(doc, out_dir / "pareto.png")
    return files


def cg_yaml(doc: dict[str, Any]) -> str:
    rec = doc["recommended"]
    head = [f"# cgbench advise: {rec['name']} ({rec['space']}), {rec['num_graphs']} graphs, "
            f"objective {doc['objective']['name']} = {rec['metrics'] and _objective_value(doc, rec)}",
            f"# searched for: {' '.join(doc['overrides']) or '(defaults)'}",
            "kind: explicit", f"all_prefills: {str(rec['all_prefills']).lower()}", "non_decode: true", "graphs:"]
    return "\n".join(head + [f"  - [{T}, {P}, {D}]" for T, P, D in rec["graphs"]]) + "\n"


def _objective_value(doc: dict[str, Any], rec: dict[str, Any]) -> Any:
    from cgbench.results.names import number_at

    return number_at(rec["metrics"], doc["objective"]["metric"])


def _write_text(path: Path, text: str) -> Path:
    from cgbench.safeio import write_text_atomic

    return write_text_atomic(path, text)


def output_files(out_dir: Path, plot: bool) -> list[Path]:
    """The files ``write_outputs`` may write (checked before the search)."""
    files = [out_dir / "advise.json", out_dir / "cg" / f"{GROUP_NAME}.yaml", out_dir / "recommended_graphs.json"]
    return files + ([out_dir / "pareto.png"] if plot else [])


def _pyplot():
    from cgbench.analysis.plots.plot import load_pyplot

    return load_pyplot("cgbench advise --plot")


def pareto_plot(doc: dict[str, Any], path: Path) -> Path:
    """Objective against graph count (``cgbench.analysis.plots.advise``), saved to ``path``."""
    from cgbench.analysis.plots.advise import advise_pareto_figure

    plt = _pyplot()
    fig = advise_pareto_figure(plt, doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _check_outputs(req: Any, plot: bool, megatron_args: str | None = None) -> None:
    """Before the search: the config's input files (and a ``--megatron-args @FILE``) are this
    command's inputs, and every output (the report, the grid files, the plot) can be written and
    replaces none of them."""
    from cgbench.cli.guards import declare_config_inputs
    from cgbench.config.compose import load_config
    from cgbench.results.document import ensure_writable

    declare_config_inputs(load_config(list(req.overrides)), megatron_args)
    if req.out_dir.exists() and not req.out_dir.is_dir():
        raise ConfigError(f"--out {req.out_dir}: exists and is not a folder")
    for path in output_files(req.out_dir, plot):
        ensure_writable(path)


def _default_out(overrides: list[str]) -> Path:
    from cgbench.config.compose import load_config

    cfg = load_config(overrides)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path(cfg.out_dir) / "advise" / f"{stamp}_{cfg.model.name}_{cfg.policy.name}"


def advise_cmd(
    overrides: Annotated[Optional[list[str]], typer.Argument(
        help="Hydra overrides of the workload to advise for (model, engine, policy, workload, seed...). A cg "
        "choice here is the default grid the search compares with.", show_default=False,
        autocompletion=complete_override)] = None,
    budget_graphs: Annotated[Optional[str], typer.Option(
        "--budget-graphs", "-g", metavar="N", help="Most graphs a candidate may capture (required).",
        show_default=False)] = None,
    budget_memory: Annotated[Optional[str], typer.Option(
        "--budget-memory", metavar="GB", help="Most estimated graph-pool memory, GB (the cost model's "
        "capture estimate, as a run records it).", show_default=False)] = None,
    budget_capture: Annotated[Optional[str], typer.Option(
        "--budget-capture-s", metavar="S", help="Most estimated capture time, seconds.", show_default=False)] = None,
    objective: Annotated[str, typer.Option(
        "--objective", metavar="NAME", help="throughput (output tok/s, max), ttft_p99 or tpot_p99 (ms, min), "
        "eager_fraction (min). The best grid without eager steps is always reported too.")] = "throughput",
    slo: Annotated[Optional[list[str]], typer.Option(
        "--slo", metavar="NAME=VALUE", help="A constraint a candidate must meet (repeatable): ttft_p99, "
        "tpot_p99 (ms), eager_fraction, max_wait (iterations) at most VALUE; throughput at least VALUE.",
        show_default=False)] = None,
    candidates: Annotated[str, typer.Option(
        "--candidates", "-n", metavar="N", help="Candidates to simulate (both spaces and refinement; the default grid, "
        "profile and robustness runs come on top).")] = "24",
    jobs: Annotated[str, typer.Option("--jobs", "-j", metavar="N", help="Worker processes (same results as 1); with "
                                      "--executor slurm, array tasks at once.")] = "1",
    executor: Annotated[str, typer.Option(
        "--executor", help="Where the candidates run: local (this machine, --jobs processes) or slurm (SLURM job "
        "arrays through submitit, their files under <out>/slurm/ on a file system the nodes share; as cgbench "
        "sweep --executor slurm).")] = "local",
    slurm: Annotated[Optional[list[str]], typer.Option(
        "--slurm", help="A submitit / sbatch setting for --executor slurm, KEY=VALUE (repeatable), as on cgbench "
        "sweep: partition=cpu, timeout_min=10, points_per_task=4.", show_default=False)] = None,
    check_seed: Annotated[Optional[str], typer.Option(
        "--check-seed", metavar="SEED", help="Seed of the robustness re-check (default: seed + 1).",
        show_default=False)] = None,
    check_workload: Annotated[Optional[list[str]], typer.Option(
        "--check-workload", metavar="OVERRIDE", help="Overrides of a second workload to re-check on (repeatable, e.g. "
        "--check-workload workload=burst).", show_default=False)] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", metavar="DIR", help="Folder for the report, the grid files and every candidate's result "
        "(default: <out_dir>/advise/<time>_<model>_<policy>/).", show_default=False)] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Reuse the candidate results already in --out (an interrupted search "
        "continues).")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="table|json", help="table or json.")] = "table",
    plot: Annotated[bool, typer.Option("--plot", help="Also draw the Pareto front (objective vs graphs) "
                                       "to <out>/pareto.png (needs matplotlib).")] = False,
    config_dirs: ConfigDirs = None,
    with_sensitivity: Annotated[bool, typer.Option(
        "--sensitivity", help="Re-price the recommendation against the default grid and the baselines (the "
        "config with gating off, your --megatron-args line, Megatron's default line) over the cost model's "
        "uncertain parameters (as cgbench run --sensitivity): does the recommendation still win, and the "
        "break-even host cost. The report gets the block.")] = False,
    megatron_args: MegatronArgs = None,
) -> None:
    """Search the captured-graph grid a workload needs under a graph (and memory / capture) budget.

    Two spaces: Megatron's own knobs (a pasteable Megatron command line) and explicit graph lists \
built from the shapes the workload produces (a file usable with [bold]cgbench run --config-dir OUT \
cg=advised[/bold]). Every candidate is simulated on the workload; the report ranks them, draws the \
Pareto front, compares with the default grid, names the best grid without eager steps next to the \
recommendation and re-checks the recommendation on another seed. See cgbench docs advise.

    Exit 0 with a recommendation, 1 when no candidate meets the budgets and SLOs, 2 on bad input, \
130 when interrupted ([bold]--resume[/bold] with the same arguments continues).
    """
    with ui.user_errors(), config_dirs_for_children(list(config_dirs or [])):
        from cgbench.analysis.advise.request import AdviseRequest
        from cgbench.analysis.advise.run import run_advise
        from cgbench.cli.formats import TABLE_OR_JSON, check_format
        from cgbench.config.megatron_args import read_launch_text

        if budget_graphs is None:
            raise ConfigError("--budget-graphs: required (the most graphs a candidate may capture)")
        check_format(fmt, TABLE_OR_JSON)
        if plot:
            _pyplot()
        ovr = with_launch_line(megatron_args, list(overrides or []), config_dirs)
        req = AdviseRequest(
            overrides=ovr, budget_graphs=_parse_number(budget_graphs, "--budget-graphs", int),
            budget_memory_gb=_parse_number(budget_memory, "--budget-memory", float),
            budget_capture_s=_parse_number(budget_capture, "--budget-capture-s", float), objective=objective,
            slos=list(slo or []), candidates=_parse_number(candidates, "--candidates", int),
            jobs=_parse_number(jobs, "--jobs", int), check_seed=_parse_number(check_seed, "--check-seed", int),
            check_workload=list(check_workload or []), out_dir=out_dir, resume=resume, executor=executor,
            launch_line=None if megatron_args is None else read_launch_text(megatron_args))
        if slurm:
            from cgbench.analysis.sweep.executor_slurm import parse_settings

            req.slurm = parse_settings(list(slurm))
        from cgbench.analysis.advise.request import check_request

        check_request(req)
        if executor == "slurm":
            from cgbench.analysis.sweep.executor_slurm import available

            available()
        if with_sensitivity:
            from cgbench.analysis.sensitivity import check_sensitivity
            from cgbench.config.compose import load_config

            check_sensitivity(load_config(ovr, config_dirs=list(config_dirs or [])))
        if req.out_dir is None:
            req.out_dir = _default_out(ovr)
        _check_outputs(req, plot, megatron_args)
        try:
            doc = _run_with_progress(req, run_advise)
        except KeyboardInterrupt:
            ui.err.print(f"interrupted: finished candidates are kept in {req.out_dir}; `cgbench advise --out "
                         f"{req.out_dir} --resume` with the same arguments continues", highlight=False,
                         soft_wrap=True)
            raise typer.Exit(130) from None
        if with_sensitivity and doc["recommended"] is not None:
            doc["sensitivity"] = _recommendation_sensitivity(doc, ovr, list(config_dirs or []))
        files = write_outputs(doc, req.out_dir, plot)
    if fmt == "json":
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        ui.out.print(ranked_table(doc))
        for line in ineligible_lines(doc):
            ui.out.print(line, highlight=False, soft_wrap=True, markup=False)
        rob = robustness_table(doc)
        for line in summary_lines(doc, files):
            ui.out.print(line, highlight=False, soft_wrap=True, markup=False)
        if rob is not None:
            ui.out.print(rob)
        if "sensitivity" in doc:
            from cgbench.cli.render_sensitivity import sensitivity_baselines, sensitivity_ranges, sensitivity_table

            ui.out.print(sensitivity_table(doc["sensitivity"], "the recommendation"))
            for line in sensitivity_baselines(doc["sensitivity"]) + sensitivity_ranges(doc["sensitivity"]):
                ui.out.print(line, highlight=False, soft_wrap=True, markup=False)
        for note in doc["notes"]:
            if note.startswith(EAGER_FREE_NOTES):
                continue  # printed with the recommendation
            ui.out.print(f"note: {note}", highlight=False, soft_wrap=True, markup=False)
    for key in ("report", "plot"):
        if key in files:
            ui.err.print(f"{key}: {files[key]}", highlight=False, soft_wrap=True)
    if doc["recommended"] is None:
        raise typer.Exit(1)


def _recommendation_sensitivity(doc: dict[str, Any], base: list[str], config_dirs: list[str]) -> dict[str, Any]:
    """The recommendation re-priced against the default grid (the user's own overrides) and the
    baselines the search simulated (the lines users run)."""
    from cgbench.analysis.baselines import default_grid, from_json
    from cgbench.analysis.sensitivity import sensitivity
    from cgbench.cli.progress import ProgressReport
    from cgbench.config.compose import load_config

    rec = doc["recommended"]
    cfg = load_config(list(rec["overrides"]), config_dirs=config_dirs)
    versus = [default_grid(base, load_config(base, config_dirs=config_dirs), doc["default"]["name"])]
    versus += [from_json(b, config_dirs) for b in doc.get("baselines") or []]
    with ProgressReport("advise --sensitivity", console=ui.err) as report:
        report.stage("pricing", None)
        return sensitivity(cfg, rec["metrics"], versus=versus, progress=report.update)


def _run_with_progress(req, run_advise) -> dict[str, Any]:
    """The search, its stage, done / total and time left on stderr (a bar on a terminal, a line every
    few seconds in a log: ``cli/progress.py``)."""
    from cgbench.cli.progress import ProgressReport

    with ProgressReport("advise", console=ui.err) as report:
        def on_progress(text: str, total: int | None) -> None:
            if total is not None:
                report.stage(text, total)
            else:
                report.advance()

        return run_advise(req, progress=on_progress, note=report.note)
