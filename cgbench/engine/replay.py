"""Replay one scheduling round from a saved engine state (``cgbench schedule STATE.json``).

A ``RoundState`` is the engine at the start of one scheduling round: limits (``engine``), the captured
grid, the batch counters (``Batch``), the hidden chunked-prefill request and the waiting queue
(``QueueEntry``s), head first. ``cgbench.results.state_file`` reads a state file into one (every check
of the format is there); ``replay_round`` builds the engine's own objects from it (``Context``,
``Request``, ``Policy``, and the ``Scheduler`` of ``cgbench.engine.build``), runs
``Scheduler.schedule`` once and reports what the round decided and which graph the resulting step
replays, exactly as ``Engine.run`` / ``Engine.advance`` would. ``state_from_engine`` writes the same
format from a live engine, so a round inside a full run can be replayed decision by decision.
"""

from __future__ import annotations

import typing
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from cgbench.config.registry.grids import grid_kind
from cgbench.config.registry.policies import option_sections, options_of, policy_spec
from cgbench.config.schema import POLICIES, BenchConfig, CGConfig, EngineConfig, ModelConfig, PolicyConfig
from cgbench.engine.build import build_scheduler, prefix_cache
from cgbench.engine.context import Context
from cgbench.engine.policy_registry import build_policy
from cgbench.engine.request import Request, make_request
from cgbench.engine.scheduler import GraphChoice
from cgbench.grids.lookup import Grid


@dataclass(frozen=True, slots=True)
class Batch:
    """The context counters at the start of the round (the hidden chunked request excluded)."""

    active_tokens: int  # A
    prefill: int  # P
    decode: int  # D
    paused: int
    pinned: int = 0  # Mamba slots pinned by handoffs (engine.handoff_pinning, engine/handoff.py)
    previous_prefill: int = -1  # the P of the step before the round (engine.async_overlap); -1: none


@dataclass(frozen=True, slots=True)
class QueueEntry:
    id: int
    prompt_tokens: int  # still to prefill
    finished: int = 0  # already prefilled (the chunked request only)
    cg_wait_iters: int = 0


@dataclass(frozen=True)
class RoundState:
    """One round's starting state, validated. ``queue`` is head first, chunked request included."""

    source: str
    model: ModelConfig
    engine: EngineConfig
    cg: CGConfig
    policy: PolicyConfig  # option sections only (the registry's); the name is chosen per replay
    free_blocks: int
    batch: Batch
    chunked_request_id: int  # -1 when there is none
    queue: tuple[QueueEntry, ...]
    grid: Grid
    description: str = ""
    prefix_cache: dict[str, Any] | None = None  # engine.prefix_caching: PrefixCache.to_state()

    def context(self) -> Context:
        """A fresh ``Context`` holding this state's counters (and its prefix cache)."""
        ctx = Context.from_engine(self.engine)
        ctx.free_blocks = self.free_blocks
        ctx.prefix = prefix_cache(self.engine, self.model, 0)  # the state's blocks hold its hashes
        if ctx.prefix is not None and self.prefix_cache is not None:
            ctx.prefix.load_state(self.prefix_cache)
        # begin_round would reset P to 0; a state may start mid-round, so set the counters directly
        ctx.active_tokens = self.batch.active_tokens
        ctx.prefill_count = self.batch.prefill
        ctx.decode_count = self.batch.decode
        ctx.paused_count = self.batch.paused
        ctx.pinned_slots = self.batch.pinned
        ctx.chunked_request_id = self.chunked_request_id
        return ctx

    def requests(self) -> deque[Request]:
        """Fresh ``Request`` objects for the queue, head first."""
        msl = self.engine.max_sequence_length
        queue: deque[Request] = deque()
        for q in self.queue:  # the output is unknown: the longest the sequence length allows
            req = make_request(q.id, q.finished + q.prompt_tokens, msl, msl)
            req.start_prefill(q.prompt_tokens, q.finished)
            req.cg_wait_iters = q.cg_wait_iters
            queue.append(req)
        return queue


@dataclass(frozen=True)
class RoundDecision:
    """What one scheduling round decided under one policy, and what the step then replays."""

    policy: str
    admitted: tuple[tuple[int, int, bool], ...]  # (id, chunk tokens, final chunk?) in admission order
    queue_after: tuple[int, ...]
    cg_wait_iters: tuple[tuple[int, int], ...]  # (id, value after the round) for every queued request
    batch_after: tuple[int, int, int]  # the step's real (T, P, D)
    chunked_request_id: int
    warnings: int  # starvation warnings this round
    graph: tuple[int, int, int] | None
    eager_reason: str | None
    step_runs: bool  # False when the batch is empty: the engine runs no step
    deferred: int | None  # the request gating held back, if any
    deferred_candidate: tuple[int, int, int] | None  # the shape it would have made (unsnapped)
    stop_reason: str  # why the round ended with requests still queued ("" when the queue emptied)
    gating_active: bool

    def to_json(self) -> dict[str, Any]:
        T, P, D = self.batch_after
        return {
            "policy": self.policy,
            "admitted": [[i, c, f] for i, c, f in self.admitted],
            "queue_after": list(self.queue_after),
            "cg_wait_iters": {str(i): n for i, n in self.cg_wait_iters},
            "batch_after": {"active_tokens": T, "prefill": P, "decode": D},
            "chunked_request_id": self.chunked_request_id,
            "warnings": self.warnings,
            "graph": list(self.graph) if self.graph is not None else None,
            "eager_reason": self.eager_reason,
            "step_runs": self.step_runs,
            "deferred": self.deferred,
            "deferred_candidate": list(self.deferred_candidate) if self.deferred_candidate else None,
            "stop_reason": self.stop_reason,
            "gating_active": self.gating_active,
        }


def replay_round(state: RoundState, policy: str) -> RoundDecision:
    """Run one ``Scheduler.schedule`` from ``state`` under ``policy`` (fresh objects every call)."""
    policy_spec(policy, key="policy")  # a built-in or an installed plug-in, else did-you-mean
    pol = build_policy(policy, options_of(state.policy, policy))
    ctx = state.context()
    queue = state.requests()
    everyone = list(queue)
    sched = build_scheduler(ctx, state.engine, state.cg, state.grid, pol)
    sched.previous_prefill = state.batch.previous_prefill
    result = sched.schedule(queue)

    T, P, D = ctx.active_tokens, ctx.prefill_count, ctx.decode_count
    graph, reason = GraphChoice(state.grid, pol).resolve(T, P, D) if T > 0 else (None, None)
    candidate = None
    if result.deferred is not None:
        rem = result.deferred.remaining_prompt
        chunk = min(rem, ctx.max_tokens - T) if state.engine.chunked_prefill else rem
        candidate = (T + chunk, P + 1, D)
    return RoundDecision(
        policy=policy,
        admitted=tuple((a.request.id, a.chunk, a.final) for a in ctx.admitted),
        queue_after=tuple(r.id for r in queue),
        cg_wait_iters=tuple((r.id, r.cg_wait_iters) for r in everyone),
        batch_after=(T, P, D),
        chunked_request_id=ctx.chunked_request_id,
        warnings=sched.counters.starvation_warnings,
        graph=graph,
        eager_reason=reason,
        step_runs=T > 0,
        deferred=result.deferred.id if result.deferred is not None else None,
        deferred_candidate=candidate,
        stop_reason=result.stop_reason,
        gating_active=sched.gating_active,
    )


def replay_all(state: RoundState, policies: typing.Sequence[str] = POLICIES) -> list[RoundDecision]:
    """``replay_round`` for each policy, every one from the same starting state."""
    return [replay_round(state, p) for p in policies]


# -- from a live engine ----------------------------------------------------------------------------


def state_from_engine(engine: Any, cfg: BenchConfig) -> dict[str, Any]:
    """The state-file document of ``engine`` (a ``cgbench.engine.core.Engine`` built from ``cfg``) at the
    start of a round: call it after ``engine.ctx.begin_round(...)`` and before
    ``engine.scheduler.schedule(...)``.

    Megatron-family grids are written as their explicit list in stored order; peers' grids (which
    match non-strictly and may need exact decode sizes) as their ``cg`` keys, regenerated on load."""
    ctx = engine.ctx
    engine_doc: dict[str, Any] = asdict(cfg.engine)
    engine_doc["free_blocks"] = ctx.free_blocks
    if grid_kind(engine.grid.name).family == "peer":
        cg_doc: dict[str, Any] = asdict(cfg.cg)
    else:
        cg_doc = {"kind": "explicit", "all_prefills": cfg.cg.all_prefills, "non_decode": cfg.cg.non_decode,
                  "graphs": [list(g) for g in engine.grid.graphs]}
    chunked = None
    if engine.chunked is not None:
        r = engine.chunked
        chunked = {"id": r.id, "remaining": r.remaining_prompt, "finished": r.finished_chunk}
    batch = {"active_tokens": ctx.active_tokens, "prefill": ctx.prefill_count,
             "decode": ctx.decode_count, "paused": ctx.paused_count}
    if ctx.handoff is not None:
        batch["pinned"] = ctx.pinned_slots
    if engine.scheduler.async_overlap and engine.scheduler.previous_prefill >= 0:
        batch["previous_prefill"] = engine.scheduler.previous_prefill
    return {
        "model": {"kind": cfg.model.kind},
        "engine": engine_doc,
        "cg": cg_doc,
        "policy": {s: asdict(getattr(cfg.policy, s)) for s in option_sections(cfg.policy)},
        "batch": batch,
        "chunked_request": chunked,
        "queue": [{"id": r.id, "prompt_tokens": r.remaining_prompt, "finished": r.finished_chunk,
                   "cg_wait_iters": r.cg_wait_iters} for r in engine.queue],
        **({"prefix_cache": ctx.prefix.to_state()} if ctx.prefix is not None else {}),
    }

