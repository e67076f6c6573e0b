"""Compare two results (files or sweep directories) metric by metric under per-metric rules: a gate.

A rule names a metric (or a pattern) and how much change is tolerated: ``max(abs_tol, rel_tol *
|base|)``. Which way is better comes from the metric registry (a rule may restate it, never
contradict it). ``exact: true`` rules allow no change at all: a difference is ``changed``, whatever
its direction. ``deterministic: true`` rules apply only when both runs are on the sim backend with
equal configs (then the simulator reproduces every step metric byte for byte).

Every metric check gets one class, and every point the worst class of its checks:

  failed      the point failed (or never ran) in NEW
  missing     the point is in BASE and not in NEW
  regressed   a metric moved the wrong way beyond its tolerance
  changed     an exact metric differs (or a metric exists in BASE only)
  improved    a metric moved the right way beyond its tolerance
  within      a metric moved, within its tolerance
  same        nothing changed
  skipped     not compared: a deterministic rule on unequal configs, or a metric only in NEW

``--fail-on`` picks the classes that fail the gate (default: regressed, missing, failed, changed).

Health flags (a result's ``warnings``) are checks too, ``health.<code>``: a flag NEW raises and BASE
did not is ``regressed``, one BASE raised and NEW does not ``improved``, one both raise ``same``. A
baseline regenerated under new health rules carries their flags, so its points compare ``same``
with a NEW that raises them; a baseline from before a rule existed makes every point that rule flags
``regressed`` until it is regenerated, as a changed metric definition does.

Points of two sweeps are paired by their overrides (all of them, the seed as ``match_key`` says).
``pair_by`` pairs them by the values of those override keys only (the swept axes), for two sweeps
that differ on purpose in another key (a 16-graph baseline against an 8-graph candidate): each pair's
differing config keys are reported (``Comparison.differences``, a warning line per key), never
silently ignored; deterministic checks are skipped, as for any unequal configs.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cgbench.config.overrides import split_override
from cgbench.config.schema import ConfigError
from cgbench.results.health import flag_codes
from cgbench.results.names import HIGHER, LOWER, metric
from cgbench.results.names import flatten as flatten_names
from cgbench.safeio import describe_missing

RULE_FIELDS = {"better", "exact", "abs_tol", "rel_tol", "deterministic", "missing_as_zero"}
FAILED, MISSING, REGRESSED, CHANGED, IMPROVED, WITHIN, SAME, SKIPPED = (
    "failed", "missing", "regressed", "changed", "improved", "within", "same", "skipped")
# Worst first: a point's class is its worst check's, and every list is sorted this way.
SEVERITY = (FAILED, MISSING, REGRESSED, CHANGED, IMPROVED, WITHIN, SAME, SKIPPED)
CLASSES = (REGRESSED, MISSING, FAILED, CHANGED, IMPROVED, WITHIN)  # what --fail-on can name
DEFAULT_FAIL_ON = (REGRESSED, MISSING, FAILED, CHANGED)
CLASS_TEXT = {WITHIN: "within tolerance"}
# Config keys that never change what a run measures.
CONFIG_IGNORED = ("out_dir", "sweep")
# Config keys whose change is always reported as a check of class `changed` (config.<key>): they change
# which rules the simulator follows, so metrics moving with them must never look like a regression
# of the code. Result files from before a key existed ran at its default.
CONFIG_REPORTED = {"engine.megatron_rules": "0.19.2"}
WORST_SHOWN = 3  # metrics named on a point's summary line


def severity(status: str) -> int:
    return SEVERITY.index(status)


@dataclass(frozen=True)
class Rule:
    pattern: str  # a metric name, dotted for nested values (ttft_ms.p99); fnmatch wildcards allowed
    better: str | None = None  # lower | higher (from the registry); None for exact rules
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    deterministic: bool = False
    missing_as_zero: bool = False  # counters keyed by name (eager_steps_by_reason.*): absent = 0
    exact: bool = False  # any difference is `changed`

    def describe(self) -> str:
        tol = []
        if self.rel_tol:
            tol.append(f"±{100 * self.rel_tol:g}%")
        if self.abs_tol:
            tol.append(f"±{self.abs_tol:g}")
        return " ".join(["exact" if self.exact else f"{self.better} is better", *tol])


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
    trend: str = ""  # better | worse | "" (no numeric change, or the registry gives no direction)

    @property
    def changed(self) -> bool:
        return self.base != self.new


@dataclass
class PointResult:
    """One BASE point and what became of it in NEW."""

    label: str  # short: the keys that vary between points (model=hybrid policy=megatron)
    overrides: list[str]
    status: str  # the worst class of its checks (or failed / missing)
    deltas: list[Delta] = field(default_factory=list)
    error: str = ""
    health: dict[str, list[str] | None] = field(default_factory=dict)  # base / new: flag codes (None: no result)
    differs: list[str] = field(default_factory=list)  # config keys that differ from NEW's pair (--pair-by)

    def classes(self) -> set[str]:
        return {self.status} | {d.status for d in self.deltas}

    def worst(self, n: int = WORST_SHOWN) -> list[Delta]:
        """The few checks that explain the point's class: worst class first, then the largest change."""
        moved = [d for d in self.deltas if d.status not in (SAME, SKIPPED)]
        return sorted(moved, key=lambda d: (severity(d.status), -_size(d)))[:n]


@dataclass
class Comparison:
    base: Path
    new: Path
    points: list[PointResult] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pair_by: list[str] = field(default_factory=list)  # the override keys points were paired by ([]: all)

    @property
    def deltas(self) -> list[Delta]:
        return [d for p in self.points for d in p.deltas]

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.status == REGRESSED]

    def count(self, status: str) -> int:
        """Metric checks of this class."""
        return sum(d.status == status for d in self.deltas)

    def points_in(self, status: str) -> list[PointResult]:
        return [p for p in self.points if p.status == status]

    def failing(self, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON) -> list[PointResult]:
        """Points with a check (or a point status) in one of the ``fail_on`` classes."""
        chosen = set(fail_on)
        return [p for p in self.points if p.classes() & chosen]

    def sorted_points(self) -> list[PointResult]:
        return sorted(self.points, key=lambda p: severity(p.status))


# ---------------------------------------------------------------------------------------------- rules


def default_rules_path() -> Path:
    from cgbench.config.compose import config_dir

    return config_dir() / "compare" / "default.yaml"


def _tolerance(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{where}: must be a number >= 0, got {value!r}")
    return float(value)


def _direction(name: str, spec: dict[str, Any], where: str) -> str | None:
    """The rule's direction: the registry's, restated or not by ``better``; None for exact rules."""
    given = spec.get("better")
    if given == "exact":
        raise ConfigError(f"{where}.better: write 'exact: true' for a metric that must not change")
    if given is not None and given not in (LOWER, HIGHER):
        raise ConfigError(f"{where}.better: {given!r} is not one of {LOWER}, {HIGHER}")
    known = metric(name)
    registry = known.better if known is not None and known.better in (LOWER, HIGHER) else None
    if given is not None and registry is not None and given != registry:
        raise ConfigError(f"{where}.better: {given} contradicts the metric registry ({registry} is better)")
    if spec.get("exact", False):
        if given is not None:
            raise ConfigError(f"{where}: 'better' and 'exact: true' exclude each other")
        return None
    if given is None and registry is None:
        raise ConfigError(f"{where}: the metric registry gives no direction for {name}; "
                          "set better: lower|higher or exact: true")
    return given or registry


def load_rules(path: Path | None = None) -> list[Rule]:
    """Read a rules YAML: ``rules: {metric: {exact, abs_tol, rel_tol, deterministic, ...}}``."""
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
            raise ConfigError(f"{where}: must be a mapping like {{rel_tol: 0.05}} or {{exact: true}}")
        unknown = set(spec) - RULE_FIELDS
        if unknown:
            raise ConfigError(f"{where}: unknown field {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(sorted(RULE_FIELDS))})")
        for flag in ("exact", "deterministic", "missing_as_zero"):
            if not isinstance(spec.get(flag, False), bool):
                raise ConfigError(f"{where}.{flag}: must be true or false")
        better = _direction(str(name), spec, where)
        rules.append(Rule(str(name), better, _tolerance(spec.get("abs_tol", 0.0), f"{where}.abs_tol"),
                          _tolerance(spec.get("rel_tol", 0.0), f"{where}.rel_tol"),
                          bool(spec.get("deterministic", False)), bool(spec.get("missing_as_zero", False)),
                          exact=bool(spec.get("exact", False))))
    return rules


# ---------------------------------------------------------------------------------------------- metrics


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> dotted keys (``ttft_ms.p99``); lists are not compared."""
    return {k: v for k, v in flatten_names(metrics, prefix) if not isinstance(v, list)}


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def trend(name: str, base: Any, new: Any) -> str:
    """``better`` / ``worse`` by the registry's direction for a numeric change, else ""."""
    m = metric(name)
    if m is None or m.better not in (LOWER, HIGHER) or not (is_number(base) and is_number(new)) or base == new:
        return ""
    if math.isnan(base) or math.isnan(new):
        return ""
    up = new > base
    return "better" if up == (m.better == HIGHER) else "worse"


def judge(rule: Rule, base: Any, new: Any) -> str:
    """same / within / improved / regressed / changed for one metric under one rule."""
    if not (is_number(base) and is_number(new)):
        return SAME if base == new else CHANGED
    if math.isnan(base) or math.isnan(new):
        if math.isnan(base) and math.isnan(new):
            return SAME
        return CHANGED if rule.exact or rule.better is None else REGRESSED
    if base == new:
        return SAME
    if rule.exact or rule.better is None:
        return CHANGED
    tol = max(rule.abs_tol, rule.rel_tol * abs(base))
    above, below = new > base + tol, new < base - tol
    worse, better = (above, below) if rule.better == LOWER else (below, above)
    return REGRESSED if worse else IMPROVED if better else WITHIN


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


def config_changes(base: dict[str, Any], new: dict[str, Any], label: str) -> list[Delta]:
    """A ``changed`` check for every ``CONFIG_REPORTED`` key that differs between the two runs."""
    out = []
    for key, default in CONFIG_REPORTED.items():
        values = []
        for doc in (base, new):
            node: Any = doc.get("config") or {}
            for part in key.split("."):
                node = node.get(part, {}) if isinstance(node, dict) else {}
            values.append(default if node == {} else node)
        if values[0] != values[1]:
            out.append(Delta(label, f"config.{key}", values[0], values[1], CHANGED, "config",
                             f"config change: {key} {values[0]} -> {values[1]}"))
    return out


HEALTH = "health."  # a health check's name: health.<flag code>
GOODPUT = ("goodput_req_s", "goodput_fraction")  # null without an slo.* bound
NO_SLO = "no slo.* bound set, so no goodput"
UNEQUAL = "not sim with equal configs"
HEALTH_RULE = "a new flag regresses"


def health_changes(base: dict[str, Any], new: dict[str, Any], label: str) -> list[Delta]:
    """A ``health.<code>`` check per flag either side raises (base, new: raised or not)."""
    b, n = flag_codes(base), flag_codes(new)
    out = []
    for code in dict.fromkeys([*b, *n]):
        was, now = code in b, code in n
        status = SAME if was == now else REGRESSED if now else IMPROVED
        note = "" if was == now else "raised in new" if now else "cleared in new"
        out.append(Delta(label, HEALTH + code, was, now, status, HEALTH_RULE, note,
                         trend="" if was == now else "worse" if now else "better"))
    return out


def compare_docs(base: dict[str, Any], new: dict[str, Any], rules: list[Rule], label: str) -> list[Delta]:
    fb, fn = flatten(base["metrics"]), flatten(new["metrics"])
    exact_ok = deterministic_pair(base, new)
    out = config_changes(base, new, label) + health_changes(base, new, label)
    for name, rule in _assign(rules, sorted(set(fb) | set(fn))):
        b, n = fb.get(name), fn.get(name)
        if rule.missing_as_zero:
            b, n = (0 if b is None else b), (0 if n is None else n)
        if b is None and n is None:
            continue
        if rule.deterministic and not exact_ok:
            out.append(Delta(label, name, b, n, SKIPPED, rule.describe(), UNEQUAL))
        elif b is None:  # a metric added since BASE was written (a new summary field): nothing to compare
            out.append(Delta(label, name, b, n, SKIPPED, rule.describe(), "only in new (the base predates it)"))
        elif n is None and name in GOODPUT and new["metrics"].get("goodput_slo") == "none":
            # no slo.* bound: NEW has no goodput (a base from before that rule counted every completed
            # request); nothing to compare, and no reason to fail the gate
            out.append(Delta(label, name, b, n, SKIPPED, rule.describe(), NO_SLO))
        elif n is None:
            out.append(Delta(label, name, b, n, CHANGED, rule.describe(), "only in base"))
        else:
            out.append(Delta(label, name, b, n, judge(rule, b, n), rule.describe(), trend=trend(name, b, n)))
    return out


# ---------------------------------------------------------------------------------------------- inputs


def load_side(path: Path) -> tuple[list[Point], bool]:
    """The points of a result file or a sweep directory; (points, is_sweep)."""
    from cgbench.analysis.sweep.run import DONE, INDEX_NAME, load_index
    from cgbench.results.document import load_result

    path = Path(path)
    if path.is_file():
        doc = load_result(path)
        return [Point(path.name, list(doc.get("overrides") or []), path, doc)], False
    if not path.is_dir():
        raise ConfigError(f"{path}: {describe_missing(path)}")
    if (path / INDEX_NAME).is_file():
        index = load_index(path)
        points = []
        for p in index["points"]:
            label = " ".join(p["overrides"]) or p["file"]
            if p.get("status") == DONE:
                points.append(Point(label, list(p["overrides"]), path / p["file"], load_result(path / p["file"])))
            else:
                points.append(Point(label, list(p["overrides"]), path / p["file"], None,
                                    p.get("error") or f"not run (status {p.get('status')})"))
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


def match_key(point: Point, with_seed: bool, pair_by: tuple[str, ...] = ()) -> tuple:
    """Overrides as an order-free key: all of them, or with ``pair_by`` the values of those keys
    only (None where the point does not set one). The seed is part of it only when either side set
    seeds (``--repeat`` appends ``seed=``): then a run without a seed override matches the repeat with
    its config's seed. When neither side set one, the seed is whatever the config default was on
    each side and is not used to match (a changed default shows up as a config difference instead)."""
    given = [split_override(o) for o in point.overrides if split_override(o)[0] != "seed"]
    if pair_by:
        values = dict(given)
        items = [(k, values.get(k)) for k in pair_by]
    else:
        items = sorted(given)
    if not with_seed:
        return tuple(items)
    seed = None
    if point.doc is not None:
        seed = (point.doc.get("config") or {}).get("seed")
    if seed is None:
        seed = next((v for k, v in map(split_override, point.overrides) if k == "seed"), None)
    return (*items, ("seed", str(seed)))


def _keyed(points: list[Point], with_seed: bool, side: Path, pair_by: tuple[str, ...] = ()) -> dict[tuple, Point]:
    out: dict[tuple, Point] = {}
    for p in points:
        k = match_key(p, with_seed, pair_by)
        if k in out:
            if pair_by:
                shown = " ".join(f"{key}={v}" for key, v in k)
                raise ConfigError(f"--pair-by {','.join(pair_by)}: {side} has two points with {shown} "
                                  f"({out[k].source.name}, {p.source.name}): add the key that tells them apart")
            raise ConfigError(f"{side}: two points with the same overrides: {out[k].source.name}, {p.source.name}")
        out[k] = p
    return out


def parse_pair_by(text: str | None) -> tuple[str, ...]:
    """``model,cg`` -> the override keys; () for None. ConfigError on an empty or repeated name."""
    if text is None:
        return ()
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise ConfigError(f"--pair-by: {text!r}: name override keys, comma-separated (model,cg)")
    if "seed" in keys:
        raise ConfigError("--pair-by seed: the seed pairs points by itself whenever either side sets seeds")
    if len(set(keys)) != len(keys):
        raise ConfigError(f"--pair-by: {text!r} names a key twice")
    return tuple(keys)


def _check_pair_by(pair_by: tuple[str, ...], sides: list[tuple[str, list[Point], Path]]) -> None:
    """Every ``pair_by`` key is set by some point of each side (else a typo, or an axis one side lacks)."""
    from cgbench.errors import did_you_mean

    for name, points, path in sides:
        present = sorted({split_override(o)[0] for p in points for o in p.overrides} - {"seed"})
        for key in pair_by:
            if key not in present:
                raise ConfigError(f"--pair-by {key}: no point of {name} ({path}) sets it"
                                  f"{did_you_mean(key, present)} (its points set: {', '.join(present) or 'nothing'})")


def _shown(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def config_differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``cg.max_graphs 16 -> 8`` for every config key whose value differs (``CONFIG_IGNORED`` aside)."""
    fb, fn = dict(flatten_names(_plain_config(base))), dict(flatten_names(_plain_config(new)))
    return [f"{k} {_shown(fb.get(k))} -> {_shown(fn.get(k))}" for k in sorted(set(fb) | set(fn))
            if fb.get(k) != fn.get(k)]


DIFFERENCES_SHOWN = 8  # config keys named in the warnings; --format json lists every pair's


def _difference_warnings(comp: Comparison) -> list[str]:
    """One line per differing config key, over the compared pairs: what ``--pair-by`` (or two
    files, which always pair) compares across."""
    from collections import Counter

    pairs = [p for p in comp.points if p.status not in (FAILED, MISSING)]
    counts = Counter(d for p in pairs for d in p.differs)
    if not counts:
        return []
    how = f"paired by {', '.join(comp.pair_by)}: " if comp.pair_by else ""
    lines = [f"{how}the configs differ: {d} ({n} of {len(pairs)} pair{'s' if len(pairs) != 1 else ''})"
             for d, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:DIFFERENCES_SHOWN]]
    if len(counts) > DIFFERENCES_SHOWN:
        lines.append(f"{how}{len(counts) - DIFFERENCES_SHOWN} more config differences (--format json lists "
                     "every pair's)")
    return lines


def short_labels(points: list[Point]) -> dict[int, str]:
    """Each point's overrides cut to the keys whose values differ between points (``model=hybrid
    policy=megatron``), keys shortened to their last part where that stays unambiguous."""
    given = [dict(split_override(o) for o in p.overrides) for p in points]
    keys = list(dict.fromkeys(k for g in given for k in g))
    varying = [k for k in keys if len({g.get(k) for g in given}) > 1] if len(points) > 1 else keys
    tails = [k.rsplit(".", 1)[-1] for k in varying]
    names = {k: (t if tails.count(t) == 1 else k) for k, t in zip(varying, tails, strict=True)}
    out = {}
    for i, (p, g) in enumerate(zip(points, given, strict=True)):
        text = " ".join(f"{names[k]}={g[k]}" for k in varying if k in g)
        out[i] = text or p.label
    return out


def _provenance(docs: list[dict[str, Any]]) -> set[tuple[Any, Any, Any]]:
    return {(d.get("git_sha"), d.get("git_dirty"), d.get("git_diff_hash")) for d in docs}


def uncommitted_warning(base: list[Point], new: list[Point]) -> str | None:
    """A warning when BASE and NEW ran from the same commit but not the same working tree: then any
    difference comes from an uncommitted change (which the commit id alone does not show)."""
    b = _provenance([p.doc for p in base if p.doc is not None])
    n = _provenance([p.doc for p in new if p.doc is not None])
    if len(b) != 1 or len(n) != 1:
        return None
    (bsha, bdirty, bhash), (nsha, ndirty, nhash) = b.pop(), n.pop()
    if bsha is None or bsha != nsha or (bdirty, bhash) == (ndirty, nhash):
        return None
    if bdirty is None or ndirty is None:
        return None  # a result written before git_dirty was recorded: nothing to say

    def state(dirty: bool, h: str | None) -> str:
        return f"uncommitted changes (diff {h})" if dirty else "a clean tree"

    return (f"BASE and NEW ran from the same commit {bsha[:10]} and differ only by uncommitted changes: "
            f"BASE from {state(bdirty, bhash)}, NEW from {state(ndirty, nhash)}")


def compare_paths(base: Path, new: Path, rules: list[Rule], pair_by: tuple[str, ...] = ()) -> Comparison:
    """Load both sides, match their points (by all their overrides, or by the ``pair_by`` keys) and
    compare each pair. ConfigError on bad input."""
    bpts, bsweep = load_side(base)
    npts, nsweep = load_side(new)
    comp = Comparison(Path(base), Path(new), pair_by=list(pair_by))
    if not bsweep and not nsweep:
        if pair_by:
            raise ConfigError("--pair-by: pairs the points of sweep folders; two result files are compared "
                              "as they are (their differing config keys are shown)")
        pairs: list[tuple[Point, Point | None]] = [(bpts[0], npts[0])]
        labels = {0: npts[0].label}
    else:
        if pair_by:
            _check_pair_by(pair_by, [("BASE", bpts, Path(base)), ("NEW", npts, Path(new))])
        with_seed = _has_seed(bpts) or _has_seed(npts)
        bk, nk = _keyed(bpts, with_seed, base, pair_by), _keyed(npts, with_seed, new, pair_by)
        if not any(k in nk for k in bk):
            how = f"the values of {', '.join(pair_by)}" if pair_by else \
                "their overrides; --pair-by KEYS pairs them by the swept axes alone"
            raise ConfigError(f"no common points between {base} and {new} (points are matched by {how})")
        if not nsweep:  # one NEW file against a BASE sweep: compare that point only
            bk = {k: v for k, v in bk.items() if k in nk}
        pairs = [(b, nk.get(k)) for k, b in bk.items()]
        labels = short_labels([b for b, _ in pairs])
        comp.only_new = [nk[k].label for k in nk if k not in bk]
        if comp.only_new:
            comp.notes.append(f"{len(comp.only_new)} points only in new (not compared): "
                              + "; ".join(comp.only_new[:5]) + (" ..." if len(comp.only_new) > 5 else ""))
    for i, (b, n) in enumerate(pairs):
        label = labels[i]
        base_health = flag_codes(b.doc) if b.doc is not None else None
        if n is None:
            comp.points.append(PointResult(label, b.overrides, MISSING, error=f"no point in {new}",
                                           health={"base": base_health, "new": None}))
        elif b.doc is None:
            comp.notes.append(f"{label}: not compared, the base run failed ({b.error})")
        elif n.doc is None:
            comp.points.append(PointResult(label, b.overrides, FAILED, error=n.error or "failed",
                                           health={"base": base_health, "new": None}))
        else:
            deltas = compare_docs(b.doc, n.doc, rules, label)
            status = min((d.status for d in deltas), key=severity, default=SAME)
            comp.points.append(PointResult(label, b.overrides, status, deltas,
                                           health={"base": flag_codes(b.doc), "new": flag_codes(n.doc)},
                                           differs=config_differences(b.doc, n.doc)))
    if not comp.points:  # every pair had a failed base: an "OK" here would compare nothing
        side = "on both sides" if all(n is None or n.doc is None for _, n in pairs) else "in the base"
        raise ConfigError(f"nothing to compare between {base} and {new}: every point failed {side} "
                          f"({len(pairs)} point{'s' if len(pairs) != 1 else ''}; {pairs[0][0].error or 'failed'})")
    if pair_by or not (bsweep or nsweep):  # pairs that may differ on purpose: say how
        comp.warnings += _difference_warnings(comp)
    configs = sorted({d.note for d in comp.deltas if d.metric.startswith("config.")})
    for note in configs:  # said once for the whole comparison, not only per point
        comp.warnings.append(f"{note}: the two sides ran under different rules; their metrics differ by design")
    skipped = sum(d.status == SKIPPED and d.note == UNEQUAL for d in comp.deltas)
    if skipped:
        comp.notes.append(f"{skipped} exact checks skipped: the runs are not both sim with equal configs")
    no_slo = sum(d.status == SKIPPED and d.note == NO_SLO for d in comp.deltas)
    if no_slo:
        comp.notes.append(f"{no_slo} goodput checks skipped: {NO_SLO} in new")
    warning = uncommitted_warning(bpts, npts)
    if warning:
        comp.warnings.append(warning)
    return comp


def health_summary(comp: Comparison) -> str:
    """``health: base 12 of 48 points flagged (memory 12); new 14 of 48 (memory 12, overload 2)``."""
    from collections import Counter

    def side(which: str) -> str:
        codes = [p.health.get(which) for p in comp.points]
        known = [c for c in codes if c is not None]
        flagged = [c for c in known if c]
        counts = Counter(code for c in flagged for code in c)
        detail = f" ({', '.join(f'{k} {v}' for k, v in counts.most_common())})" if counts else ""
        return f"{len(flagged)} of {len(known)} point{'s' if len(known) != 1 else ''} flagged{detail}"

    return f"health: base {side('base')}; new {side('new')}"


def parse_fail_on(text: str) -> tuple[str, ...]:
    """``regressed,missing`` -> the classes; ``none`` -> no class fails. ConfigError on a typo."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if items == ["none"]:
        return ()
    aliases = {"within_tolerance": WITHIN, "within-tolerance": WITHIN}
    out = []
    for t in items:
        t = aliases.get(t, t)
        if t not in CLASSES:
            raise ConfigError(f"--fail-on: {t!r} is not one of {', '.join(CLASSES)} (or none)")
        out.append(t)
    if not out:
        raise ConfigError("--fail-on: name at least one class (or none)")
    return tuple(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------- summary


def _size(d: Delta) -> float:
    """How large a change is, for ordering: relative where the base is non-zero."""
    if not (is_number(d.base) and is_number(d.new)) or d.base == d.new:
        return 0.0 if d.base == d.new else math.inf
    if math.isnan(d.base) or math.isnan(d.new):
        return math.inf
    return abs(d.new - d.base) / abs(d.base) if d.base else math.inf


def class_text(status: str) -> str:
    return CLASS_TEXT.get(status, status)


def verdict(comp: Comparison, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON) -> str:
    """``FAIL: 2 of 48 points (1 missing, 1 regressed); 46 same`` or ``OK: ...``."""
    failing = comp.failing(fail_on)
    counts = [f"{len(comp.points_in(s))} {class_text(s)}" for s in SEVERITY if comp.points_in(s)]
    n = len(comp.points)
    rule = f"fail on: {', '.join(fail_on) or 'none'}"
    checks = sum(d.status != SKIPPED for d in comp.deltas)
    tail = f"{checks} metric checks; {rule}"
    if failing:
        return f"FAIL: {len(failing)} of {n} points ({', '.join(counts)}; {tail})"
    return f"OK: {n} point{'s' if n != 1 else ''} ({', '.join(counts) or 'nothing compared'}; {tail})"


def to_dict(comp: Comparison, fail_on: tuple[str, ...] | list[str] = DEFAULT_FAIL_ON) -> dict[str, Any]:
    """The whole comparison as plain JSON data (``comparison_from_dict`` reads it back)."""
    return {"kind": "cgbench-compare", "base": str(comp.base), "new": str(comp.new),
            "fail_on": list(fail_on), "failed": bool(comp.failing(fail_on)), "verdict": verdict(comp, fail_on),
            "pair_by": comp.pair_by,
            "points": [{"label": p.label, "overrides": p.overrides, "status": p.status, "error": p.error,
                        "health": p.health, "differs": p.differs,
                        "deltas": [asdict(d) for d in p.deltas]} for p in comp.points],
            "only_new": comp.only_new, "notes": comp.notes, "warnings": comp.warnings}


def comparison_from_dict(data: dict[str, Any]) -> Comparison:
    comp = Comparison(Path(data["base"]), Path(data["new"]), only_new=list(data["only_new"]),
                      notes=list(data["notes"]), warnings=list(data["warnings"]),
                      pair_by=list(data.get("pair_by") or []))
    for p in data["points"]:
        comp.points.append(PointResult(p["label"], list(p["overrides"]), p["status"],
                                       [Delta(**d) for d in p["deltas"]], p["error"],
                                       health=dict(p.get("health") or {}), differs=list(p.get("differs") or [])))
    return comp
