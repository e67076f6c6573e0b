"""Random command lines for the CLI fuzzer (tests/inputs/test_cli_fuzz.py), built from the config's
JSON schema (``cgbench/schemas/result.schema.json``, ``$defs/config``: every key and its type) and
the registries (every group option, every name a choice key takes).

Each key gets valid values (the registry's names, small numbers the engine runs in a moment) and
hostile ones (wrong types, 2**63, 1e308, inf, nan, Rich markup, unicode, empty); each path option
gets an odd path (unicode, ``[b]``/``[/]``, spaces, a name longer than the file system allows, a
folder, a missing parent, one of the command's own inputs). The command lines are tiny on purpose
(``workload.num_requests`` of at most 64): what is fuzzed is the handling of input, not the engine
at scale, so every example answers within the fuzzer's time bound.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from cgbench.analysis.schemas import schema_path
from cgbench.config.paths import GROUPS, group_options
from cgbench.config.registry.traces import ARRIVAL_UNITS, TRACE_FORMATS
from cgbench.config.schema import (
    ARRIVAL_PROCESSES,
    CG_KINDS,
    COST_MODELS,
    DISTRIBUTIONS,
    EP_ROUTINGS,
    KV_CORNERS,
    LENGTH_DISTS,
    MODEL_KINDS,
    MOE_DISPATCHERS,
    POLICIES,
    TORCH_DTYPES,
)

# the torch backend runs a real model: seconds a point even for a tiny one, so the fuzzer keeps to the
# simulator (the torch backend's input checks have their own tests)
SKIPPED_OPTIONS = {("backend", "torch")}
# keys whose valid values are the registry's names
CHOICES: dict[str, tuple[str, ...]] = {
    "model.kind": MODEL_KINDS,
    "cg.kind": CG_KINDS,
    "cg.distribution": DISTRIBUTIONS,
    "policy.name": POLICIES,
    "workload.arrival.process": ARRIVAL_PROCESSES,
    "workload.prompt_len.dist": LENGTH_DISTS,
    "workload.output_len.dist": LENGTH_DISTS,
    "workload.trace_format": tuple(TRACE_FORMATS),
    "workload.trace_arrival_unit": ARRIVAL_UNITS,
    "backend.name": ("sim",),
    "backend.cost_model": COST_MODELS,
    "backend.device": ("auto", "cpu", "cuda"),
    "backend.dtype": TORCH_DTYPES,
    "engine.kv_corners": KV_CORNERS,
    "engine.moe_dispatcher": MOE_DISPATCHERS,
    "engine.ep_routing": EP_ROUTINGS,
    "model.layer_pattern": ("M-M*-", "*-", "M*", "M", "*", "-", "MX", ""),
}
# keys whose valid values must stay small for the example to finish within its bound
SMALL_INTS: dict[str, tuple[int, ...]] = {
    "workload.num_requests": (1, 2, 8, 64),
    "model.pattern_repeat": (1, 2, 4),
    "engine.max_requests": (1, 2, 8, 64, 256),
    "engine.ep_size": (1, 2, 4),
    "engine.tp_size": (1, 2, 8),
}
# odd text: Rich markup, unicode, spaces, control-free oddities
ODD_TEXT = ("[b]", "[/]", "[bold red]x[/]", "é", "日本", "a b", "", "null", "~", "..", "${oops}", "x" * 300)
HOSTILE_INTS = ("0", "-1", str(2**31), str(2**63 - 1), str(2**63), str(-(2**63) - 1), str(10**30), "1.5", "abc",
                "true", "[]", "0x10")
HOSTILE_NUMBERS = ("0", "-0.0", "-1", "1e-308", "5e-324", "1e308", "1.7976931348623157e308", "inf", "-inf", "nan",
                   "abc", str(2**63), "1e999", "[1]")
HOSTILE_BOOLS = ("maybe", "2", "yes", "[b]", "")
HOSTILE_ARRAYS = ("[]", "[1,2]", "[[64,1,0]]", "[[64,1]]", "[-1]", f"[{2**63}]", "[[0,0,0]]", "[a]", "abc",
                  "[[1e308,1,0]]", "[nan]", "{}")


@cache
def config_keys() -> dict[str, tuple[str, bool]]:
    """Every leaf key of the config, from the result schema: {dotted key: (JSON type, nullable)}."""
    doc = json.loads(schema_path("result").read_text(encoding="utf-8"))
    keys: dict[str, tuple[str, bool]] = {}

    def walk(node: dict, prefix: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            for name, sub in node["properties"].items():
                walk(sub, f"{prefix}{name}.")
            return
        types = [alt.get("type") for alt in node.get("anyOf", [node])]
        concrete = [t for t in types if t != "null"] or ["string"]
        keys[prefix[:-1]] = (concrete[0], "null" in types)

    walk(doc["$defs"]["config"], "")
    return keys


def _valid_value(key: str, kind: str, nullable: bool) -> st.SearchStrategy[str]:
    if key in CHOICES:
        base = st.sampled_from(CHOICES[key])
    elif key in SMALL_INTS:
        base = st.sampled_from([str(v) for v in SMALL_INTS[key]])
    elif kind == "integer":
        base = st.sampled_from(["0", "1", "2", "4", "16", "64", "127", "128", "512", "4096"])
    elif kind == "number":
        base = st.sampled_from(["0.5", "1", "2.0", "10", "100.0", "1e3", "0.001"])
    elif kind == "boolean":
        base = st.sampled_from(["true", "false"])
    elif kind == "array":
        base = st.sampled_from(["[]", "[[64,1,0],[8,0,8]]", "[1,2,4,8]", "[16,64]"])
    else:
        base = st.sampled_from(["plain", "x1"])
    return st.one_of(base, st.just("null")) if nullable else base


def _hostile_value(kind: str) -> st.SearchStrategy[str]:
    table = {"integer": HOSTILE_INTS, "number": HOSTILE_NUMBERS, "boolean": HOSTILE_BOOLS, "array": HOSTILE_ARRAYS}
    return st.sampled_from(table.get(kind, ()) + ODD_TEXT)


@st.composite
def key_override(draw, *, allow_sweep: bool = False) -> str:
    """``key=value`` for a key of the schema (valid or hostile value), sometimes as ``+key``/``++key``
    or a key that does not exist."""
    keys = sorted(k for k in config_keys() if allow_sweep or not k.startswith("sweep"))
    key = draw(st.sampled_from(keys))
    kind, nullable = config_keys()[key]
    valid = _valid_value(key, kind, nullable)
    value = draw(st.one_of(valid, valid, valid, _hostile_value(kind)))
    form = draw(st.sampled_from(["", "", "", "", "", "", "", "+", "++", "typo", "~"]))
    if form == "typo":
        return f"{key}x={value}"
    if form == "~":
        return f"~{key}"
    return f"{form}{key}={value}"


@st.composite
def group_override(draw) -> str:
    """``group=option`` for every shipped option of every group, or a name no group has."""
    group = draw(st.sampled_from([g for g in GROUPS if g != "sweep"]))
    options = [o for o in group_options(group) if (group, o) not in SKIPPED_OPTIONS]
    option = draw(st.one_of(st.sampled_from(options), st.sampled_from(("gpt5", "[b]", "é", "../model/hybrid",
                                                                       "", "a b", "x" * 300))))
    return f"{group}={option}"


def overrides(*, max_size: int = 4) -> st.SearchStrategy[list[str]]:
    """A few overrides, groups and keys mixed; at most one per key (Hydra refuses a key twice)."""
    return st.lists(st.one_of(group_override(), key_override()), max_size=max_size,
                    unique_by=lambda o: o.lstrip("+~").split("=")[0].removesuffix("x"))


def odd_path(folder: Path, inputs: tuple[Path, ...] = (), suffix: str = ".json") -> st.SearchStrategy[str]:
    """A path under ``folder`` with an odd name, a folder, a missing parent, or one of ``inputs``."""
    names = st.sampled_from(["out", "résultat", "[b]x", "[/]", "a b", "日本", "n" * 300, "-dash", "x" * 200])
    plain = names.map(lambda n: str(folder / f"{n}{suffix}"))
    special = st.sampled_from([str(folder), str(folder / "missing" / f"deep{suffix}"), str(folder / "[b]" / "[/]"),
                               "/proc/version", *map(str, inputs)])
    return st.one_of(plain, plain, special)


# -- issue 44: --megatron-args values at Megatron's range edges, hostile plug-ins, compressed / deep inputs

MEGATRON_VALUES = ("0", "-1", "1", "8", "128", "0.5", "1.5", "1e300", "nan", "inf", "-inf", str(2**63), "abc")


@st.composite
def megatron_args(draw) -> str:
    """A launch line of 1-3 of the flags Megatron's ranges cover (``config.megatron_ranges.RANGES``), each
    with a value drawn at or past an edge (0, negative, huge, nan), sometimes with the dynamic engine on."""
    from cgbench.config.megatron_ranges import RANGES

    flags = draw(st.lists(st.sampled_from(sorted(RANGES)), min_size=1, max_size=3, unique=True))
    words = [f"{f} {draw(st.sampled_from(MEGATRON_VALUES))}" for f in flags]
    dynamic = draw(st.booleans())
    return " ".join((["--inference-dynamic-batching"] if dynamic else []) + words)


def hostile_plugins_yaml() -> str:
    """A plugins.yaml declaring every plug-in of ``tests.hostile_plugins`` (each misbehaves in one way)."""
    from tests.hostile_plugins import HOSTILE

    return "".join(f"{family}:\n" + "".join(f"  {name}: {{_target_: {target.replace(':', '.')}}}\n"
                                            for name, target in entries.items())
                   for family, entries in HOSTILE.items())


# the overrides that call each hostile plug-in (its import, its build, its draws, its answers mid-run)
HOSTILE_PLUGIN_LINES = (
    ["policy=exiting"], ["policy=custom"], ["policy=generator_exit"], ["policy=exits_on_import"],
    ["policy=answers_badly"], ["policy=exits_mid_run"], ["cg=endless_grid"], ["cg=string_grid"],
    ["cg=exiting_estimate"], ["workload.prompt_len.dist=endless_lengths"],
    *([f"workload.arrival.process={p}", "workload.arrival.rate=5"] for p in ("strings", "endless", "short",
                                                                             "draw_exits")),
)


# -- doctored documents: a written result with one field of another type, or missing

def flipped(value: Any) -> Any:
    """A value of another JSON type (doctored documents: issue 44 class 6)."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {"0": value[:1]}
    return 7 if isinstance(value, dict) else {}


def doc_places(doc: Any, at: tuple = ()) -> list[tuple]:
    """Every path into ``doc`` (lists by their first item only: a long trace would crowd the rest out)."""
    out = [at] if at else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += doc_places(v, (*at, k))
    elif isinstance(doc, list) and doc:
        out += doc_places(doc[0], (*at, 0))
    return out


@st.composite
def doctored(draw, source: Path, folder: Path) -> str:
    """A copy of the document ``source`` in ``folder`` with one drawn field flipped to another type or
    deleted: the readers of explain, compare, report and plot answer with one line naming it."""
    doc = json.loads(source.read_text(encoding="utf-8"))
    place = draw(st.sampled_from(doc_places(doc)))
    parent = doc
    for part in place[:-1]:
        parent = parent[part]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[place[-1]]
    else:
        parent[place[-1]] = flipped(parent[place[-1]])
    path = folder / f"doctored_{source.name}"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)
