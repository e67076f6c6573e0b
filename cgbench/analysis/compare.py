"""Compare two results (files or sweep directories) metric by metric under per-metric rules.

A rule says which way is better (``lower``, ``higher``, or ``exact``) and how much change is
tolerated: ``max(abs_tol, rel_tol * |base|)``. ``deterministic: true`` rules apply only when both
runs are on the sim backend with equal configs (then the step metrics must agree exactly).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgbench.config.overrides import split_override
from cgbench.config.schema import ConfigError
from cgbench.results.formatting import significant
from cgbench.results.names import flatten as flatten_names

BETTER = ("lower", "higher", "exact")
RULE_FIELDS = {"better", "abs_tol", "rel_tol", "deterministic", "missing_as_zero"}
OK, IMPROVED, REGRESSED, MISSING, SKIPPED = "ok", "improved", "regressed", "missing", "skipped"
# Config keys that never change what a run measures.
CONFIG_IGNORED = ("out_dir", "sweep")


@dataclass(frozen=True)
class Rule:
    pattern: str  # a metric name, dotted for nested values (ttft_ms.p99); fnmatch wildcards allowed
    better: str
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    deterministic: bool = False
    missing_as_zero: bool = False  # counters keyed by name (eager_steps_by_reason.*): absent = 0

    def describe(self) -> str:
        tol = []
        if self.rel_tol:
            tol.append(f"±{100 * self.rel_tol:g}%")
        if self.abs_tol:
            tol.append(f"±{self.abs_tol:g}")
        return " ".join([self.better, *tol])


@dataclass
class Point:
    label: str
    overrides: list[str]
    source: Path
    doc: dict[str, Any] | None  # None: the sweep recorded this point as failed / not run
    error: str | None = None


@dataclass
class Delta:
    point: str
    metric: str
    base: Any
    new: Any
    status: str
    rule: str = ""
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.base != self.new


@dataclass
class Comparison:
    base: Path
    new: Path
    deltas: list[Delta] = field(default_factory=list)
    points: int = 0
    only_base: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.status == REGRESSED]

    def count(self, status: str) -> int:
        return sum(d.status == status for d in self.deltas)


# ---------------------------------------------------------------------------------------------- rules


def default_rules_path() -> Path:
    from cgbench.config.compose import config_dir

    return config_dir() / "compare" / "default.yaml"


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{where}: must be a number >= 0, got {value!r}")
    return float(value)


def load_rules(path: Path | None = None) -> list[Rule]:
    """Read a rules YAML: ``rules: {metric: {better: lower|higher|exact, abs_tol, rel_tol, ...}}``."""
    from cgbench.safeio import load_yaml_text, read_text

    path = Path(path) if path is not None else default_rules_path()
    # bounded: a FIFO or /dev/zero is refused, not read; tolerances are finite and 64-bit
    data = load_yaml_text(read_text(path, "--rules", max_bytes=1024 * 1024), str(path))
    if not isinstance(data, dict) or not isinstance(data.get("rules"), dict) or not data["rules"]:
        raise ConfigError(f"{path}: needs a non-empty 'rules:' mapping of metric -> rule")
    rules = []
    for name, spec in data["rules"].items():
        where = f"{path}: rules.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: must be a mapping like {{better: lower, rel_tol: 0.05}}")
        unknown = set(spec) - RULE_FIELDS
        if unknown:
            raise ConfigError(f"{where}: unknown field {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(sorted(RULE_FIELDS))})")
        better = spec.get("better")
        if better not in BETTER:
            raise ConfigError(f"{where}.better: {better!r} is not one of {', '.join(BETTER)}")
        for flag in ("deterministic", "missing_as_zero"):
            if not isinstance(spec.get(flag, False), bool):
                raise ConfigError(f"{where}.{flag}: must be true or false")
        rules.append(Rule(str(name), better, _number(spec.get("abs_tol", 0.0), f"{where}.abs_tol"),
                          _number(spec.get("rel_tol", 0.0), f"{where}.rel_tol"),
                          bool(spec.get("deterministic", False)), bool(spec.get("missing_as_zero", False))))
    return rules


# ---------------------------------------------------------------------------------------------- metrics


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> dotted keys (``ttft_ms.p99``); lists are not compared."""
    return {k: v for k, v in flatten_names(metrics, prefix) if not isinstance(v, list)}


def judge(rule: Rule, base: Any, new: Any) -> str:
    """ok / improved / regressed for one metric under one rule."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (base, new))
    if not numeric:
        if base == new:
            return OK
        return REGRESSED if rule.better == "exact" else OK
    if math.isnan(base) or math.isnan(new):
        return OK if math.isnan(base) and math.isnan(new) else REGRESSED
    tol = max(rule.abs_tol, rule.rel_tol * abs(base))
    above, below = new > base + tol, new < base - tol
    if rule.better == "exact":
        return REGRESSED if above or below else OK
    worse, better = (above, below) if rule.better == "lower" else (below, above)
    return REGRESSED if worse else IMPROVED if better else OK


def _plain_config(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (doc.get("config") or {}).items() if k not in CONFIG_IGNORED}


def deterministic_pair(base: dict[str, Any], new: dict[str, Any]) -> bool:
    """Same config on the sim backend: every step metric must be reproduced exactly."""
    backends = {(d.get("environment") or {}).get("backend") for d in (base, new)}
    return backends == {"sim"} and _plain_config(base) == _plain_config(new)


def _assign(rules: list[Rule], names: list[str]) -> list[tuple[str, Rule]]:
    """Each metric to its rule: an exact name wins over a pattern, then the first pattern in file order."""
    taken: dict[str, Rule] = {}
    for r in rules:
        if not any(c in r.pattern for c in "*?["):
            taken.setdefault(r.pattern, r)
    for r in rules:
        if any(c in r.pattern for c in "*?["):
            for n in fnmatch.filter(names, r.pattern):
                taken.setdefault(n, r)
    order = {r.pattern: i for i, r in enumerate(rules)}
    return sorted(taken.items(), key=lambda kv: (order[kv[1].pattern], kv[0]))


def compare_docs(base: dict[str, Any], new: dict[str, Any], rules: list[Rule], label: str) -> list[Delta]:
    fb, fn = flatten(base["metrics"]), flatten(new["metrics"])
    exact_ok = deterministic_pair(base, new)
    out = []
    for name, rule in _assign(rules, sorted(set(fb) | set(fn))):
        b, n = fb.get(name), fn.get(name)
        if rule.missing_as_zero:
            b, n = (0 if b is None else b), (0 if n is None else n)
        if b is None and n is None:
            continue
        if rule.deterministic and not exact_ok:
            out.append(Delta(label, name, b, n, SKIPPED, rule.describe(), "not sim with equal configs"))
        elif b is None or n is None:
            out.append(Delta(label, name, b, n, MISSING, rule.describe(), f"only in {'new' if b is None else 'base'}"))
        else:
            out.append(Delta(label, name, b, n, judge(rule, b, n), rule.describe()))
    return out


# ---------------------------------------------------------------------------------------------- inputs


def load_side(path: Path) -> tuple[list[Point], bool]:
    """The points of a result file or a sweep directory; (points, is_sweep)."""
    from cgbench.analysis.sweep import DONE, INDEX_NAME, load_index
    from cgbench.results.document import load_result

    path = Path(path)
    if path.is_file():
        doc = load_result(path)
        return [Point(path.name, list(doc.get("overrides") or []), path, doc)], False
    if not path.is_dir():
        raise ConfigError(f"{path}: no such file or directory")
    if (path / INDEX_NAME).is_file():
        index = load_index(path)
        points = []
        for p in index["points"]:
            label = " ".join(p["overrides"]) or p["file"]
            if p.get("status") == DONE:
                points.append(Point(label, list(p["overrides"]), path / p["file"], load_result(path / p["file"])))
            else:
                points.append(Point(label, list(p["overrides"]), path / p["file"], None,
                                    p.get("error") or str(p.get("status"))))
        return points, True
    files = sorted(f for f in path.glob("*.json") if f.name != INDEX_NAME)
    if not files:
        raise ConfigError(f"{path}: no result JSON files and no {INDEX_NAME}")
    points = []
    for f in files:
        doc = load_result(f)
        ovr = list(doc.get("overrides") or [])
        points.append(Point(" ".join(ovr) or f.name, ovr, f, doc))
    return points, True


def _has_seed(points: list[Point]) -> bool:
    return any(split_override(o)[0] == "seed" for p in points for o in p.overrides)


def match_key(point: Point, with_seed: bool) -> tuple:
    """Overrides as an order-free key. The seed is part of it only when either side set seeds
    (``--repeat`` appends ``seed=``): then a run without a seed override matches the repeat with its
    config's seed. When neither side set one, the seed is whatever the config default was on each
    side and is not used to match (a changed default shows up as a config difference instead)."""
    items = sorted(split_override(o) for o in point.overrides if split_override(o)[0] != "seed")
    if not with_seed:
        return tuple(items)
    seed = None
    if point.doc is not None:
        seed = (point.doc.get("config") or {}).get("seed")
    if seed is None:
        seed = next((v for k, v in map(split_override, point.overrides) if k == "seed"), None)
    return (*items, ("seed", str(seed)))


def _keyed(points: list[Point], with_seed: bool, side: Path) -> dict[tuple, Point]:
    out: dict[tuple, Point] = {}
    for p in points:
        k = match_key(p, with_seed)
        if k in out:
            raise ConfigError(f"{side}: two points with the same overrides: {out[k].source.name}, {p.source.name}")
        out[k] = p
    return out


def compare_paths(base: Path, new: Path, rules: list[Rule]) -> Comparison:
    """Load both sides, match their points and compare each pair. ConfigError on bad input."""
    bpts, bsweep = load_side(base)
    npts, nsweep = load_side(new)
    comp = Comparison(Path(base), Path(new))
    if not bsweep and not nsweep:
        pairs = [(npts[0].label, bpts[0], npts[0])]
    else:
        with_seed = _has_seed(bpts) or _has_seed(npts)
        bk, nk = _keyed(bpts, with_seed, base), _keyed(npts, with_seed, new)
        common = [k for k in bk if k in nk]
        if not common:
            raise ConfigError(f"no common points between {base} and {new} (points are matched by their overrides)")
        pairs = [(nk[k].label, bk[k], nk[k]) for k in common]
        # Unmatched points are reported, not failed: a changed sweep definition (more seeds, another
        # axis) is not a performance regression. A point that ran and failed is (below).
        comp.only_base = [bk[k].label for k in bk if k not in nk]
        comp.only_new = [nk[k].label for k in nk if k not in bk]
        if bsweep and nsweep and comp.only_base:
            comp.notes.append(f"{len(comp.only_base)} base points have no match in new: "
                              + "; ".join(comp.only_base[:5]) + (" ..." if len(comp.only_base) > 5 else ""))
    for label, b, n in pairs:
        comp.points += 1
        if b.doc is None:
            comp.notes.append(f"{label}: not compared, the base run failed ({b.error})")
        elif n.doc is None:
            comp.deltas.append(Delta(label, "(point)", "done", "failed", REGRESSED, note=n.error or ""))
        else:
            comp.deltas += compare_docs(b.doc, n.doc, rules, label)
    skipped = comp.count(SKIPPED)
    if skipped:
        comp.notes.append(f"{skipped} exact checks skipped: the runs are not both sim with equal configs")
    return comp


# ---------------------------------------------------------------------------------------------- output


def fmt(value: Any) -> str:
    return significant(value)


def fmt_delta(d: Delta) -> tuple[str, str]:
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (d.base, d.new))
    if not numeric or d.base == d.new:
        return "", ""
    diff = d.new - d.base
    pct = f"{100.0 * diff / abs(d.base):+.2f}%" if d.base else ""
    return (f"{diff:+,}" if isinstance(diff, int) else f"{diff:+.6g}"), pct


def shown(comp: Comparison, show_all: bool = False) -> list[Delta]:
    """Rows worth a look: regressions first, then other changes (everything with ``show_all``)."""
    rows = [d for d in comp.deltas if show_all or d.status in (REGRESSED, MISSING, IMPROVED) or
            (d.changed and d.status != SKIPPED)]
    rank = {REGRESSED: 0, MISSING: 1, IMPROVED: 2, OK: 3, SKIPPED: 4}
    return sorted(rows, key=lambda d: rank[d.status])


def summary_line(comp: Comparison) -> str:
    regs = comp.regressions
    pts = len({d.point for d in regs})
    compared = sum(d.status != SKIPPED for d in comp.deltas)
    head = f"{len(regs)} regression{'s' if len(regs) != 1 else ''} in {pts} of {comp.points} points" if regs \
        else f"no regression in {comp.points} point{'s' if comp.points != 1 else ''}"
    tail = f"{compared} metric checks, {comp.count(IMPROVED)} improved"
    if comp.only_base or comp.only_new:
        tail += f"; unmatched: {len(comp.only_base)} only in base, {len(comp.only_new)} only in new"
    return f"{head} ({tail})"


def comparison_table(comp: Comparison, show_all: bool = False):
    """Rows grouped by point (a bold label row, then its metrics); fits an 80-column CI log."""
    from rich import box
    from rich.table import Table

    t = Table(title=f"compare: {comp.base} -> {comp.new}", box=box.SIMPLE_HEAVY, title_justify="left",
              show_edge=False, padding=(0, 1, 0, 0))
    rows = shown(comp, show_all)
    t.add_column("metric", overflow="fold", min_width=max((len(d.metric) for d in rows), default=6))
    for col in ("base", "new", "change"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("rule", no_wrap=True)
    t.add_column("status")
    style = {REGRESSED: "bold red", IMPROVED: "green", MISSING: "yellow", SKIPPED: "dim", OK: ""}
    points = list(dict.fromkeys(d.point for d in rows))
    for k, point in enumerate(points):
        if k:
            t.add_section()
        t.add_row(f"[bold]{point}[/bold]")
        for d in (d for d in rows if d.point == point):
            diff, pct = fmt_delta(d)
            status = d.status.upper() if d.status == REGRESSED else d.status
            if d.note:
                status += f" ({d.note})"
            t.add_row(d.metric, fmt(d.base), fmt(d.new), pct or diff, d.rule, status, style=style[d.status])
    return t


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(comp: Comparison, limit: int = 200) -> str:
    """A Markdown summary for a CI job summary (``$GITHUB_STEP_SUMMARY``)."""
    verdict = "**REGRESSION**" if comp.regressions else "**OK**"
    lines = ["## cgbench compare", "", f"{verdict}: {summary_line(comp)}", "",
             f"base `{comp.base}`, new `{comp.new}`", ""]
    rows = shown(comp)
    if rows:
        lines += ["| point | metric | base | new | delta | delta % | rule | status |",
                  "|---|---|---:|---:|---:|---:|---|---|"]
        for d in rows[:limit]:
            diff, pct = fmt_delta(d)
            status = d.status.upper() if d.status == REGRESSED else d.status
            cells = [d.point, d.metric, fmt(d.base), fmt(d.new), diff, pct, d.rule,
                     status + (f" ({d.note})" if d.note else "")]
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        if len(rows) > limit:
            lines.append(f"\n{len(rows) - limit} more rows not shown.")
    else:
        lines.append("No metric changed.")
    for note in comp.notes:
        lines.append(f"\n- {note}")
    return "\n".join(lines) + "\n"
