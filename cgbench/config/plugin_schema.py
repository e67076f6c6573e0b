"""The config schema with plug-in policies' option sections.

A built-in config is a plain ``BenchConfig``: installing a plug-in changes nothing in it (nor in
its result document or fingerprint). A config that names a plug-in policy (``policy=NAME``,
``policy.name=NAME`` or a key under ``policy.NAME.``) is composed against ``schema_types``' subclass
of ``BenchConfig`` whose ``policy`` record adds the section ``policy.NAME`` (the plug-in's options
dataclass), so Hydra checks its keys and types as it checks the built-ins'. The subclasses are made
once per set of plug-ins and named ``BenchConfig__NAME`` / ``PolicyConfig__NAME`` in this module,
where a fresh process (a sweep worker unpickling a config) finds them again (``__getattr__``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from cgbench.config.overrides import override_key, override_value
from cgbench.config.registry.grids import BUILTIN_GRID_KINDS
from cgbench.config.registry.plugin_files import folders_in_effect
from cgbench.config.registry.plugins import load_plugin, plugin_names, plugins_among
from cgbench.config.registry.policies import BUILTIN_POLICIES, options_of, policy_spec
from cgbench.config.schema import BenchConfig, PolicyConfig

_SEP = "__"


@cache  # by the config folders in effect too: a plugins.yaml there may say what a name is
def _types(plugins: tuple[str, ...], folders: tuple[Path, ...]) -> tuple[type[PolicyConfig], type[BenchConfig]]:
    sections = []
    for name in plugins:
        spec = policy_spec(name)
        if spec.options is not None:
            sections.append((name, spec.options, dataclasses.field(default_factory=spec.options)))
    if not sections:
        return PolicyConfig, BenchConfig
    suffix = _SEP + _SEP.join(plugins)
    policy = dataclasses.make_dataclass("PolicyConfig" + suffix, sections, bases=(PolicyConfig,))
    bench = dataclasses.make_dataclass("BenchConfig" + suffix, [("policy", policy, dataclasses.field(
        default_factory=policy))], bases=(BenchConfig,))
    policy.__module__ = bench.__module__ = __name__  # where pickle looks them up (``__getattr__``)
    return policy, bench


def schema_types(plugins: Iterable[str] = ()) -> tuple[type[PolicyConfig], type[BenchConfig]]:
    """(the ``PolicyConfig``, the ``BenchConfig``) holding the option sections of ``plugins``
    (plug-in policy names) besides the built-ins'; the plain classes for none."""
    return _types(tuple(sorted(set(plugins))), folders_in_effect())


def _names_in(value: str) -> set[str]:
    """The names in an override's value: one, a sweep's list, or ``choice(a,b)``."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", value))


def plugins_named(overrides: Iterable[str]) -> tuple[str, ...]:
    """The installed plug-in policies that ``overrides`` name: as the policy (a sweep's values
    included) or as the section of a key."""
    named: set[str] = set()
    for o in overrides:
        key = override_key(o).lstrip("+")
        if key in ("policy", "policy.name"):
            named.update(_names_in(override_value(o)))
        elif key.startswith("policy."):
            named.add(key.split(".")[1])
    return plugins_among("policies", named, BUILTIN_POLICIES)


def grid_plugins_named(overrides: Iterable[str]) -> tuple[str, ...]:
    """The installed plug-in grid kinds that ``overrides`` choose as a ``cg`` group option (``cg=NAME``)."""
    named = {v for o in overrides if override_key(o) == "cg" for v in _names_in(override_value(o))}
    return plugins_among("grids", named, BUILTIN_GRID_KINDS)


def plugins_held(cfg: Any) -> tuple[str, ...]:
    """The plug-in policies whose option sections ``cfg``'s policy record holds."""
    return tuple(f.name for f in dataclasses.fields(cfg.policy) if f.name != "name" and f.name not in BUILTIN_POLICIES)


def __getattr__(attr: str) -> type:
    for prefix, index in (("PolicyConfig" + _SEP, 0), ("BenchConfig" + _SEP, 1)):
        if attr.startswith(prefix):
            return _types(tuple(attr[len(prefix):].split(_SEP)), folders_in_effect())[index]
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def plugin_help() -> list[str]:
    """Lines for ``run --help``: each plug-in policy (installed, or declared by a ``plugins.yaml`` of
    ``$CGBENCH_CONFIG_DIR``) with its options and defaults, the plug-in grid kinds and workload sources
    (loading them; one that fails to load is listed with why)."""
    from cgbench.config.registry.grids import grid_kind
    from cgbench.errors import ConfigError

    try:  # a plugins.yaml that is not what it should be: say why, under the help, not instead of it
        found = {family: plugin_names(family) for family in ("policies", "grids", "workloads")}
    except ConfigError as e:
        return [f"(none listed: {e})"]
    lines = []
    for name in sorted(set(found["policies"]) - set(BUILTIN_POLICIES)):
        try:
            spec = policy_spec(name)
        except ConfigError as e:
            lines.append(f"policy={name} (plug-in, broken: {e})")
            continue
        try:
            options = options_of(None, name)
        except ConfigError as e:
            lines.append(f"policy={name} (plug-in, broken: {e})")
            continue
        keys = [f"policy.{name}.{f.name}={getattr(options, f.name)!r}" for f in dataclasses.fields(options)] \
            if options is not None else []
        lines.append(f"policy={name} (plug-in{': ' + spec.summary if spec.summary else ''})"
                     + (f"; options: {', '.join(keys)}" if keys else ""))
    for name in sorted(set(found["grids"]) - set(BUILTIN_GRID_KINDS)):
        try:
            kind = grid_kind(name)
        except ConfigError as e:
            lines.append(f"cg={name} (plug-in grid kind, broken: {e})")
            continue
        summary = f": {kind.summary}" if kind.summary else ""
        lines.append(f"cg={name} (plug-in grid kind, {kind.family} family{summary})")
    for name in found["workloads"]:
        try:
            entry = load_plugin("workloads", name)
        except ConfigError as e:
            lines.append(f"{name} (plug-in workload source, broken: {e})")
            continue
        family = getattr(entry, "family", "?")
        key = "workload.arrival.process" if family == "arrival" else "workload.*_len.dist"
        summary = getattr(entry, "summary", "")
        lines.append(f"{key}={name} (plug-in {family} source{': ' + summary if summary else ''})")
    return lines
