"""Which engine runs a single rank: the event-proportional ``FastEngine`` or the step-by-step
``Engine`` (the oracle). One rule, read by the composition root and by the data-parallel engine."""

from __future__ import annotations

from cgbench.config.schema import EngineConfig
from cgbench.engine.acceptance import needs_step_engine
from cgbench.engine.contract import StepBackend
from cgbench.engine.policies import Policy
from cgbench.engine.policy_registry import needs_oracle


def runs_step_by_step(e: EngineConfig, backend: StepBackend, policy: Policy) -> bool:
    """The step-by-step engine is needed when ``engine.oracle`` asks for it, the backend prices no
    stretches (``backend.pricer`` is None: a real engine, or a recording one), a plug-in's own policy
    object must be asked every question, or a stochastic ``engine.spec_acceptance`` moves every row by
    its own amount each step."""
    return e.oracle or backend.pricer is None or needs_oracle(policy) or needs_step_engine(e)
