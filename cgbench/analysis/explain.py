"""Explaining a health flag: the engine state at the first round a gating flag describes, saved
for ``cgbench schedule`` (which replays that round and says why the request was deferred)."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from cgbench.config.schema import BenchConfig
from cgbench.engine.core import Engine
from cgbench.engine.replay import state_from_engine
from cgbench.engine.request import Request
from cgbench.engine.scheduler import RoundResult
from cgbench.pipeline import build_engine
from cgbench.results.health import wait_threshold


class _Found(Exception):
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


class _LongWaitWatch:
    """Snapshots the state before a round whose head has waited ``limit - 1`` rounds; stops the run
    (``_Found``) if that round defers it again."""

    def __init__(self, engine: Engine, cfg: BenchConfig, limit: int) -> None:
        self.engine, self.cfg, self.limit = engine, cfg, limit
        self.snap: dict[str, Any] | None = None

    def before(self, queue: deque[Request]) -> None:
        head = queue[0] if queue else None
        self.snap = (state_from_engine(self.engine, self.cfg)
                     if head is not None and head.cg_wait_iters >= self.limit - 1 else None)

    def after(self, result: RoundResult) -> None:
        if self.snap is not None and result.deferred is not None:
            raise _Found(self.snap)


def first_long_wait_state(cfg: BenchConfig, threshold: int | None = None) -> dict[str, Any] | None:
    """The ``cgbench schedule`` state at the start of the first round in which a request is deferred
    for the ``threshold``-th consecutive time (re-running the deterministic simulator up to that
    round only). None when no request waits that long or the backend is not the simulator."""
    if cfg.backend.name != "sim":
        return None
    limit = threshold if threshold is not None else wait_threshold(cfg)
    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    engine = build_engine(oracle)
    if not isinstance(engine, Engine):  # lockstep EP ranks: no single engine state to save
        return None
    engine.round_observer = _LongWaitWatch(engine, oracle, limit)
    try:
        engine.run()
    except _Found as found:
        return found.state
    return None
