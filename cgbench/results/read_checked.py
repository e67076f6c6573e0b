"""Typed reading of the documents cgbench writes: a result, a sweep index, an advise report is checked
against its published schema (``cgbench/schemas/<kind>.schema.json``, the files ``cgbench schema``
prints) when it is read, so a hand-edited or truncated document is one line naming the file and the
field (a JSON pointer), never a TypeError or KeyError deep in ``explain``, ``report``, ``compare`` or
``plot``.

The checker covers the part of JSON Schema draft 2020-12 the published schemas use (``type``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``prefixItems``, ``anyOf``,
``const``, ``enum``, bounds, ``propertyNames``, local ``$ref``): jsonschema is a development
dependency only, and the readers run from the wheel.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from cgbench.errors import ConfigError

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
RESULT, SWEEP, ADVISE = "result", "sweep", "advise"


@functools.cache
def published_schema(kind: str) -> dict[str, Any]:
    """The committed schema of ``kind`` (parsed once)."""
    return json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text(encoding="utf-8"))


def _pointer(parts: tuple[str, ...]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts) or "/"


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object" if isinstance(v, dict) else type(v).__name__


def _is(v: Any, t: str) -> bool:
    got = _json_type(v)
    if t == "integer":
        return got == "integer" or (got == "number" and float(v).is_integer())
    if t == "number":
        return got in ("integer", "number")
    return got == t


_WORDS = {"null": "null", "boolean": "true or false", "integer": "an integer", "number": "a number",
          "string": "a string", "array": "a list", "object": "an object"}


def _expected(schema: dict[str, Any], root: dict[str, Any]) -> str:
    """What ``schema`` accepts, in words (for an anyOf none of whose forms matched)."""
    schema = _resolved(schema, root)
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(x) for x in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_expected(s, root) for s in schema["anyOf"])
    t = schema.get("type")
    kinds = t if isinstance(t, list) else [t] if t else []
    return " or ".join(_WORDS.get(k, k) for k in kinds) or "anything"


def _resolved(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


Violation = tuple[tuple[str, ...], str]


def first_violation(value: Any, schema: dict[str, Any], root: dict[str, Any],
                    at: tuple[str, ...] = ()) -> Violation | None:
    """The first place where ``value`` breaks ``schema`` (its path, what is wrong), or None."""
    schema = _resolved(schema, root)
    if "anyOf" in schema:
        forms = [_resolved(s, root) for s in schema["anyOf"]]
        for form in forms:
            if first_violation(value, form, root, at) is None:
                break
        else:  # the form of the value's own type says best what is wrong inside it
            for form in forms:
                t = form.get("type")
                if t is not None and any(_is(value, k) for k in (t if isinstance(t, list) else [t])):
                    return first_violation(value, form, root, at)
            return at, f"must be {_expected(schema, root)}, got {_json_type(value)}"
    t = schema.get("type")
    if t is not None and not any(_is(value, k) for k in (t if isinstance(t, list) else [t])):
        return at, f"must be {_expected(schema, root)}, got {_json_type(value)}"
    if "const" in schema and value != schema["const"]:
        return at, f"must be {json.dumps(schema['const'])}, got {json.dumps(value)[:40]}"
    if "enum" in schema and value not in schema["enum"]:
        return at, f"must be {_expected(schema, root)}, got {json.dumps(value)[:40]}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        bad = _out_of_bounds(value, schema)
        if bad:
            return at, bad
    if isinstance(value, dict):
        return _object_violation(value, schema, root, at)
    if isinstance(value, list):
        return _array_violation(value, schema, root, at)
    return None


def _out_of_bounds(v: float, schema: dict[str, Any]) -> str | None:
    if "minimum" in schema and v < schema["minimum"]:
        return f"{v} is less than the minimum {schema['minimum']}"
    if "maximum" in schema and v > schema["maximum"]:
        return f"{v} is more than the maximum {schema['maximum']}"
    if "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]:
        return f"{v} must be more than {schema['exclusiveMinimum']}"
    return None


def _object_violation(value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any],
                      at: tuple[str, ...]) -> Violation | None:
    for key in schema.get("required", ()):
        if key not in value:
            return (*at, key), "is missing (required)"
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in value.items():
        if names is not None and first_violation(key, names, root) is not None:
            return (*at, key), "is not a key this object may hold"
        if key in props:
            found = first_violation(item, props[key], root, (*at, key))
        elif extra is False:
            return (*at, key), "is not a key this object may hold"
        elif isinstance(extra, dict):
            found = first_violation(item, extra, root, (*at, key))
        else:
            found = None
        if found:
            return found
    return None


def _array_violation(value: list[Any], schema: dict[str, Any], root: dict[str, Any],
                     at: tuple[str, ...]) -> Violation | None:
    if len(value) < schema.get("minItems", 0):
        return at, f"must hold at least {schema['minItems']} items, holds {len(value)}"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return at, f"must hold at most {schema['maxItems']} items, holds {len(value)}"
    head = schema.get("prefixItems", [])
    for i, item in enumerate(value):
        form = head[i] if i < len(head) else schema.get("items")
        if isinstance(form, dict):
            found = first_violation(item, form, root, (*at, str(i)))
            if found:
                return found
    return None


def check_document(doc: Any, kind: str, path: str | Path) -> Any:
    """``doc`` if it is a valid ``kind`` document by its published schema, else the ConfigError that
    names the file, the field (a JSON pointer) and what is wrong with it."""
    schema = published_schema(kind)
    found = first_violation(doc, schema, schema)
    if found is None:
        return doc
    where, what = found
    raise ConfigError(f"{path}: not a valid cgbench {kind} document: {_pointer(where)} {what} "
                      f"(cgbench schema {kind})")
