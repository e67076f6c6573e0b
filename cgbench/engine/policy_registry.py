"""How a policy's record (``cgbench.config.registry.policies.PolicySpec``) becomes a ``Policy``.

A built-in's record says which ``Policy`` fields it sets (``traits``) and which it takes from its
options (``from_options``): ``build_policy`` only assembles them, so a new built-in policy that
combines existing rules is its record alone. A plug-in's ``PolicySpec.build`` returns either a
``Policy`` (the compiled fast path, any combination of its fields) or its own ``AdmissionPolicy``
object, which the engine runs wrapped in a ``Policy`` (``Policy.wrapping``) and always with the
step-by-step engine (``needs_oracle``):
the event-proportional engine skips rounds whose decisions it can predict from ``Policy``'s own
fields only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cgbench.config.registry.plugin_source import foreign, shown
from cgbench.config.registry.plugins import plugin_error, plugin_where
from cgbench.config.registry.policies import is_plugin, options_of, policy_spec
from cgbench.config.schema import PolicyConfig
from cgbench.engine.plugin_policy import GuardedPolicy
from cgbench.engine.policies import DEFER, EAGER, Policy

_CONTRACT = ("name", "gates", "gates_chunks", "on_non_chunked_miss", "on_chunk_miss", "forward_guard")


def build_policy(name: str, options: Any) -> Policy:
    """Policy ``name`` with ``options`` (its section's dataclass, or None)."""
    spec = policy_spec(name)
    if not is_plugin(name):
        taken = {f: getattr(options, option) for f, option in spec.from_options.items()}
        return Policy(name, **spec.traits, **taken)
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


__all__ = ["DEFER", "EAGER", "Policy", "build_policy", "is_plugin", "make_policy", "needs_oracle"]
