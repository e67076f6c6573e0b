"""The JSON Schemas of every document cgbench writes, by kind, and their committed copies.

``cgbench.results.schema`` builds the result document's and the state file's; this module adds the
sweep index (``sweep.json``, ``cgbench.analysis.sweep.folder``) and the advise report
(``cgbench.analysis.advise.report``). ``scripts/json_schemas.py`` writes them to ``cgbench/schemas/``
(shipped in the wheel; ``cgbench schema KIND`` prints one) and a test fails when a committed file
differs from what this module generates. docs/schema.md says how they are versioned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cgbench.analysis.advise.report import HEADLINE as ADVISE_HEADLINE
from cgbench.analysis.advise.report import REPORT_KIND
from cgbench.analysis.baselines import KINDS as BASELINE_KINDS
from cgbench.analysis.sweep.folder import DONE, FAILED, HEADLINE, INDEX_KIND, PENDING
from cgbench.results import schema as base
from cgbench.results.names import metric
from cgbench.results.schema import (
    BOOLEAN,
    DRAFT,
    INTEGER,
    NUMBER,
    PROVENANCE_REQUIRED,
    STRING,
    STRINGS,
    nullable,
    provenance_properties,
    record,
    schema_id,
)

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"  # cgbench/schemas, inside the package
SWEEP_STATUSES = ("running", "complete", "failed", "incomplete", "interrupted", "submitted")


def schema_path(kind: str) -> Path:
    return SCHEMA_DIR / f"{kind}.schema.json"


def _headline(names: tuple[str, ...], *, every: bool) -> dict[str, Any]:
    """A headline record (dotted metric names as keys, as the sweep index and the advise report
    copy them): each key's type is its metric's (via the result schema's ``$defs``)."""
    props = {}
    for name in names:
        m = metric(name)
        if m is None:
            raise TypeError(f"headline metric {name!r} is not registered")
        props[name] = base.metric_schema(m)
        if every:  # the advise report writes every headline key, null where the run has none
            props[name] = nullable(props[name])
    return record(props, props if every else ())


def _slurm_record() -> dict[str, Any]:
    """A SLURM sweep's submissions (``cgbench.analysis.sweep.slurm``): each array task's id and the
    files of its points, what a ``--resume`` adopts."""
    task = {"type": "array", "prefixItems": [STRING, STRINGS], "minItems": 2, "maxItems": 2}
    submission = record({"folder": STRING, "submitted_at": STRING, "points_per_task": INTEGER,
                         "max_array_size": INTEGER, "seconds": NUMBER, "adopted": BOOLEAN,
                         "tasks": {"type": "array", "items": task}}, ("folder", "tasks"))
    return record({"settings": {"type": "object", "description": "the --slurm settings it was submitted with"},
                   "parallelism": nullable(INTEGER), "submissions": {"type": "array", "items": submission}},
                  ("settings", "submissions"), description="the SLURM submissions (--executor slurm)")


def sweep_schema() -> dict[str, Any]:
    """``sweep.json``: the index of a sweep folder."""
    point = record({
        "index": INTEGER, "overrides": STRINGS, "params": {"type": "object", "additionalProperties": STRING},
        "file": STRING, "status": {"enum": [DONE, FAILED, PENDING]}, "reused": BOOLEAN, "wall_s": NUMBER,
        "error": nullable(STRING), "metrics": _headline(HEADLINE, every=False),
        "fingerprint": nullable(STRING),
        "health": {**nullable(STRINGS), "description": "the codes of the point's warnings (its health flags); "
                   "[] healthy, null when it did not finish"},
    }, ("index", "overrides", "file", "status"))
    props = provenance_properties()
    props.update({
        "kind": {"const": INDEX_KIND}, "name": STRING, "updated_at": STRING,
        "status": {"enum": list(SWEEP_STATUSES)},
        "axes": {"type": "object", "additionalProperties": STRINGS},
        "axis_sources": {"type": "object", "additionalProperties": STRING},
        "repeat": INTEGER, "jobs": INTEGER, "executor": STRING, "pid": INTEGER, "host": STRING,
        "counts": record({s: INTEGER for s in (DONE, FAILED, PENDING)}, (DONE, FAILED, PENDING)),
        "points": {"type": "array", "items": point},
        "stale": {"type": "string", "description": "set on reading an index a killed sweep left"},
        "warnings": {**STRINGS, "description": "known before the sweep ran: points whose gating is off and why, "
                     "points that differ only in a policy and run the same steps"},
        "slurm": _slurm_record(),
    })
    doc = {"$schema": DRAFT, "$id": schema_id("sweep"), "title": "cgbench sweep index (sweep.json)"}
    doc.update(record(props, (*PROVENANCE_REQUIRED, "kind", "name", "status", "counts", "points")))
    return doc


def advise_schema() -> dict[str, Any]:
    """The report of ``cgbench advise`` (``advise.json``)."""
    estimate = {"type": "object", "additionalProperties": {"type": ["number", "boolean"]}}
    graphs = {"type": "array", "items": {"type": "array", "items": INTEGER, "minItems": 3, "maxItems": 3}}
    args = nullable({"type": "object", "additionalProperties": {"type": ["integer", "string", "boolean"]}})
    metrics = {"anyOf": [{"$ref": "#/$defs/metrics"}, record(
        {"outcome": {"const": "failed"}, "diagnosis": STRING}, ("outcome", "diagnosis"))]}
    gating = nullable(base.gating_schema())
    candidate = record({
        "rank": INTEGER, "name": STRING, "space": STRING, "origin": STRING, "feasible": BOOLEAN,
        "violations": STRINGS, "num_graphs": INTEGER, "objective": nullable(NUMBER), "estimate": estimate,
        "megatron_args": args, "megatron_command": nullable(STRING), "overrides": STRINGS, "graphs": graphs,
        "reused": BOOLEAN, "gating": gating, "metrics": metrics,
    }, ("rank", "name", "feasible", "num_graphs", "overrides", "graphs", "metrics"))
    launch_change = nullable(record({
        "command": STRING, "args": args, "add": STRINGS, "remove": STRINGS, "against": STRING},
        ("command", "args", "add", "remove", "against"),
        description="the recommended Megatron graph arguments and what to add to and remove from a launch line"))
    headline = _headline(ADVISE_HEADLINE, every=True)
    side = record({"objective": nullable(NUMBER), "metrics": headline}, ("objective", "metrics"))
    check = record({"check": STRING, "overrides": STRINGS, "same_as_search": BOOLEAN, "recommended": side,
                    "default": side}, ("check", "recommended", "default"), extra=True)
    props = provenance_properties()
    props.update({
        "kind": {"const": REPORT_KIND}, "overrides": STRINGS,
        "objective": record({"name": STRING, "metric": STRING, "direction": {"enum": ["max", "min"]},
                             "unit": STRING}, ("name", "metric", "direction")),
        "budgets": {"type": "object", "additionalProperties": nullable(NUMBER)},
        "slo": {"type": "array", "items": {"type": "object"}},
        "demand": record({"steps": INTEGER, "distinct_shapes": INTEGER}, ("steps", "distinct_shapes")),
        "runs": record({"ran": INTEGER, "reused": INTEGER}, ("ran", "reused")),
        "recommended": nullable(record({
            "name": STRING, "space": STRING, "num_graphs": INTEGER, "graphs": graphs, "all_prefills": BOOLEAN,
            "overrides": STRINGS, "explicit_overrides": STRINGS, "megatron_args": args,
            "megatron_command": nullable(STRING), "megatron_line": launch_change,
            "megatron_args_from": nullable(STRING), "estimate": estimate, "gating": gating,
            "metrics": metrics}, ("name", "num_graphs", "graphs", "metrics"))),
        "improvement": nullable({"type": "object"}),
        "default": record({"name": STRING, "num_graphs": INTEGER, "rank": INTEGER, "feasible": BOOLEAN,
                           "violations": STRINGS, "estimate": estimate, "gating": gating, "metrics": metrics},
                          ("name", "num_graphs", "metrics")),
        "baselines": {"type": "array", "items": record({
            "baseline": {"enum": list(BASELINE_KINDS)}, "name": STRING, "label": STRING, "overrides": STRINGS,
            "objective": nullable(NUMBER), "recommended_better_by_fraction": nullable(NUMBER), "gating": gating,
            "metrics": headline}, ("baseline", "name", "label", "overrides", "objective",
                                   "recommended_better_by_fraction", "metrics"),
            description="the lines users run, simulated on the workload (docs/advise.md)")},
        "baseline_notes": STRINGS,
        "eager_free": nullable({"type": "object"}),
        "megatron": nullable(candidate),
        "explicit": nullable(candidate),
        "pareto": STRINGS,
        "robustness": {"type": "array", "items": check},
        "notes": STRINGS,
        "candidates": {"type": "array", "items": candidate},
        "sensitivity": base.sensitivity_schema(),
    })
    doc = {"$schema": DRAFT, "$id": schema_id("advise"), "title": "cgbench advise report (advise.json)"}
    doc.update(record(props, (*PROVENANCE_REQUIRED, "kind", "objective", "recommended", "default",
                              "candidates")))
    result_defs = base.result_schema()["$defs"]
    doc["$defs"] = {"metrics": result_defs["metrics"], "summary": result_defs["summary"]}
    return doc


def _megatron_log_builders() -> dict[str, Callable[[], dict[str, Any]]]:
    from cgbench.analysis.megatron_log.schema import calibration_schema, explain_schema

    return {"megatron-log": explain_schema, "log-calibration": calibration_schema}


BUILDERS: dict[str, Callable[[], dict[str, Any]]] = {
    "result": base.result_schema,
    "sweep": sweep_schema,
    "advise": advise_schema,
    "state": base.state_schema,
    **_megatron_log_builders(),
}
KINDS = tuple(BUILDERS)


def render(kind: str) -> str:
    """The committed text of ``kind``'s schema (2-space JSON, a final newline)."""
    return json.dumps(BUILDERS[kind](), indent=2, ensure_ascii=False) + "\n"


def document_kind(doc: Any) -> str | None:
    """Which of ``KINDS`` a parsed JSON document is, by its content; None for anything else."""
    if not isinstance(doc, dict):
        return None
    kind = doc.get("kind")
    if kind == INDEX_KIND:
        return "sweep"
    if kind == REPORT_KIND:
        return "advise"
    from cgbench.analysis.megatron_log.schema import document_kind as megatron_log_kind

    found = megatron_log_kind(doc)
    if found is not None:
        return found
    if kind is None and "schema_version" in doc and "metrics" in doc:
        return "result"
    from cgbench.results.state_file import STATE_KEYS

    if kind is None and set(STATE_KEYS["required"]) <= set(doc) <= set(STATE_KEYS["top"]):
        return "state"
    return None
