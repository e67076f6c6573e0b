"""The policy registry: one record (``PolicySpec``) per policy, the only place a built-in is named.

A record holds the policy's name, its summary, its options (one dataclass, the config section
``policy.<name>``: ``policy.pad_guard.max_ratio``), their check, and how it is built. A built-in's
build is data, not code, so the config layer lists it without importing the engine: ``traits`` (the
``cgbench.engine.policies.Policy`` fields it sets) and ``from_options`` (the ``Policy`` fields taken
from its options); ``cgbench.engine.policy_registry`` turns the two into a ``Policy``. A plug-in's
record carries a ``build`` function instead. Everything else derives from ``BUILTIN_POLICIES``:
``schema.POLICIES``, ``schema.PolicyConfig``'s option sections, validation, the keys a policy does
not read (``schema.unread_keys``), ``cgbench schedule``'s state files (``option_sections``) and the
``run --help`` listing; tests check that ``conf/policy/*.yaml`` and the README's tables name the same
policies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cgbench.config.registry.plugin_source import foreign
from cgbench.config.registry.plugins import builtin_or_plugin, names_with_plugins, plugin_error, plugin_where
from cgbench.errors import ConfigError


@dataclass
class PadGuardConfig:
    max_ratio: float = 2.0


@dataclass
class WaitTimeoutConfig:
    iters: int = 50


@dataclass(frozen=True)
class PolicySpec:
    """One admission policy. ``options``: the dataclass of its section ``policy.<name>`` (None: no
    options); ``check``: raises ``ConfigError`` naming ``policy.<name>.<field>`` for a bad value;
    ``build``: options instance (or None) -> the policy the scheduler calls (a
    ``cgbench.engine.policies.Policy``, or any object meeting ``AdmissionPolicy``); required of a
    plug-in, None for a built-in, which is built from ``traits`` (``Policy`` field -> value) and
    ``from_options`` (``Policy`` field -> the option field it takes)."""

    name: str
    options: type | None = None
    check: Callable[[Any], None] | None = None
    build: Callable[[Any], Any] | None = None
    summary: str = ""
    traits: Mapping[str, Any] = field(default_factory=dict)
    from_options: Mapping[str, str] = field(default_factory=dict)

    def default_options(self) -> Any:
        return self.options() if self.options is not None else None


def _check_pad_guard(o: PadGuardConfig) -> None:
    if not o.max_ratio >= 1.0:
        raise ConfigError("policy.pad_guard.max_ratio: must be >= 1.0")


def _check_wait_timeout(o: WaitTimeoutConfig) -> None:
    if not o.iters >= 0:
        raise ConfigError("policy.wait_timeout.iters: must be >= 0")


BUILTIN_POLICIES: dict[str, PolicySpec] = {s.name: s for s in (
    PolicySpec("budget", summary="admit on token / request / KV budget only; a miss runs eager",
               traits={"gates": False}),
    PolicySpec("megatron", summary="PR #4870 as merged: a non-chunked miss defers, chunks snap",
               traits={"gates": True, "megatron_conditions": True}),
    PolicySpec("defer", summary="PR #4870 as described: chunked prefill defers on a miss too",
               traits={"gates": True, "gates_chunks": True}),
    PolicySpec("pad_guard", PadGuardConfig, _check_pad_guard,
               summary="budget, plus: a graph padding T beyond max_ratio x runs eager",
               traits={"gates": False}, from_options={"pad_ratio": "max_ratio"}),
    PolicySpec("wait_timeout", WaitTimeoutConfig, _check_wait_timeout,
               summary="defer on a miss for at most iters rounds, then run eager",
               traits={"gates": True, "gates_chunks": True}, from_options={"timeout_iters": "iters"}),
    PolicySpec("megatron_6675", summary="PR #6675 (73f34663): continuing chunks snapped too; a chunk miss "
               "waits unless the engine is idle",
               traits={"gates": True, "gates_chunks": True, "snaps_continuing": True, "megatron_conditions": True}),
    PolicySpec("cover", summary="defer, but a chunk a larger graph covers (padded) is admitted, not held back",
               traits={"gates": True, "gates_chunks": True, "admits_covered": True}),
)}


def builtin_sections() -> tuple[str, ...]:
    """The option sections every config holds: the built-in policies that have options."""
    return tuple(s.name for s in BUILTIN_POLICIES.values() if s.options is not None)


def policy_names(*, plugins: bool = True) -> tuple[str, ...]:
    """Built-in policy names, then the installed plug-ins' (names only: nothing is imported)."""
    return names_with_plugins(BUILTIN_POLICIES, "policies") if plugins else tuple(BUILTIN_POLICIES)


def policy_spec(name: str, key: str = "policy.name") -> PolicySpec:
    """The spec of policy ``name``: a built-in, else an installed plug-in (loaded now)."""
    entry = builtin_or_plugin(BUILTIN_POLICIES, "policies", name, key, policy_names)
    return entry if name in BUILTIN_POLICIES else _checked_plugin(name, entry)


def _checked_plugin(name: str, plugin: object) -> PolicySpec:
    if "__" in name:  # the schema's plug-in classes are named by joining names with "__"
        raise plugin_error("policies", name, "a policy name must not contain '__'")
    if not isinstance(plugin, PolicySpec):
        raise plugin_error("policies", name, f"is a {type(plugin).__name__}, not a "
                           "cgbench.config.registry.policies.PolicySpec")
    if not callable(plugin.build):
        raise plugin_error("policies", name, "has no build function (PolicySpec.build)")
    options = plugin.options
    if options is not None and not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise plugin_error("policies", name, "options must be a dataclass (the section policy.<name>)")
    return plugin


def is_plugin(name: str) -> bool:
    return name not in BUILTIN_POLICIES


def options_of(policy_cfg: Any, name: str) -> Any:
    """Policy ``name``'s options as ``policy_cfg`` (a ``PolicyConfig``) holds them, else its defaults."""
    spec = policy_spec(name)
    if spec.options is None:
        return None
    held = getattr(policy_cfg, name, None)
    if isinstance(held, spec.options):
        return held
    return foreign(plugin_where("policies", name), "its options' defaults failed", spec.default_options) \
        if is_plugin(name) else spec.default_options()


def option_sections(policy_cfg: Any) -> tuple[str, ...]:
    """The option sections ``policy_cfg`` holds (every field but ``name``), in schema order."""
    return tuple(f.name for f in dataclasses.fields(policy_cfg) if f.name != "name")


def check_options(policy_cfg: Any) -> None:
    """Each option section's values, by its policy's ``check``."""
    for section in option_sections(policy_cfg):
        spec = policy_spec(section, key=f"policy.{section}")
        if spec.check is None:
            continue
        if is_plugin(section):  # foreign code: a ConfigError naming the key is its contract, the rest its fault
            foreign(plugin_where("policies", section), "check failed", spec.check, getattr(policy_cfg, section),
                    passes=(ConfigError,))
        else:
            spec.check(getattr(policy_cfg, section))


def check_policy(cfg: Any) -> None:
    """The rules of ``cfg.policy`` (a ``BenchConfig``'s): its name, then each option section's."""
    p = cfg.policy
    policy_spec(p.name)  # a built-in or an installed plug-in, else did-you-mean
    check_options(p)
