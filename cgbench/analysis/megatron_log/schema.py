"""The JSON Schemas of the two documents a Megatron log gives: ``cgbench explain --megatron-log``'s
document (kind ``megatron-log``) and ``cgbench calibrate --megatron-log``'s calibration file
(kind ``log-calibration``). ``cgbench.analysis.schemas`` registers them."""

from __future__ import annotations

from typing import Any

from cgbench.analysis.megatron_log.explain import KIND
from cgbench.backends.sim.log_calibration import FITTABLE, LOG_CALIBRATION_SCHEMA
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

SHAPE = {"type": "array", "items": INTEGER, "minItems": 3, "maxItems": 3}
FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
COUNT = {"type": "integer", "minimum": 0}


def _run() -> dict[str, Any]:
    return record({"steps": COUNT, "first_step": INTEGER, "last_step": INTEGER}, ("steps", "first_step", "last_step"))


def explain_schema() -> dict[str, Any]:
    """``cgbench explain --megatron-log LOG --format json``."""
    shape_row = record({"real": SHAPE, "steps": COUNT, "mean_ms": NUMBER, "detail": STRING},
                       ("real", "steps", "mean_ms", "detail"))
    reason = record({"steps": COUNT, "time_ms": NUMBER, "distinct_shapes": COUNT,
                     "shapes": {"type": "array", "items": shape_row}}, ("steps", "time_ms", "shapes"))
    what_if = record({
        "label": STRING, "graphs": COUNT, "gating": BOOLEAN, "chunked_prefill": BOOLEAN, "eager_steps": COUNT,
        "eager_step_fraction": FRACTION, "eager_steps_saved": COUNT, "eager_steps_added": COUNT,
        "eager_time_saved_ms": NUMBER, "prompt_tokens_moved": COUNT, "requests_deferred": COUNT,
        "time_change_ms": nullable(NUMBER), "time_change_fraction": nullable(NUMBER), "note": STRING,
    }, ("label", "graphs", "gating", "eager_steps", "eager_steps_saved", "eager_steps_added", "time_change_ms"))
    rank = record({
        "rank": INTEGER, "steps": COUNT, "first_step": INTEGER, "last_step": INTEGER, "interval": nullable(INTEGER),
        "sampling": STRING, "restarts": COUNT, "idle_lines": COUNT, "graphed_steps": COUNT, "eager_steps": COUNT,
        "eager_step_fraction": FRACTION, "step_time_ms": NUMBER, "eager_time_ms": NUMBER, "graphed_time_ms": NUMBER,
        "eager_time_fraction": FRACTION, "decode_steps": COUNT, "prefill_steps": COUNT, "mixed_steps": COUNT,
        "kinds": {"type": "object", "additionalProperties": COUNT},
        "eager_by_reason": {"type": "object", "additionalProperties": reason},
        "longest_eager_streak": _run(),
        "deferral_like_waits": record({"steps": COUNT, "longest": _run()}, ("steps", "longest")),
        "max_requests": COUNT, "max_waiting": COUNT, "max_paused": COUNT, "finished": INTEGER, "evicted": INTEGER,
        "clock": STRINGS, "distinct_shapes": COUNT, "folded_steps": COUNT, "graphs_replayed": COUNT,
        "spec": record({"accepted": COUNT, "proposed": COUNT, "steps": COUNT, "acceptance": NUMBER},
                       ("accepted", "proposed", "steps", "acceptance")),
        "what_if": {"type": "array", "items": what_if},
    }, ("rank", "steps", "graphed_steps", "eager_steps", "eager_step_fraction", "eager_time_ms", "eager_by_reason",
        "longest_eager_streak", "deferral_like_waits", "what_if"))
    log = record({
        "path": STRING, "bytes": COUNT, "gzip": BOOLEAN, "lines": COUNT, "step_lines": COUNT, "other_lines": COUNT,
        "malformed_lines": COUNT,
        "malformed_examples": {"type": "array", "items": record({"line": INTEGER, "text": STRING}, ("line", "text"))},
        "truncated_last_line": BOOLEAN, "formats": {"type": "object", "additionalProperties": COUNT},
        "ranks": {"type": "array", "items": INTEGER}, "capture_graphs": COUNT, "arguments": COUNT,
        "emitted": nullable({"type": "object", "additionalProperties": STRING}),
    }, ("path", "lines", "step_lines", "other_lines", "malformed_lines", "truncated_last_line", "formats", "ranks"))
    flag = record({"code": STRING, "message": STRING}, ("code", "message"))
    props = provenance_properties()
    props.update({
        "kind": {"const": KIND}, "log": log, "config": nullable(STRING),
        "grid": record({"source": {"enum": ["config", "capture", "replayed"]}, "description": STRING,
                        "graphs": COUNT, "strict": BOOLEAN, "strict_source": STRING},
                       ("source", "description", "graphs", "strict", "strict_source")),
        "pricing": nullable(STRING), "flags": {"type": "array", "items": flag},
        "ranks": {"type": "array", "items": rank}, "notes": STRINGS,
    })
    doc = {"$schema": DRAFT, "$id": schema_id("megatron-log"),
           "title": "cgbench explain --megatron-log: a Megatron step log in cgbench's terms"}
    doc.update(record(props, (*PROVENANCE_REQUIRED, "kind", "log", "grid", "flags", "ranks")))
    return doc


def calibration_schema() -> dict[str, Any]:
    """The file ``cgbench calibrate --megatron-log`` writes (``hardware.host_calibration`` reads it)."""
    key = {"enum": list(FITTABLE)}
    props = {
        "schema": {"const": LOG_CALIBRATION_SCHEMA}, "hardware": STRING,
        "model": {"type": "object", "additionalProperties": STRING}, "host_profile": STRING,
        "fitted": {"type": "object", "propertyNames": key, "additionalProperties": {"type": "number",
                                                                                     "exclusiveMinimum": 0}},
        "kept": {"type": "object", "propertyNames": key, "additionalProperties": STRING},
        "uncertainty": {"type": "object", "propertyNames": key, "additionalProperties": record(
            {"sigma_rel": NUMBER, "low": NUMBER, "high": NUMBER}, ("low", "high"))},
        "source": {"type": "object"}, "residuals": {"type": "object"}, "notes": STRINGS, "created_at": STRING,
    }
    doc = {"$schema": DRAFT, "$id": schema_id("log-calibration"),
           "title": "cgbench calibrate --megatron-log: a cost model fitted to a production log"}
    doc.update(record(props, ("schema", "hardware", "model", "fitted")))
    return doc


def document_kind(doc: dict[str, Any]) -> str | None:
    """``megatron-log`` or ``log-calibration`` for those documents, else None."""
    if doc.get("kind") == KIND:
        return "megatron-log"
    if doc.get("schema") == LOG_CALIBRATION_SCHEMA:
        return "log-calibration"
    return None

