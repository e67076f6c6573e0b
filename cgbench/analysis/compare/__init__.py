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

The package, by concept: ``records`` (the records and classes every part shares), ``rules`` (a
rules file, and one pair's checks under it), ``pairing`` (two sides read, their points paired and
compared) and ``verdict`` (the gate's verdict, summaries and JSON form). Every public name is
importable from ``cgbench.analysis.compare`` itself.
"""

from __future__ import annotations

from cgbench.analysis.compare.pairing import (
    DIFFERENCES_SHOWN,
    compare_paths,
    config_differences,
    load_side,
    match_key,
    parse_pair_by,
    short_labels,
    uncommitted_warning,
)
from cgbench.analysis.compare.records import (
    CHANGED,
    CLASS_TEXT,
    CLASSES,
    DEFAULT_FAIL_ON,
    FAILED,
    IMPROVED,
    MISSING,
    REGRESSED,
    SAME,
    SEVERITY,
    SKIPPED,
    WITHIN,
    WORST_SHOWN,
    Comparison,
    Delta,
    Point,
    PointResult,
    Rule,
    is_number,
    severity,
)
from cgbench.analysis.compare.rules import (
    CONFIG_IGNORED,
    CONFIG_REPORTED,
    GOODPUT,
    HEALTH,
    HEALTH_RULE,
    NO_SLO,
    RULE_FIELDS,
    UNEQUAL,
    compare_docs,
    config_changes,
    default_rules_path,
    deterministic_pair,
    flatten,
    health_changes,
    judge,
    load_rules,
    plain_config,
    trend,
)
from cgbench.analysis.compare.verdict import (
    class_text,
    comparison_from_dict,
    health_summary,
    parse_fail_on,
    to_dict,
    verdict,
)

__all__ = [
    "FAILED",
    "MISSING",
    "REGRESSED",
    "CHANGED",
    "IMPROVED",
    "WITHIN",
    "SAME",
    "SKIPPED",
    "SEVERITY",
    "CLASSES",
    "DEFAULT_FAIL_ON",
    "CLASS_TEXT",
    "WORST_SHOWN",
    "severity",
    "is_number",
    "Rule",
    "Point",
    "Delta",
    "PointResult",
    "Comparison",
    "RULE_FIELDS",
    "CONFIG_IGNORED",
    "CONFIG_REPORTED",
    "default_rules_path",
    "load_rules",
    "flatten",
    "trend",
    "judge",
    "plain_config",
    "deterministic_pair",
    "config_changes",
    "HEALTH",
    "GOODPUT",
    "NO_SLO",
    "UNEQUAL",
    "HEALTH_RULE",
    "health_changes",
    "compare_docs",
    "load_side",
    "match_key",
    "parse_pair_by",
    "config_differences",
    "DIFFERENCES_SHOWN",
    "short_labels",
    "uncommitted_warning",
    "compare_paths",
    "health_summary",
    "parse_fail_on",
    "class_text",
    "verdict",
    "to_dict",
    "comparison_from_dict",
]
