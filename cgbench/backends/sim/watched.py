"""A ``sim`` backend whose every step something keeps (the repricing log, the emitted Megatron log):
the steps are priced by the wrapped backend, one at a time in order, and every other call goes to it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cgbench.engine.contract import StepWork, StretchPricer, attention_pairs
from cgbench.engine.request import Request


class WatchedBackend:
    """Wraps ``backend``; a subclass's ``run_step`` calls ``priced`` and keeps what it needs. It offers
    no ``StretchPricer``: the step-by-step engine runs it, each step priced once, in order."""

    pricer: StretchPricer | None = None

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.device = backend.device
        self.captured = backend.captured

    def priced(self, work: StepWork, decodes: Sequence[Request]) -> float:
        """The wrapped backend's duration of ``work``, its attention pairs filled in first (kept with it)."""
        if work.attention_pairs is None:
            work.attention_pairs = attention_pairs(work)
        return self.backend.run_step(work, decodes)

    def release(self, req: Request) -> None:
        self.backend.release(req)

    def token_ids(self, req: Request) -> list[int]:
        return self.backend.token_ids(req)

    def report(self) -> dict | None:
        return self.backend.report()
