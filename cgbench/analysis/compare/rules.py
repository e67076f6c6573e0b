"""The rules and the per-metric judgement: reading a rules file (``load_rules``), which rule a
metric falls under, and the checks of one pair of results (``compare_docs``: the reported config
keys, the health flags, each metric under its rule)."""

from __future__ import annotations

import fnmatch
import math
from pathlib import Path
from typing import Any

from cgbench.analysis.compare.records import (
    CHANGED,
    IMPROVED,
    REGRESSED,
    SAME,
    SKIPPED,
    WITHIN,
    Delta,
    Rule,
    is_number,
)
from cgbench.config.schema import ConfigError
from cgbench.results.health import flag_codes
from cgbench.results.names import HIGHER, LOWER, metric
from cgbench.results.names import flatten as flatten_names

RULE_FIELDS = {"better", "exact", "abs_tol", "rel_tol", "deterministic", "missing_as_zero"}
# Config keys that never change what a run measures.
CONFIG_IGNORED = ("out_dir", "sweep")
# Config keys whose change is always reported as a check of class `changed` (config.<key>): they change
# which rules the simulator follows, so metrics moving with them must never look like a regression
# of the code. Result files from before a key existed ran at its default.
CONFIG_REPORTED = {"engine.megatron_rules": "0.19.2"}


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


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> dotted keys (``ttft_ms.p99``); lists are not compared."""
    return {k: v for k, v in flatten_names(metrics, prefix) if not isinstance(v, list)}


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


def plain_config(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (doc.get("config") or {}).items() if k not in CONFIG_IGNORED}


def deterministic_pair(base: dict[str, Any], new: dict[str, Any]) -> bool:
    """Same config on the sim backend: every step metric must be reproduced exactly."""
    backends = {(d.get("environment") or {}).get("backend") for d in (base, new)}
    return backends == {"sim"} and plain_config(base) == plain_config(new)


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
