"""Admission policies: what the scheduler does when no captured graph would cover a batch.

Each policy answers three questions the scheduler asks (see ``cgbench.engine.scheduler``):
``gates`` (does it gate admission at all), ``on_non_chunked_miss`` and ``on_chunk_miss``
(defer, or admit and run eager), plus ``forward_guard`` at forward time. ``AdmissionPolicy`` is that
contract; ``Policy`` (the built-ins, the compiled fast path) meets it with a few numbers, and a
plug-in's own ``AdmissionPolicy`` object is carried by a ``Policy`` that hands it each question
(``Policy.wrapping``). Which policies exist: ``cgbench.engine.policy_registry``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

DEFER = "defer"
EAGER = "eager"


class AdmissionPolicy(Protocol):
    """What the scheduler asks a policy. Every answer must depend on the arguments only (a policy
    holds no per-run state): ``cgbench schedule`` replays one round with a fresh policy, and the
    engine caches each shape's ``forward_guard`` answer."""

    @property
    def name(self) -> str: ...

    @property
    def gates(self) -> bool:
        """Gating can be active (``scheduler.gating_active`` adds the reference's three conditions)."""
        ...

    @property
    def gates_chunks(self) -> bool:
        """The chunked path is gated too: ``on_chunk_miss`` is asked for continuing chunks."""
        ...

    def on_non_chunked_miss(self, cg_wait_iters: int) -> str:
        """``DEFER`` or ``EAGER`` for a non-chunked prefill whose batch no graph covers; the head has
        been deferred ``cg_wait_iters`` rounds in a row."""
        ...

    def on_chunk_miss(self, cg_wait_iters: int, engine_idle: bool) -> str:
        """``DEFER`` or ``EAGER`` for a chunk whose batch no graph covers."""
        ...

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        """True when the matched graph must NOT be used (the step runs eager)."""
        ...


@dataclass(frozen=True, slots=True)
class Policy:
    """A built-in policy's rules as a few fields (or a plug-in's object in ``plugin``). The chunked
    path's rules beyond ``AdmissionPolicy`` (``snaps_continuing``, ``admits_covered``) and the gating
    condition (``megatron_conditions``) are fields only: a plug-in returning a ``Policy`` may set them,
    a plug-in's own object keeps their defaults."""

    name: str
    gates: bool  # gating can be active (still needs the reference's three conditions)
    # the chunked path is gated like the non-chunked one: a miss defers (unless the engine is idle),
    # and continuing chunks are guarded too (snapped or deferred when they would miss)
    gates_chunks: bool = False
    # With gates_chunks: a continuing chunk is snapped like a new one, always (PR #6675), instead of
    # only when its unsnapped chunk would miss (cgbench's defer / wait_timeout)
    snaps_continuing: bool = False
    # A chunk no graph boundary fits is admitted unsnapped when a larger graph covers its step
    # (padded); only a step no graph covers is left to on_chunk_miss (cgbench's cover)
    admits_covered: bool = False
    # gating needs Megatron's three conditions only, not a prefill/mixed graph in the list
    # (scheduler.gating_active): the policies that reproduce Megatron's own code
    megatron_conditions: bool = False
    timeout_iters: int = -1  # >= 0: admit eager after this many consecutive deferrals
    pad_ratio: float = 0.0  # > 0: a prefill/mixed graph padding T beyond ratio x real runs eager
    plugin: Optional[AdmissionPolicy] = None  # a plug-in's policy: every answer is its answer

    @staticmethod
    def wrapping(plugin: AdmissionPolicy) -> Policy:
        """The ``Policy`` the engine runs for a plug-in's ``AdmissionPolicy`` object."""
        return Policy(plugin.name, gates=bool(plugin.gates), gates_chunks=bool(plugin.gates_chunks), plugin=plugin)

    def on_non_chunked_miss(self, cg_wait_iters: int) -> str:
        if self.plugin is not None:
            return self.plugin.on_non_chunked_miss(cg_wait_iters)
        if self.timeout_iters >= 0 and cg_wait_iters >= self.timeout_iters:
            return EAGER
        return DEFER

    def on_chunk_miss(self, cg_wait_iters: int, engine_idle: bool) -> str:
        if self.plugin is not None:
            return self.plugin.on_chunk_miss(cg_wait_iters, engine_idle)
        if not self.gates_chunks or engine_idle:
            return EAGER
        if self.timeout_iters >= 0 and cg_wait_iters >= self.timeout_iters:
            return EAGER
        return DEFER

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        """True when the graph must NOT be used (padding-waste guard)."""
        if self.plugin is not None:
            return self.plugin.forward_guard(real_tokens, prefills, graph_tokens)
        return self.pad_ratio > 0 and prefills > 0 and graph_tokens > self.pad_ratio * real_tokens
