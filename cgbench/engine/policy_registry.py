"""The policy registry's engine half: how each policy is built from its options.

The names and option schemas are ``cgbench.config.registry.policies`` (the config validates them
without importing the engine); ``BUILDERS`` holds one builder per built-in name (a test checks the
two agree). A plug-in's ``PolicySpec.build`` returns either a ``Policy`` (the compiled fast path,
any combination of its fields) or its own ``AdmissionPolicy`` object, which the engine runs wrapped
in a ``Policy`` (``Policy.wrapping``) and always with the step-by-step engine (``needs_oracle``):
the event-proportional engine skips rounds whose decisions it can predict from ``Policy``'s own
fields only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from cgbench.config.registry.plugin_source import foreign, shown
from cgbench.config.registry.plugins import plugin_error, plugin_where
from cgbench.config.registry.policies import PadGuardConfig, WaitTimeoutConfig, is_plugin, options_of, policy_spec
from cgbench.config.schema import PolicyConfig
from cgbench.engine.plugin_policy import GuardedPolicy
from cgbench.engine.policies import DEFER, EAGER, Policy


def _pad_guard(o: PadGuardConfig) -> Policy:
    return Policy("pad_guard", gates=False, pad_ratio=o.max_ratio)


def _wait_timeout(o: WaitTimeoutConfig) -> Policy:
    return Policy("wait_timeout", gates=True, gates_chunks=True, timeout_iters=o.iters)


BUILDERS: dict[str, Callable[[Any], Policy]] = {
    "budget": lambda _: Policy("budget", gates=False),
    "megatron": lambda _: Policy("megatron", gates=True, megatron_conditions=True),
    "defer": lambda _: Policy("defer", gates=True, gates_chunks=True),
    "pad_guard": _pad_guard,
    "wait_timeout": _wait_timeout,
    "megatron_6675": lambda _: Policy("megatron_6675", gates=True, gates_chunks=True, snaps_continuing=True,
                                      megatron_conditions=True),
    "cover": lambda _: Policy("cover", gates=True, gates_chunks=True, admits_covered=True),
}

_CONTRACT = ("name", "gates", "gates_chunks", "on_non_chunked_miss", "on_chunk_miss", "forward_guard")


def build_policy(name: str, options: Any) -> Policy:
    """Policy ``name`` with ``options`` (its section's dataclass, or None)."""
    builder = BUILDERS.get(name)
    if builder is not None:
        return builder(options)
    spec = policy_spec(name)
    assert spec.build is not None  # policy_spec refuses a plug-in without one
    where = plugin_where("policies", name)
    built = foreign(where, "build failed", spec.build, options)
    if isinstance(built, Policy):
        policy = built if built.plugin is None else dataclasses.replace(built, plugin=GuardedPolicy.over(
            built.plugin, where))
    else:
        missing = [a for a in _CONTRACT if not foreign(where, "build failed", hasattr, built, a)]
        if missing:
            raise plugin_error("policies", name, f"build returned a {type(built).__name__} without "
                               f"{', '.join(missing)} (see cgbench.engine.policies.AdmissionPolicy)")
        policy = Policy.wrapping(GuardedPolicy.over(built, where))
    if policy.name != name:
        raise plugin_error("policies", name, f"build returned a policy named {shown(policy.name)}")
    return policy


def make_policy(cfg: PolicyConfig) -> Policy:
    """The policy ``cfg`` names, with the options ``cfg`` holds for it."""
    return build_policy(cfg.name, options_of(cfg, cfg.name))


def needs_oracle(policy: Policy) -> bool:
    """A plug-in's own policy object: only the step-by-step engine asks it every round."""
    return policy.plugin is not None


__all__ = ["BUILDERS", "DEFER", "EAGER", "Policy", "build_policy", "is_plugin", "make_policy", "needs_oracle"]
