"""What ``cgbench report`` shows: the content of one report of a run, a sweep folder or an advise report,
as plain records (sections of tables, figures and notes); ``cgbench.cli.report_html`` writes it as one
self-contained HTML file.

A run: its headline metrics, health flags, graph usage, and its figures (the summary, the step
timeline with ``--trace``, the queue-wait histogram with ``--requests``). A sweep: every point's
headline metrics, the health flags of every point, each point's graph usage, and the sweep's figures
(bars and Pareto views comparing the points, load curves when the arrival rate is swept). An advise
report: the recommendation and its improvement over the default, the robustness checks, every
candidate, and the objective against graph count. Figures need matplotlib (the ``plot`` extra):
without it every table is still there and ``Report.missing_figures`` names the figures left out.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgbench.config.schema import ConfigError
from cgbench.results.formatting import goodput_text, metric_value, number, percent
from cgbench.results.names import label, lookup

RUN, SWEEP, ADVISE = "run", "sweep", "advise"
ESTIMATES = {"memory_gb": "estimated graph memory (GB)", "capture_s": "estimated capture time (s)"}
# the run's headline rows (dotted metric names), in the order the table shows them
RUN_HEADLINE = ("outcome", "steps", "graphed_steps", "eager_steps", "eager_step_fraction", "eager_token_fraction",
                "padded_token_fraction", "deferral_events", "deferred_requests", "max_cg_wait_iters",
                "max_queue_wait_iters", "snap_splits", "starvation_warnings", "eager_admissions",
                "requests.completed", "requests.failed", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "tpot_ms.p99",
                "e2e_ms.p99", "output_throughput_tok_s", "total_throughput_tok_s", "goodput_req_s", "makespan_s",
                "eager_time_fraction", "num_graphs")


@dataclass(frozen=True)
class Cell:
    """One table cell: the text shown and, for a number, the value it sorts by."""

    text: str
    sort: float | None = None


@dataclass(frozen=True)
class Table:
    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    sortable: bool = True  # False: a key / value list, read top to bottom


@dataclass(frozen=True)
class Figure:
    caption: str
    png: bytes | None  # None: not drawn (matplotlib missing)


@dataclass
class Section:
    heading: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    kind: str  # run, sweep or advise
    title: str
    facts: list[tuple[str, str]]  # what it is: source, version, configuration
    sections: list[Section]
    missing_figures: list[str] = field(default_factory=list)
    figure_hint: str = ""  # why they are missing and how to install what draws them


# ---------------------------------------------------------------------------------------------- cells


def cell(value: Any, name: str = "") -> Cell:
    """A cell for any JSON value; ``name``: the metric it is (fractions show as percentages)."""
    if isinstance(value, bool):
        return Cell("yes" if value else "no")
    if isinstance(value, (int, float)):
        return Cell(metric_value(name, value, 3 if isinstance(value, float) and abs(value) < 10 else 2)
                    if name else number(value, 3), float(value))
    if value is None:
        return Cell("-")
    if isinstance(value, (list, dict)):
        import json

        return Cell(json.dumps(value))
    return Cell(str(value))


def text_cells(*values: Any) -> tuple[Cell, ...]:
    return tuple(cell(v) for v in values)


# ---------------------------------------------------------------------------------------------- figures


class Figures:
    """Draws figures when matplotlib is installed; otherwise records the names of those left out."""

    def __init__(self) -> None:
        try:
            from cgbench.analysis.plots.plot import load_pyplot

            self.plt = load_pyplot("cgbench report")
            self.hint = ""
        except ConfigError as e:
            self.plt = None
            self.hint = str(e)
        self.missing: list[str] = []

    def draw(self, caption: str, make: Callable[[Any], Any]) -> Figure | None:
        """``make(plt)`` -> a matplotlib Figure, as PNG bytes; None when it cannot be drawn."""
        if self.plt is None:
            self.missing.append(caption)
            return None
        from cgbench.analysis.plots.layout import DPI

        fig = make(self.plt)
        return self.png(caption, fig, DPI)

    def png(self, caption: str, fig: Any, dpi: int) -> Figure:
        buf = io.BytesIO()
        fig.savefig(buf, dpi=dpi, format="png")
        assert self.plt is not None
        self.plt.close(fig)
        return Figure(caption, buf.getvalue())


def _add(section: Section, figure: Figure | None) -> None:
    if figure is not None:
        section.figures.append(figure)


# ---------------------------------------------------------------------------------------------- a run


def health_rows(warnings: Sequence[dict[str, Any]], lead: tuple[Cell, ...] = ()) -> list[tuple[Cell, ...]]:
    return [(*lead, Cell(str(w.get("code", ""))), Cell(str(w.get("message", "")))) for w in warnings]


def graph_usage_table(doc: dict[str, Any], caption: str) -> Table:
    used = sorted((g for g in doc.get("graph_usage") or [] if g.get("hits")), key=lambda g: -g["hits"])
    rows = []
    for g in used:
        total = g["real_tokens"] + g["padded_tokens"]
        rows.append((Cell(str(g["graph"])), cell(g["hits"]), cell(g["real_tokens"]), cell(g["padded_tokens"]),
                     Cell(percent(g["padded_tokens"] / total) if total else "-",
                          g["padded_tokens"] / total if total else None)))
    for reason, n in (doc["metrics"].get("eager_steps_by_reason") or {}).items():
        rows.append((Cell(f"eager: {reason}"), cell(n), Cell(""), Cell(""), Cell("")))
    return Table(caption, ("graph [T, P, D]", "hits", "real tokens", "padded tokens", "padding"), tuple(rows))


def run_report(doc: dict[str, Any], source: str) -> Report:
    from cgbench.analysis.plots.run import queue_wait_figure, summary_figure, timeline_figure

    m = doc["metrics"]
    figures = Figures()
    rows = [(Cell(label(name)), _headline_cell(m, name)) for name in RUN_HEADLINE
            if lookup(m, name) is not None or (name == "goodput_req_s" and "goodput_slo" in m)]
    if "gating_active" in m:  # with its reason, as the run table shows it
        why = (doc.get("gating") or {}).get("reason")
        rows.insert(1, (Cell(label("gating_active")), Cell(("yes" if m["gating_active"] else "no")
                                                           + (f" — {why}" if why else ""))))
    headline = Section("Headline", [Table("every headline metric of the run", ("metric", "value"), tuple(rows),
                                          sortable=False)])
    health = Section("Health flags")
    warnings = doc.get("warnings") or []
    if warnings:
        health.tables.append(Table(f"{len(warnings)} flag(s)", ("flag", "message"), tuple(health_rows(warnings))))
    else:
        health.notes.append("no health flags: the run is healthy")
    n_hit = sum(1 for g in doc.get("graph_usage") or [] if g.get("hits"))
    usage = Section("Graph usage", [graph_usage_table(
        doc, f"{n_hit} of {len(doc.get('graph_usage') or [])} captured graphs replayed, eager steps by reason last")])
    stem = Path(source).stem
    _add(usage, figures.draw("steps by kind, eager steps by reason, graph hits", lambda plt: summary_figure(plt, doc)))
    timeline = Section("Timelines")
    if doc.get("steps"):
        _add(timeline, figures.draw("the step timeline: tokens, batch and queue per step",
                                    lambda plt: timeline_figure(plt, doc["steps"], stem)))
    else:
        timeline.notes.append("no step timeline: the result has no per-step records (run with --trace)")
    if doc.get("requests"):
        _add(timeline, figures.draw("queue wait per request", lambda plt: queue_wait_figure(plt, doc["requests"],
                                                                                            stem)))
    else:
        timeline.notes.append("no queue-wait histogram: the result has no per-request records (run with --requests)")
    facts = [("result", source), ("overrides", " ".join(doc.get("overrides") or []) or "(defaults)"),
             *_provenance(doc)]
    env = doc.get("environment") or {}
    if env:
        facts.append(("environment", ", ".join(f"{k}={v}" for k, v in env.items() if not isinstance(v, dict))))
    title = "cgbench run: " + str((doc.get("labels") or {}).get("name") or stem)
    return Report(RUN, title, facts, [headline, health, usage, timeline], figures.missing, figures.hint)


def _headline_cell(m: dict[str, Any], name: str) -> Cell:
    if name == "goodput_req_s":  # without an SLO there is no goodput: say so, never a number
        rate = lookup(m, name)
        return cell(rate, name) if rate is not None else Cell(goodput_text(m))
    return cell(lookup(m, name), name)


def _provenance(doc: dict[str, Any]) -> list[tuple[str, str]]:
    sha = doc.get("git_sha")
    version = str(doc.get("cgbench_version", "?"))
    if sha:
        version += f" (git {str(sha)[:12]}" + (", dirty)" if doc.get("git_dirty") else ")")
    return [("cgbench", version), ("created", str(doc.get("created_at", "?")))]


# ---------------------------------------------------------------------------------------------- a sweep


def sweep_report(sweep_dir: Path) -> Report:
    from cgbench.analysis.plots.data import PlotSpec
    from cgbench.analysis.plots.plot import sweep_figures
    from cgbench.analysis.sweep.folder import DONE, HEADLINE, load_index
    from cgbench.results.document import load_result

    index = load_index(sweep_dir)
    points = index["points"]
    keys: list[str] = []
    for p in points:
        keys.extend(k for k in p.get("params") or {} if k not in keys)
    lead_cols = ("point", *keys)

    def lead(i: int, p: dict[str, Any]) -> tuple[Cell, ...]:
        params = p.get("params") or {}
        return (Cell(str(i), float(i)), *(Cell(str(params.get(k, ""))) for k in keys))

    shown = [n for n in HEADLINE if any(n in (p.get("metrics") or {}) for p in points)]
    headline = Section("Headline", [Table(f"{len(points)} points, one row each (click a column to sort)",
                                          (*lead_cols, "status", *(label(n) for n in shown)), tuple(
        (*lead(i, p), Cell(str(p.get("status"))), *(cell((p.get("metrics") or {}).get(n), n) for n in shown))
        for i, p in enumerate(points, 1)))])
    headline.notes += [f"warning: {w}" for w in index.get("warnings") or []]  # gating off, identical points
    failed = [(i, p) for i, p in enumerate(points, 1) if p.get("status") != DONE]
    if failed:
        headline.tables.append(Table("points not done", (*lead_cols, "status", "error"), tuple(
            (*lead(i, p), Cell(str(p.get("status"))), Cell(str(p.get("error") or ""))) for i, p in failed)))
    flags: list[tuple[Cell, ...]] = []
    usage: list[tuple[Cell, ...]] = []
    for i, p in enumerate(points, 1):
        if p.get("status") != DONE:
            continue
        doc = load_result(Path(sweep_dir) / p["file"])
        flags += health_rows(doc.get("warnings") or [], lead(i, p))
        m = doc["metrics"]
        graphs = doc.get("graph_usage") or []
        hit = [g for g in graphs if g.get("hits")]
        real = sum(g["real_tokens"] for g in hit)
        padded = sum(g["padded_tokens"] for g in hit)
        reasons = m.get("eager_steps_by_reason") or {}
        usage.append((*lead(i, p), cell(len(graphs)), cell(len(hit)), cell(m.get("graphed_steps")),
                      cell(m.get("eager_steps")), Cell(", ".join(f"{k} {v:,}" for k, v in reasons.items()) or "-"),
                      Cell(percent(padded / (real + padded)) if real + padded else "-",
                           padded / (real + padded) if real + padded else None)))
    health = Section("Health flags")
    if flags:
        health.tables.append(Table(f"{len(flags)} flag(s) over {len(points)} points", (*lead_cols, "flag", "message"),
                                   tuple(flags)))
    else:
        health.notes.append("no health flags on any point")
    graph_section = Section("Graph usage", [Table("graphs captured and replayed per point", (
        *lead_cols, "graphs", "graphs hit", "graphed steps", "eager steps", "eager steps by reason", "padding"),
        tuple(usage))])

    figures = Figures()
    comparisons, load = Section("Comparisons"), Section("Load curves")
    if figures.plt is not None and any(p.get("status") == DONE for p in points):
        try:
            drawn, notes = sweep_figures(Path(sweep_dir), PlotSpec())
        except ConfigError as e:  # what cgbench plot would refuse: the tables still stand
            drawn, notes = [], [f"no figures: {e}"]
        for name, fig in drawn:
            from cgbench.analysis.plots.layout import DPI

            target = load if name == "load.png" else comparisons
            target.figures.append(figures.png(_figure_caption(name), fig, DPI))
        for note in notes:
            (load if note.startswith("load") else comparisons).notes.append(note)
    elif figures.plt is None:
        figures.missing += ["bars of the eager-step fraction and the longest gating wait", "Pareto views",
                            "load curves"]
    if not load.figures and not load.notes:
        load.notes.append("no load curves")
    facts = [("sweep", str(sweep_dir)), ("name", str(index.get("name"))), ("status", str(index.get("status"))),
             ("points", ", ".join(f"{k} {v}" for k, v in (index.get("counts") or {}).items())),
             ("axes", "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in (index.get("axes") or {}).items())),
             *_provenance(index)]
    return Report(SWEEP, f"cgbench sweep: {index.get('name') or Path(sweep_dir).name}", facts,
                  [headline, health, graph_section, comparisons, load], figures.missing, figures.hint)


def _figure_caption(name: str) -> str:
    stem = name.removesuffix(".png")
    kind, _, metric_name = stem.partition("_")
    if kind == "bars":
        return f"{label(metric_name)} of every point"
    if kind == "pareto":
        return f"{label(metric_name)} against the eager-step fraction (the Pareto front joined)"
    if kind == "load":
        return "latency and throughput against the arrival rate"
    return stem


# ---------------------------------------------------------------------------------------------- advise


def advise_report(doc: dict[str, Any], source: str) -> Report:
    from cgbench.analysis.plots.advise import advise_pareto_figure

    obj = doc.get("objective") or {}
    objective = f"{obj.get('name')} ({obj.get('direction')} {obj.get('metric')}" + (
        f", {obj.get('unit')})" if obj.get("unit") else ")")
    rec = doc.get("recommended")
    recommendation = Section("Recommendation")
    if rec is None:
        recommendation.notes.append("no candidate meets the budgets and the SLOs")
    else:
        rows = [("candidate", rec.get("name")), ("space", rec.get("space")), ("graphs", rec.get("num_graphs")),
                ("overrides", " ".join(rec.get("overrides") or [])),
                ("Megatron command", rec.get("megatron_command") or "-")]
        for who, g in (("gating active (recommended)", rec.get("gating")),
                       ("gating active (default)", (doc.get("default") or {}).get("gating"))):
            if g:
                rows.append((who, f"{'yes' if g['active'] else 'no'} — {g['reason']}"))
        if rec.get("megatron_line"):
            from cgbench.config.megatron_lines import change_text

            rows.append(("change to the launch line", change_text(rec["megatron_line"])))
        recommendation.tables.append(Table("the recommended CUDA-graph list", ("", "value"),
                                           tuple((Cell(k), Cell(str(v))) for k, v in rows), sortable=False))
        imp = doc.get("improvement") or {}
        cmp_rows = []
        for key, values in imp.items():
            if isinstance(values, dict) and "default" in values and not isinstance(values["default"], dict):
                cmp_rows.append((Cell(label(key)), cell(values["default"], key), cell(values.get("recommended"), key)))
        est = imp.get("estimate") or {}
        for k in ("memory_gb", "capture_s"):
            if k in (est.get("default") or {}):
                cmp_rows.append((Cell(ESTIMATES[k]), cell(est["default"][k]), cell(est["recommended"][k])))
        recommendation.tables.append(Table(f"default against recommended, objective {objective}",
                                           ("", "default", "recommended"), tuple(cmp_rows), sortable=False))
    base_rows = tuple((Cell(str(b.get("name"))), Cell(str(b.get("label"))), cell(b.get("objective")),
                       cell(b.get("recommended_better_by_fraction"), "goodput_fraction"),
                       Cell(" ".join(b.get("overrides") or []))) for b in doc.get("baselines") or [])
    if base_rows:
        recommendation.tables.append(Table(f"the recommendation against the lines users run, objective {objective}", (
            "baseline", "what it is", "objective", "recommendation better by", "overrides"), base_rows))
    recommendation.notes += [f"not compared: {n}" for n in doc.get("baseline_notes") or []]
    recommendation.notes += [str(n) for n in doc.get("notes") or []]
    robust = Section("Robustness")
    checks = doc.get("robustness") or []
    if checks:
        robust.tables.append(Table("the recommendation under other seeds and loads", (
            "check", "recommended", "default", "advantage over default", "advantage lost"), tuple(
            (Cell(str(c.get("check"))), cell((c.get("recommended") or {}).get("objective")),
             cell((c.get("default") or {}).get("objective")), cell(c.get("advantage_over_default"), "goodput_fraction"),
             cell(c.get("advantage_lost"), "goodput_fraction")) for c in checks)))
    else:
        robust.notes.append("no robustness checks were run")
    cands = doc.get("candidates") or []
    comparison = Section("Candidates", [Table(f"{len(cands)} candidates, ranked (click a column to sort)", (
        "rank", "name", "space", "feasible", "graphs", "objective", "eager steps", "memory (GB)", "capture (s)",
        "violations"), tuple(
        (cell(c.get("rank")), Cell(str(c.get("name"))), Cell(str(c.get("space"))), cell(bool(c.get("feasible"))),
         cell(c.get("num_graphs")), cell(c.get("objective")), cell((c.get("metrics") or {}).get("eager_steps")),
         cell((c.get("estimate") or {}).get("memory_gb")), cell((c.get("estimate") or {}).get("capture_s")),
         Cell("; ".join(map(str, c.get("violations") or [])) or "-")) for c in cands))])
    figures = Figures()
    _add(comparison, figures.draw("the objective against the number of captured graphs",
                                  lambda plt: advise_pareto_figure(plt, doc)))
    budgets = doc.get("budgets") or {}
    facts = [("advise report", source), ("overrides", " ".join(doc.get("overrides") or []) or "(defaults)"),
             ("objective", objective),
             ("budgets", ", ".join(f"{k} {v}" for k, v in budgets.items() if v is not None) or "none"),
             *_provenance(doc)]
    return Report(ADVISE, "cgbench advise: " + (" ".join(doc.get("overrides") or []) or "defaults"), facts,
                  [recommendation, robust, comparison], figures.missing, figures.hint)


# ---------------------------------------------------------------------------------------------- entry


def build_report(target: Path, readers: Mapping[str, Callable[[dict[str, Any], str], Report]] | None = None) -> Report:
    """The report of ``target``: a sweep folder, a result JSON, an advise report (by its ``kind``), or
    a document whose ``kind`` ``readers`` maps to the function that reports it (``cgbench report``
    passes ``cgbench.analysis.megatron_log.report.READERS``)."""
    from cgbench.analysis.advise.report import REPORT_KIND
    from cgbench.safeio import describe_missing, read_json

    target = Path(target)
    if target.is_dir():
        return sweep_report(target)
    if not target.is_file():
        raise ConfigError(f"{target}: {describe_missing(target)}")
    doc = read_json(target)
    if isinstance(doc, dict) and doc.get("kind") == REPORT_KIND:
        return advise_report(_checked_advise(doc, target), str(target))
    if isinstance(doc, dict) and doc.get("kind") in (readers or {}):  # another command's document
        return (readers or {})[doc["kind"]](doc, str(target))
    from cgbench.results.document import load_result

    return run_report(load_result(target), str(target))


def _checked_advise(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """``doc`` with the keys the report reads, of the JSON types they must have (else one ConfigError)."""
    from cgbench.results.document import SCHEMA_VERSION

    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    for key, kind in (("candidates", list), ("pareto", list), ("objective", dict), ("budgets", dict),
                      ("overrides", list)):
        if not isinstance(doc.get(key), kind):
            raise ConfigError(f"{path}: an advise report needs '{key}' ({'a list' if kind is list else 'an object'})")
    for key in ("metric", "name"):
        if not isinstance(doc["objective"].get(key), str):
            raise ConfigError(f"{path}: 'objective.{key}' must be a string")
    for i, c in enumerate(doc["candidates"]):
        if not isinstance(c, dict):
            raise ConfigError(f"{path}: candidates[{i}] must be an object")
        for key, kinds in _CANDIDATE_TYPES.items():
            if not isinstance(c.get(key), kinds) or isinstance(c.get(key), bool) and bool not in kinds:
                raise ConfigError(f"{path}: candidates[{i}].{key} is missing or of the wrong type")
    rec = doc.get("recommended")
    if rec is not None and (not isinstance(rec, dict) or not isinstance(rec.get("name"), str)):
        raise ConfigError(f"{path}: 'recommended' must be null or an object with a 'name'")
    from cgbench.results.read_checked import ADVISE, check_document

    return check_document(doc, ADVISE, path)


# what the report reads of each candidate: key -> the JSON types it may have
_CANDIDATE_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "space": (str,), "num_graphs": (int,), "metrics": (dict,),
    "objective": (int, float, type(None)),
}
