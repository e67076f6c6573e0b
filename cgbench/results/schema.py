"""JSON Schemas (draft 2020-12) of the documents cgbench writes, generated from what defines them:
the metric registry (``cgbench.results.names``) for a result's ``metrics``, the typed configs
(``cgbench.config.schema``) for its ``config``, and the state-file format
(``cgbench.results.state_file``).

This module builds the result document's and the state file's schemas and the pieces others share;
``cgbench.analysis.schemas`` adds the sweep index and the advise report, and writes them all under
``cgbench/schemas/`` (shipped in the wheel, printed by ``cgbench schema``).

Versioning: a schema's ``$id`` names the documents' ``schema_version`` (``SCHEMA_VERSION``). A key
added within a version is optional in the schema when documents of that version written before it
lack it (``ADDED_SUMMARY_FIELDS``); a change that breaks a reader (a key removed, renamed or retyped)
raises ``SCHEMA_VERSION``, which the loaders check.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from cgbench.config.schema import MOE_KEYS, BenchConfig, CGConfig, EngineConfig, ModelConfig
from cgbench.results.document import SCHEMA_VERSION
from cgbench.results.names import (
    ALL_SUMMARY_FIELDS,
    FLAG,
    ITERATIONS,
    METRICS,
    REQUESTS,
    SUMMARY_FIELDS,
    TEXT,
    TOKENS,
    Metric,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# summary fields added to schema_version 1 after its first results: optional, so those still validate
ADDED_SUMMARY_FIELDS = ("min", "std", "p95")
# config keys added to schema_version 1 after its first results (by section): optional, so results written
# before them still validate (they ran at the key's default)
ADDED_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "model": MOE_KEYS,
    "engine": ("megatron_rules", "batch_invariant", "ssm_chunk_alignment", "handoff_pinning", "handoff_release_steps",
               "dp_size", "dp_routing", "dp_routing_alpha"),
}
# metrics whose JSON type the unit does not say
_METRIC_TYPES: dict[str, dict[str, Any]] = {"max_cg_wait_request": {"type": ["integer", "null"]},
                                           "goodput_req_s": {"type": ["number", "null"]},
                                           "goodput_fraction": {"type": ["number", "null"]},
                                           "peak_output_throughput_tok_s": {"type": ["number", "null"]}}
_WHOLE_UNITS = (ITERATIONS, TOKENS, REQUESTS)  # scalar metrics in these units are integers

STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
NUMBER: dict[str, Any] = {"type": "number"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
STRINGS: dict[str, Any] = {"type": "array", "items": STRING}


def schema_id(kind: str) -> str:
    """The ``$id`` of ``kind``'s schema at the current ``SCHEMA_VERSION``."""
    return f"urn:cgbench:schema:{kind}:v{SCHEMA_VERSION}"


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def record(properties: dict[str, Any], required: typing.Iterable[str] = (), *, extra: Any = False,
           description: str = "") -> dict[str, Any]:
    """An object schema: ``properties``, the ``required`` keys (in the properties' order) and what
    other keys may hold (``extra``: False for none)."""
    req = set(required)
    out: dict[str, Any] = {"type": "object"}
    if description:
        out["description"] = description
    out["properties"] = properties
    out["required"] = [k for k in properties if k in req]
    out["additionalProperties"] = extra
    return out


def provenance_properties() -> dict[str, Any]:
    """The keys ``cgbench.results.document.provenance`` puts at the top of every document."""
    return {
        "schema_version": {"const": SCHEMA_VERSION, "description": "the document format's version"},
        "cgbench_version": STRING,
        "git_sha": nullable(STRING),
        "git_dirty": nullable(BOOLEAN),
        "git_diff_hash": nullable(STRING),
        "created_at": {"type": "string", "description": "ISO 8601, UTC"},
    }


PROVENANCE_REQUIRED = ("schema_version", "cgbench_version", "created_at")


# ---------------------------------------------------------------------------------------------- configs


def type_schema(tp: Any, where: str) -> dict[str, Any]:
    """The JSON Schema of a config field's type hint (what ``dataclasses.asdict`` writes for it)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"{where}: unsupported union {tp!r}")
        inner = type_schema(kinds[0], where)
        return nullable(inner) if type(None) in args else inner
    if origin in (list, tuple) or tp in (list, tuple):
        return {"type": "array", "items": type_schema(args[0], where)} if args else {"type": "array"}
    if origin is dict or tp is dict:
        return {"type": "object", "additionalProperties": type_schema(args[1], where) if args else True}
    if dataclasses.is_dataclass(tp):
        return dataclass_schema(tp)  # type: ignore[arg-type]
    simple = {bool: BOOLEAN, int: INTEGER, float: NUMBER, str: STRING}
    if tp in simple:
        return dict(simple[tp])
    raise TypeError(f"{where}: no JSON Schema for {tp!r}")


def dataclass_schema(cls: type, *, required: bool = True, extra: Any = False) -> dict[str, Any]:
    """An object with ``cls``'s fields (all required when ``required``: ``asdict`` writes every one)."""
    hints = typing.get_type_hints(cls)
    props = {f.name: type_schema(hints[f.name], f"{cls.__name__}.{f.name}") for f in dataclasses.fields(cls)}
    return record(props, props if required else (), extra=extra)


def config_schema() -> dict[str, Any]:
    """A result's ``config``: ``BenchConfig`` as ``asdict`` writes it. ``policy`` may hold option
    sections of installed plug-in policies besides the built-ins' (objects)."""
    out = dataclass_schema(BenchConfig)
    for section, keys in ADDED_CONFIG_KEYS.items():
        part = out["properties"][section]
        part["required"] = [k for k in part["required"] if k not in keys]
    policy = out["properties"]["policy"]
    policy["additionalProperties"] = {"type": "object", "description": "a plug-in policy's options"}
    return out


# ---------------------------------------------------------------------------------------------- metrics


def summary_schema() -> dict[str, Any]:
    """A summary: every field it can hold (metrics.percentiles adds p1 ... p75), its statistics null when
    ``count`` is 0 (there is no such value)."""
    props = {f: (INTEGER if f == "count" else {"type": ["number", "null"]}) for f in ALL_SUMMARY_FIELDS}
    return record(props, [f for f in SUMMARY_FIELDS if f not in ADDED_SUMMARY_FIELDS],
                  description="a summary: count, min, mean, std (population), nearest-rank percentiles (p50, p90, "
                  "p95, p99 and those metrics.percentiles adds), max; null statistics when count is 0")


def metric_schema(m: Metric) -> dict[str, Any]:
    """One metric's value, from its registry entry (unit and kind). A ratio registered in a whole unit
    (tokens per prefill) is a number: an average of counts is not a count."""
    from cgbench.results.export_schema import RATIO_METRICS

    if m.summary:
        out: dict[str, Any] = {"$ref": "#/$defs/summary"}
    elif m.keyed:
        out = {"type": "object", "additionalProperties": INTEGER}
    elif m.name in _METRIC_TYPES:
        out = dict(_METRIC_TYPES[m.name])
    elif m.per_rank:
        out = {"type": "array", "items": NUMBER}
    elif m.unit == TEXT:
        out = dict(STRING)
    elif m.unit == FLAG:
        out = dict(BOOLEAN)
    else:
        out = dict(INTEGER if m.unit in _WHOLE_UNITS and m.name not in RATIO_METRICS else NUMBER)
    unit = "" if m.unit in (TEXT, FLAG) else f" [{m.unit}]"
    return {**out, "description": f"{m.description}{unit}"}


def _always_there(m: Metric) -> bool:
    return not (m.needs_clock or m.needs_ep or m.needs_prefix or m.needs_spec or m.needs_dp or m.needs_open_loop)


def metrics_schema() -> dict[str, Any]:
    """A result's ``metrics``: every registered metric, no other key; nested records (``requests``,
    ``ep``) for dotted names. Time metrics (a backend with a clock) and EP metrics are optional."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for m in METRICS:
        head, dot, tail = m.name.partition(".")
        if dot:
            group = nested.setdefault(head, {"properties": {}, "always": True})
            group["properties"][tail] = metric_schema(m)
            group["always"] = group["always"] and _always_there(m)
            if head not in top:
                top[head] = None  # placeholder: keeps the registry's order
            continue
        top[m.name] = metric_schema(m)
        if _always_there(m):
            required.append(m.name)
    for head, group in nested.items():
        top[head] = record(group["properties"], group["properties"])
        if group["always"]:
            required.append(head)
    return record(top, required, description="the run's metrics (cgbench docs metrics); unknown keys are errors")


# ---------------------------------------------------------------------------------------------- result


def _step_record() -> dict[str, Any]:
    props = {"step": INTEGER, "t_s": NUMBER, "dt_s": NUMBER,
             "real": {"type": "array", "items": INTEGER, "minItems": 1}, "graph": nullable(
                 {"type": "array", "items": INTEGER}), "eager_reason": nullable(STRING),
             "admitted": {"type": "array"}, "deferred": {}, "queue_len": INTEGER, "paused": INTEGER,
             "rank": INTEGER}
    return record(props, ("step", "real"), extra=True, description="one step of the trace (--trace)")


def _request_record() -> dict[str, Any]:
    ints = ("id", "prompt_tokens", "output_tokens", "generated", "arrival_step", "first_admit_step",
            "first_token_step", "finish_step", "chunks", "deferrals", "max_cg_wait_iters", "evictions", "pauses")
    props: dict[str, Any] = {k: INTEGER for k in ints}
    props.update({"outcome": STRING, "fail_reason": nullable(STRING), "arrival_s": NUMBER, "first_token_s": NUMBER,
                  "finish_s": NUMBER, "token_ids": {"type": "array", "items": INTEGER}})
    return record(props, ("id",), extra=True, description="one request (--requests)")


def _deferrals() -> dict[str, Any]:
    from cgbench.results.deferrals import DEFERRAL_COLUMNS

    columns = {"type": "array", "items": {"enum": list(DEFERRAL_COLUMNS)}}
    rows = {"type": "array", "items": {"type": "array", "items": INTEGER, "minItems": len(DEFERRAL_COLUMNS),
                                       "maxItems": len(DEFERRAL_COLUMNS)}}
    return record({"columns": columns, "rows": rows}, ("columns", "rows"),
                  description="every deferred request's waits, one row per request by id (what cgbench explain "
                              "reads); columns: " + ", ".join(DEFERRAL_COLUMNS))


def _trace_summary() -> dict[str, Any]:
    counts = ("rows", "requests", "prompt_tokens", "output_tokens", "max_prompt_tokens", "max_request_tokens")
    props: dict[str, Any] = {k: INTEGER for k in counts}
    props.update({k: nullable(STRING) for k in ("file", "format", "format_how", "arrival_unit", "arrival_unit_how",
                                                "note")})
    props.update({"window": {"type": ["object", "null"]}, "time_scale": nullable(NUMBER), "span_s": NUMBER,
                  "offered_req_s": nullable(NUMBER),
                  "prefix_blocks": record({"block_tokens": INTEGER, "blocks": INTEGER, "distinct_blocks": INTEGER,
                                           "reused_prefix_tokens": INTEGER, "reused_prefix_share": NUMBER},
                                          ("block_tokens", "blocks", "distinct_blocks"))})
    return record(props, ("file", "format", "requests"), extra=True,
                  description="the replayed trace (workload=trace): its format and arrival unit and how each was "
                              "decided, its counts, and its prefix blocks where the format has them")


def sensitivity_schema() -> dict[str, Any]:
    """The ``sensitivity`` block of ``run``/``sweep``/``advise --sensitivity`` (cgbench.analysis.sensitivity)."""
    numbers = {"type": "object", "additionalProperties": NUMBER}
    sides = {"type": "array", "items": NUMBER}
    setting = {"type": ["number", "string"]}  # a number, or a choice (model.padded_slot_cost)
    metric_row = record({"a": sides, "b": sides, "winner": {"type": "array", "items": {"enum": ["a", "b", "tie"]}},
                         "flips": BOOLEAN}, ("a", "b", "winner", "flips"))
    parameter = record({"key": STRING, "values": {"type": "array", "items": setting}, "point": setting,
                        "effect": STRING,
                        "metrics": {"type": "object", "additionalProperties": metric_row}}, ("key", "values", "point"))
    even = record({"metric": STRING, "host_op_us": nullable(NUMBER), "below": STRING, "above": STRING,
                   "eager_graphed_ratio": nullable(NUMBER)}, ("metric", "host_op_us", "below", "above"))
    kind = {**STRING, "description": "gating_off, launch_line, megatron_default, no_graphs or default_grid "
             "(cgbench.analysis.baselines)"}
    comparison = record({"b": STRING, "baseline": kind, "name": STRING, "overrides": STRINGS, "same_steps": BOOLEAN,
                         "point": record({"a": numbers, "b": numbers}, ("a", "b")),
                         "point_winner": {"type": "object", "additionalProperties": STRING},
                         "parameters": {"type": "array", "items": parameter}, "flips": STRINGS,
                         "break_even": {"type": "array", "items": even}},
                        ("b", "point", "point_winner", "parameters", "flips", "break_even"))
    described = record({"key": STRING, "point": setting, "low": setting, "high": setting, "source": STRING},
                       ("key", "point", "low", "high", "source"))
    return {**record({"method": {"enum": ["repriced", "rerun"]}, "why_rerun": nullable(STRING),
                      "eager_graphed_ratio": nullable(NUMBER),
                      "parameters": {"type": "array", "items": described},
                      "comparisons": {"type": "array", "items": comparison},
                      "notes": {**STRINGS, "description": "the baselines not compared, and why"}},
                     ("method", "why_rerun", "eager_graphed_ratio", "parameters", "comparisons")),
            "description": "the run re-priced over the cost model's uncertain parameters (cgbench run --sensitivity)"}


def gating_schema() -> dict[str, Any]:
    """Whether the run gated admission and why (``cgbench.engine.gating``); results written before it
    lack it (they hold ``metrics.gating_active`` only)."""
    return record({"active": BOOLEAN, "reason": STRING}, ("active", "reason"),
                  description="metrics.gating_active and its reason: every failing condition, or what gates")


def result_schema() -> dict[str, Any]:
    """The result document of ``cgbench run`` (and of every sweep point)."""
    props = provenance_properties()
    props.update({
        "overrides": STRINGS,
        "labels": {"type": "object", "additionalProperties": {"type": ["string", "boolean", "null"]}},
        "config": {"$ref": "#/$defs/config"},
        "environment": {"type": "object", "additionalProperties": nullable(STRING)},
        "metrics": {"$ref": "#/$defs/metrics"},
        "warnings": {"type": "array", "items": record({"code": STRING, "message": STRING}, ("message",),
                                                      extra=True)},
        "graph_usage": {"type": "array", "items": record(
            {"graph": {"type": "array", "items": INTEGER, "minItems": 3, "maxItems": 3}, "hits": INTEGER,
             "real_tokens": INTEGER, "padded_tokens": INTEGER}, ("graph", "hits", "real_tokens", "padded_tokens"))},
        "capture": {"type": "object"},
        "backend_report": {"type": "object"},
        "steps": {"type": "array", "items": _step_record()},
        "requests": {"type": "array", "items": _request_record()},
        "trace": _trace_summary(),
        "deferrals": _deferrals(),
        "wall_s": {**NUMBER, "description": "wall-clock seconds of the run, recorded by scripts/gpu_check.py"},
        "sensitivity": sensitivity_schema(),
        "gating": gating_schema(),
    })
    doc = {"$schema": DRAFT, "$id": schema_id("result"), "title": "cgbench result document"}
    doc.update(record(props, (*PROVENANCE_REQUIRED, "overrides", "config", "environment", "metrics")))
    doc["$defs"] = {"config": config_schema(), "metrics": metrics_schema(), "summary": summary_schema()}
    return doc


# ---------------------------------------------------------------------------------------------- state


def state_schema() -> dict[str, Any]:
    """The state file of ``cgbench schedule`` (``cgbench.results.state_file``): it carries no version of
    its own (its keys are closed), so its schema's ``$id`` names the version of the code that reads it."""
    from cgbench.results.state_file import STATE_KEYS

    engine = dataclass_schema(EngineConfig, required=False)
    engine["properties"]["free_blocks"] = {**INTEGER, "minimum": 0, "description": "default: the whole pool"}
    cg = dataclass_schema(CGConfig, required=False)
    model = dataclass_schema(ModelConfig, required=False)
    model["required"] = ["kind"]
    count = {**INTEGER, "minimum": 0}
    props: dict[str, Any] = {
        "description": STRING,
        "model": model,
        "engine": engine,
        "cg": cg,
        "policy": {"type": "object", "additionalProperties": {"type": "object"},
                   "description": "policy option sections (the policy is chosen with --policy)"},
        "batch": record({k: count for k in STATE_KEYS["batch"]}, ("decode",)),
        "chunked_request": nullable(record({k: count for k in STATE_KEYS["chunked_request"]},
                                           STATE_KEYS["chunked_request"])),
        "queue": {"type": "array", "items": record({k: count for k in STATE_KEYS["queue"]}, ("id",))},
        "prefix_cache": {"type": "object", "description": "engine.prefix_caching: the prefix cache "
                         "(PrefixCache.to_state: clock, free, blocks, map, tables, hashes, mamba)"},
    }
    missing = set(STATE_KEYS["top"]) ^ set(props)
    if missing:
        raise TypeError(f"the state schema and cgbench.results.state_file disagree on {sorted(missing)}")
    doc = {"$schema": DRAFT, "$id": schema_id("state"), "title": "cgbench schedule state file"}
    doc.update(record(props, STATE_KEYS["required"]))
    return doc
