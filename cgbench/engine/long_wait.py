"""The round a gating flag describes: the engine state at the start of the first round in which a
request is deferred for the ``limit``-th consecutive time, saved in the ``cgbench schedule`` format
(``cgbench schedule`` replays that round and says why the request was deferred)."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from cgbench.config.schema import BenchConfig, EngineConfig
from cgbench.engine.core import Engine
from cgbench.engine.dp import DPEngine
from cgbench.engine.replay import state_from_engine
from cgbench.engine.request import Request
from cgbench.engine.scheduler import RoundResult


class _Found(Exception):
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


class _LongWaitWatch:
    """Snapshots the state before a round whose head has waited ``limit - 1`` rounds; stops the run
    (``_Found``) if that round defers it again."""

    def __init__(self, engine: Engine, cfg: BenchConfig, limit: int, description: str = "") -> None:
        self.engine, self.cfg, self.limit = engine, cfg, limit
        self.description = description  # the state's ``description`` (a data-parallel run: which rank)
        self.snap: dict[str, Any] | None = None

    def before(self, queue: deque[Request]) -> None:
        head = queue[0] if queue else None
        self.snap = (state_from_engine(self.engine, self.cfg)
                     if head is not None and head.cg_wait_iters >= self.limit - 1 else None)
        if self.snap is not None and self.description:
            self.snap = {"description": self.description, **self.snap}

    def after(self, result: RoundResult) -> None:
        if self.snap is not None and result.deferred is not None:
            raise _Found(self.snap)


def run_to_long_wait(engine: Engine, cfg: BenchConfig, limit: int) -> dict[str, Any] | None:
    """Run ``engine`` (a fresh step-by-step engine built for ``cfg``: it watches every round) up to
    the first round that defers a request for the ``limit``-th consecutive time, and return the
    state that round starts from; None when no request waits that long."""
    engine.round_observer = _LongWaitWatch(engine, cfg, limit)
    try:
        engine.run()
    except _Found as found:
        return found.state
    return None


def run_dp_to_long_wait(engine: DPEngine, cfg: BenchConfig, limit: int) -> dict[str, Any] | None:
    """``run_to_long_wait`` for a data-parallel run (``engine``: a fresh one of step-by-step cores,
    ``engine.ep_size`` 1): every rank watched, the first rank's round that defers a request for the
    ``limit``-th time, saved as that rank's single-engine state (``engine.dp_size`` 1 there: a rank is
    one engine) with ``description`` naming the rank."""
    d = EngineConfig()
    rank_cfg = replace(cfg, engine=replace(cfg.engine, dp_size=1, dp_routing=d.dp_routing,
                                           dp_routing_alpha=d.dp_routing_alpha))
    for i, rank in enumerate(engine.ranks):
        rank.round_observer = _LongWaitWatch(
            rank, rank_cfg, limit, f"data-parallel rank {i} of {engine.size} (engine.dp_routing="
            f"{cfg.engine.dp_routing}): its round, as one engine")
    try:
        engine.run()
    except _Found as found:
        return found.state
    return None
