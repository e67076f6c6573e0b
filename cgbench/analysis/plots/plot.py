"""Figures (PNG) of a sweep or of one run. matplotlib is imported only here, lazily, with Agg.

A sweep: grouped bars of each ``--y`` metric (default: eager-step fraction and longest gating wait),
faceted by ``--row`` / ``--col`` with one bar per ``--hue`` value; a Pareto view per facet; and, when
the arrival rate is swept, load curves (latency percentiles and throughput against the rate, one
curve per policy, the SLO and each curve's maximum sustainable rate marked). Keys not named are
placed automatically: hue = policy, x = grid (or rate), row = model, the rest as column facets.

One run: see ``cgbench.analysis.plots.run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cgbench.analysis.plots.data import (
    RATE_KEY,
    PlotSpec,
    Record,
    apply_filters,
    average_repeats,
    choose_roles,
    load_records,
    metric_label,
    varying,
)
from cgbench.analysis.plots.layout import DPI
from cgbench.analysis.plots.pareto import pareto_front  # noqa: F401  (re-exported: the frontier's one definition)
from cgbench.config.schema import ConfigError
from cgbench.safeio import describe_missing, make_folder

BAR_METRICS = ("eager_step_fraction", "max_cg_wait_iters")
PARETO_METRICS = ("ttft_ms.p99", "output_throughput_tok_s")


def load_pyplot(what: str = "cgbench plot"):
    """matplotlib's pyplot on the file-only Agg backend; ConfigError with the install command
    (``cgbench.results.extras``) when matplotlib is missing. Every figure cgbench draws starts here."""
    try:
        import matplotlib
    except ImportError as e:
        from cgbench.results.extras import needs

        raise ConfigError(needs(what, "matplotlib")) from e
    matplotlib.use("Agg")
    # text is drawn as written: a file, model or policy name holding `$...$` would otherwise reach the
    # math parser (a ParseException while saving); no label of cgbench's own uses math text
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def plot(target: Path, out_dir: Path | None = None, spec: PlotSpec | None = None) -> tuple[list[Path], list[str]]:
    """Plot a sweep directory or one result JSON; (written PNG paths, notes about skipped figures)."""
    target = Path(target)
    spec = spec or PlotSpec()
    if target.is_dir():
        return plot_sweep(target, out_dir or target / "plots", spec)
    if target.is_file():
        if spec != PlotSpec():
            raise ConfigError("--x/--y/--hue/--row/--col/--filter/--slo apply to a sweep folder, not to one run")
        return plot_run(target, out_dir or target.parent / "plots")
    raise ConfigError(f"{target}: {describe_missing(target)}")


def _png(plt, fig) -> bytes:
    import io

    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def _save_set(out_dir: Path, pngs: dict[str, bytes]) -> list[Path]:
    """Every figure drawn before the first is written (a drawing that fails leaves no PNG and no
    folder), then the set written at once (``safeio.write_files_atomic``)."""
    from cgbench.safeio import write_files_atomic

    make_folder(out_dir, "--out")
    return write_files_atomic({out_dir / name: data for name, data in pngs.items()}, "figure")


def _slo_from_config(config: dict[str, Any]) -> dict[str, float]:
    """The run's own SLO bounds (slo.ttft_ms, ...) as lines on the matching p99 panels."""
    out = {}
    for key, name in (("ttft_ms", "ttft_ms.p99"), ("tpot_ms", "tpot_ms.p99"), ("e2e_ms", "e2e_ms.p99")):
        value = (config.get("slo") or {}).get(key)
        if isinstance(value, (int, float)) and value > 0:
            out[name] = float(value)
    return out


def sweep_figures(sweep_dir: Path, spec: PlotSpec) -> tuple[list[tuple[str, Any]], list[str]]:
    """(file name, matplotlib Figure) for every figure of a sweep, and notes about skipped ones."""
    from cgbench.analysis.plots.bars import bars_figure
    from cgbench.analysis.plots.load import DEFAULT_Y, load_figure
    from cgbench.analysis.plots.pareto import pareto_figure

    plt = load_pyplot()
    records, keys, config = load_records(sweep_dir)
    records = apply_filters(records, spec.filters)
    vary = varying(records, keys)
    for name in spec.y:
        metric_label(name)  # an unknown metric is one clear error
    title = f"sweep {sweep_dir.name}" + "".join(f", {k}={v}" for k, v in spec.filters.items())
    figures: list[tuple[str, Any]] = []
    notes: list[str] = []

    roles = choose_roles(spec, vary, prefer_x=("cg", RATE_KEY))
    keep = [k for k in vary if k in (*roles.x, roles.hue, *roles.row, *roles.col)]
    recs = average_repeats(records, keep)
    if any(r.repeats > 1 for r in recs):
        notes.append(f"repeats averaged over {', '.join(k for k in vary if k not in keep)}")
    for y in spec.y or list(BAR_METRICS):
        if not any(y in r.metrics for r in recs):
            notes.append(f"bars: no point has {y}")
            continue
        figures.append((f"bars_{y}.png", bars_figure(plt, recs, roles, y, f"{title}: {metric_label(y)}")))

    if RATE_KEY in vary or (spec.x is not None and spec.x == RATE_KEY):
        load_spec = PlotSpec(RATE_KEY, spec.y, spec.hue, spec.row, spec.col, spec.filters, spec.slo)
        lroles = choose_roles(load_spec, vary, prefer_x=(RATE_KEY,))
        lroles.row, lroles.col = lroles.row + lroles.col, []  # one row per facet, one column per metric
        if lroles.hue is None and "cg" in lroles.row:
            lroles.hue = "cg"
            lroles.row.remove("cg")
        ys = [y for y in (spec.y or list(DEFAULT_Y)) if any(y in r.metrics for r in records)]
        lkeep = [k for k in vary if k in (*lroles.x, lroles.hue, *lroles.row)]
        slo = {**_slo_from_config(config), **spec.slo}
        if ys:
            figures.append(("load.png", load_figure(plt, average_repeats(records, lkeep), lroles, ys, slo,
                                                    f"{title}: load")))
        else:
            notes.append("load: no latency or throughput metrics (a backend without a clock)")
    else:
        notes.append(f"load: {RATE_KEY} is not swept (sweep=rate sweeps it)")

    facet_keys = [k for k in vary if k not in ("policy", "cg")]
    pkeep = [k for k in vary if k in ("policy", "cg", *facet_keys)]
    precs = average_repeats(records, pkeep)
    for y in PARETO_METRICS:
        if any(y in r.metrics and "eager_step_fraction" in r.metrics for r in precs):
            figures.append((f"pareto_{y}.png", pareto_figure(
                plt, precs, facet_keys, "policy" if "policy" in vary else None, "cg" if "cg" in vary else None, y,
                f"{title}: {metric_label(y)} against eager steps")))
        else:
            notes.append(f"pareto: no point has {y}")
    return figures, notes


def plot_sweep(sweep_dir: Path, out_dir: Path, spec: PlotSpec | None = None) -> tuple[list[Path], list[str]]:
    figures, notes = sweep_figures(sweep_dir, spec or PlotSpec())
    plt = load_pyplot()
    return _save_set(out_dir, {name: _png(plt, fig) for name, fig in figures}), notes


def sweep_rows(sweep_dir: Path) -> list[Record]:
    """Every finished point, repeats (seeds) averaged over the keys that do not vary otherwise."""
    records, keys, _ = load_records(sweep_dir)
    vary = varying(records, keys)
    return average_repeats(records, [k for k in vary if k != "seed"] or keys[:1])


# ---------------------------------------------------------------------------------------------- one run


def plot_run(result: Path, out_dir: Path) -> tuple[list[Path], list[str]]:
    from cgbench.analysis.plots.run import queue_wait_figure, summary_figure, timeline_figure
    from cgbench.results.document import load_result

    doc = load_result(result)
    plt = load_pyplot()
    stem = result.stem
    pngs = {f"{stem}_summary.png": _png(plt, summary_figure(plt, doc))}
    notes = []
    if doc.get("steps"):
        pngs[f"{stem}_timeline.png"] = _png(plt, timeline_figure(plt, doc["steps"], stem))
    else:
        notes.append("timeline: skipped, the result has no per-step records (run with --trace)")
    if doc.get("requests"):
        pngs[f"{stem}_queue_wait.png"] = _png(plt, queue_wait_figure(plt, doc["requests"], stem))
    else:
        notes.append("queue-wait histogram: skipped, the result has no per-request records (run with --requests)")
    return _save_set(out_dir, pngs), notes
