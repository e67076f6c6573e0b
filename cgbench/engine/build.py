"""The one place a config becomes a scheduler, an engine core and the topology that runs them.

From a ``BenchConfig`` and the parts the composition root built (the grid, the policy, the backend,
the workload stream; ``cgbench.pipeline``):

* ``scheduler_options`` / ``core_options``: the frozen records a scheduler and a core run under, each
  setting decided here once (the async overlap, for one, only without chunked prefill);
* ``build_scheduler``: a ``Scheduler`` on a ``Context`` (the KV pool, with its prefix cache);
* ``runs_step_by_step``: which core runs a rank, the event-proportional ``FastEngine`` or the
  step-by-step ``Engine`` (the oracle);
* ``build_core``: one engine core; ``build_engine``: the run's topology, one core, one EP group in
  lockstep (``cgbench.engine.ep``) or data-parallel ranks (``cgbench.engine.dp``), every one driven by
  the same loop (``cgbench.engine.drive``).

``cgbench schedule``'s replay of one saved round builds its scheduler here too (``build_scheduler``),
and so do the tests' hand-built rounds (``tests.helpers.round_scheduler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cgbench.config.schema import BenchConfig, CGConfig, EngineConfig, ModelConfig
from cgbench.engine.acceptance import needs_step_engine
from cgbench.engine.batch_invariant import ssm_alignment
from cgbench.engine.context import Context
from cgbench.engine.contract import StepBackend
from cgbench.engine.core import CoreOptions, Engine, RunState
from cgbench.engine.dp import DPEngine, RankStream
from cgbench.engine.ep import EPEngine, group_cg, group_grid
from cgbench.engine.ep import RankStream as GroupRankStream
from cgbench.engine.fast import FastEngine
from cgbench.engine.policies import Policy
from cgbench.engine.policy_registry import needs_oracle
from cgbench.engine.prefix_cache import PrefixCache, new_prefix_cache
from cgbench.engine.router import Router
from cgbench.engine.scheduler import GatingCounters, Scheduler, SchedulerOptions, gating_active
from cgbench.grids.lookup import Grid
from cgbench.workload.prefix_model import prefix_source_tokens
from cgbench.workload.stream import RequestStream


class Topology(Protocol):
    """What a run's engine is to its caller, whichever topology: it runs, and reports its facts
    (``cgbench.pipeline.metrics_of`` turns them into the result's metrics, each topology giving its own
    blocks)."""

    @property
    def grid(self) -> Grid: ...

    @property
    def gating_active(self) -> bool: ...

    @property
    def counters(self) -> GatingCounters: ...

    @property
    def ranks(self) -> list[Engine]: ...

    @property
    def prefix_cache(self) -> PrefixCache | None: ...

    @property
    def dummy_steps(self) -> int: ...

    def metric_blocks(self) -> dict[str, Any]: ...

    def run(self) -> RunState: ...


@dataclass(frozen=True)
class Parts:
    """What a run's engine is built from: the config and the parts the composition root built once."""

    cfg: BenchConfig
    grid: Grid
    policy: Policy
    backend: StepBackend
    trace: bool = False


# -- records ----------------------------------------------------------------------------------------


def scheduler_options(e: EngineConfig, cg: CGConfig, grid: Grid, policy: Policy) -> SchedulerOptions:
    """How a scheduler of engine ``e`` admits on ``grid`` under ``policy``."""
    return SchedulerOptions(
        chunked_prefill=e.chunked_prefill,
        gating=gating_active(policy, cg, grid),
        flash_attn_guard=e.flash_attn_guard,
        ssm_alignment=ssm_alignment(e, grid.strict),
        gate_on_computed=e.prefix_gate == "computed",
        async_overlap=e.async_overlap and not e.chunked_prefill,
    )


def core_options(e: EngineConfig, *, trace: bool = False) -> CoreOptions:
    """How a core of engine ``e`` runs (``trace``: keep every step's record)."""
    return CoreOptions(trace=trace, check_invariants=e.check_invariants,
                       stall_steps=e.stall_steps or 8 * e.max_sequence_length + 1000, kv_corners=e.kv_corners)


def prefix_cache(e: EngineConfig, model: ModelConfig, source_tokens: int) -> PrefixCache | None:
    """The KV pool's prefix cache when ``engine.prefix_caching`` is on: the engine's block size, the
    size of the workload's source blocks (``source_tokens``; 0: the engine's block size), and on a
    hybrid model its Mamba-state slots."""
    if not e.prefix_caching:
        return None
    return new_prefix_cache(e, model.kind == "hybrid", source_tokens or e.block_size)


def build_scheduler(ctx: Context, e: EngineConfig, cg: CGConfig, grid: Grid, policy: Policy) -> Scheduler:
    """The scheduler of one round after another on ``ctx`` (a core's, or a replayed round's)."""
    return Scheduler(ctx, grid, policy, scheduler_options(e, cg, grid, policy))


def runs_step_by_step(e: EngineConfig, backend: StepBackend, policy: Policy) -> bool:
    """The step-by-step engine is needed when ``engine.oracle`` asks for it, the backend prices no
    stretches (``backend.pricer`` is None: a real engine, or a recording one), a plug-in's own policy
    object must be asked every question, or a stochastic ``engine.spec_acceptance`` moves every row by
    its own amount each step."""
    return e.oracle or backend.pricer is None or needs_oracle(policy) or needs_step_engine(e)


# -- cores and topologies ---------------------------------------------------------------------------


def build_core(parts: Parts, stream: RequestStream, *, grid: Grid | None = None, cg: CGConfig | None = None,
               step_by_step: bool | None = None, prefix: bool = True,
               engine_class: type[Engine] | None = None) -> Engine:
    """One engine core reading ``stream``: on ``grid`` with the gating condition of ``cg`` (by default
    the run's; an EP group's ranks get the group's), the KV pool's prefix cache if ``prefix`` and the
    config asks for one, step by step or event-proportional as ``runs_step_by_step`` says (unless
    ``step_by_step`` is given). ``engine_class``: a subclass of the engine that ``step_by_step`` picks
    (the tests' recording engines)."""
    cfg, policy, backend = parts.cfg, parts.policy, parts.backend
    e = cfg.engine
    grid = grid if grid is not None else parts.grid
    ctx = Context.from_engine(e, cfg.seed)
    if prefix:
        ctx.prefix = prefix_cache(e, cfg.model, prefix_source_tokens(cfg.workload) if e.prefix_caching else 0)
    scheduler = build_scheduler(ctx, e, cg if cg is not None else cfg.cg, grid, policy)
    options = core_options(e, trace=parts.trace)
    if step_by_step is None:
        step_by_step = runs_step_by_step(e, backend, policy)
    if step_by_step:
        return (engine_class or Engine)(options, scheduler, backend, stream)
    pricer = backend.pricer
    assert pricer is not None  # runs_step_by_step holds without one
    fast = engine_class or FastEngine
    assert issubclass(fast, FastEngine), fast
    return fast(options, scheduler, backend, stream, pricer=pricer)


def build_group(parts: Parts, streams: Sequence[RequestStream], stream: RequestStream) -> EPEngine:
    """An EP group of ``len(streams)`` oracle cores in lockstep (the event-proportional engine's
    stretches price one engine's steps alone, while a lockstep step costs the slowest rank's):
    ``streams`` are what its ranks see of the workload, ``stream`` the workload itself."""
    e = parts.cfg.engine
    grid = group_grid(parts.grid, e.moe_dispatcher)
    cg = group_cg(parts.cfg.cg, e.moe_dispatcher)
    ranks = [build_core(parts, rs, grid=grid, cg=cg, step_by_step=True, prefix=False) for rs in streams]
    return EPEngine(ranks, dispatcher=e.moe_dispatcher, router=Router(len(ranks), e.ep_routing), stream=stream,
                    trace=parts.trace)


def build_engine(parts: Parts, stream: RequestStream) -> Engine | EPEngine | DPEngine:
    """The run's topology on ``stream``: data-parallel ranks behind the coordinator (``dp_size`` > 1,
    each unit one core or one EP group), one EP group (``ep_size`` > 1), or one engine core (with the
    KV pool's prefix cache: it is modelled on one engine)."""
    e = parts.cfg.engine
    if e.dp_size > 1:
        def unit(streams: list[RankStream]) -> Engine | EPEngine:
            if e.ep_size == 1:
                return build_core(parts, streams[0], prefix=False)
            return build_group(parts, streams, stream)

        router = Router(e.dp_size, e.dp_routing, e.dp_routing_alpha, e.max_requests, e.block_size,
                        prefix_source_tokens(parts.cfg.workload) or e.block_size)
        return DPEngine(stream, router,
                        units=e.dp_size // e.ep_size, ep_size=e.ep_size, build_unit=unit, trace=parts.trace)
    if e.ep_size > 1:
        return build_group(parts, [GroupRankStream(stream) for _ in range(e.ep_size)], stream)
    return build_core(parts, stream)
