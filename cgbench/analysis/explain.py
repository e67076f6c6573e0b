"""Explaining a health flag: the engine state at the first round a gating flag describes, saved
for ``cgbench schedule`` (which replays that round and says why the request was deferred)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cgbench.config.schema import BenchConfig
from cgbench.engine.replay import state_from_engine
from cgbench.pipeline import build_engine
from cgbench.results.health import wait_threshold


class _Found(Exception):
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


def first_long_wait_state(cfg: BenchConfig, threshold: int | None = None) -> dict[str, Any] | None:
    """The ``cgbench schedule`` state at the start of the first round in which a request is deferred
    for the ``threshold``-th consecutive time (re-running the deterministic simulator up to that
    round only). None when no request waits that long or the backend is not the simulator."""
    if cfg.backend.name != "sim":
        return None
    limit = threshold if threshold is not None else wait_threshold(cfg)
    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    engine = build_engine(oracle)
    schedule = engine.scheduler.schedule

    def watched(queue):
        head = queue[0] if queue else None
        snap = state_from_engine(engine, oracle) if head is not None and head.cg_wait_iters >= limit - 1 else None
        result = schedule(queue)
        if snap is not None and result.deferred is not None:
            raise _Found(snap)
        return result

    engine.scheduler.schedule = watched  # type: ignore[method-assign]
    try:
        engine.run()
    except _Found as found:
        return found.state
    return None
