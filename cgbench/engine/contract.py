"""The contract between the engine and whatever runs or prices a step.

One step flows one way: the scheduler admits chunks (``Admission``), the engine resolves the step's
graph and builds its ``StepWork``, a ``StepBackend`` runs it and returns its duration, and the
engine records it (``StepRecord`` when tracing). A backend that prices steps instead of running them
(the simulator) also hands the event-proportional engine a ``StretchPricer``, which prices whole
decode stretches; the composition root injects it, the engine never looks for it.

Attention pairs (Σ over a step's rows of new tokens × attended KV tokens, causal) are what the
pricers' attention term counts; they are defined here, once, from a ``StepWork`` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cgbench.engine.request import Request


@dataclass(slots=True, init=False)  # written __init__s here: dataclass-made ones stay slow when compiled
class Admission:
    """One chunk the scheduler admitted this round; ``final`` when it ends the request's prompt.
    ``chunk`` prompt tokens gain KV; ``computed`` of them run in the step (fewer when a prefix-cache
    hit skips the rest: ``engine.prefix_caching``; -1 given: all of them)."""

    request: Request
    chunk: int
    final: bool
    computed: int

    def __init__(self, request: Request, chunk: int, final: bool, computed: int = -1) -> None:
        self.request = request
        self.chunk = chunk
        self.final = final
        self.computed = chunk if computed < 0 else computed


# not frozen: one is built per simulated step, and frozen init costs 4x; the written __init__ holds the defaults
@dataclass(slots=True, init=False)
class StepWork:
    """What one engine step computes: its real shape ``(tokens, prefills, decodes)``, the KV tokens it
    attends (``context_tokens``: every row's stored KV plus its new tokens), the replayed graph
    ``(Tg, Pg, Dg)`` or ``None`` when the step runs eager and then why (``eager_reason``), and the
    chunks admitted into it (valid while the step runs). ``attention_pairs`` is left ``None`` by the
    engine; a pricer fills it with ``attention_pairs(work)`` (``None`` makes a cost model estimate)."""

    tokens: int
    prefills: int
    decodes: int
    context_tokens: int
    graph: tuple[int, int, int] | None
    attention_pairs: int | None
    eager_reason: str | None
    admitted: Sequence[Admission]

    def __init__(self, tokens: int, prefills: int, decodes: int, context_tokens: int,
                 graph: tuple[int, int, int] | None, attention_pairs: int | None = None,
                 eager_reason: str | None = None, admitted: Sequence[Admission] = ()) -> None:
        self.tokens = tokens
        self.prefills = prefills
        self.decodes = decodes
        self.context_tokens = context_tokens
        self.graph = graph
        self.attention_pairs = attention_pairs
        self.eager_reason = eager_reason
        self.admitted = admitted


def attention_pairs(work: StepWork) -> int:
    """Σ over the step's rows of new tokens × attended KV tokens. A chunk computing ``c`` tokens after
    ``done - c`` stored ones (prefilled, or skipped by a prefix-cache hit) attends them all plus the
    causal half of itself; each of ``D`` decode rows of
    ``q`` tokens attends its whole stored context plus the causal half of its ``q`` tokens."""
    pairs = chunk_tokens = chunk_context = 0
    for a in work.admitted:
        c, done = a.computed, a.request.finished_chunk  # finished_chunk already includes this chunk
        chunk_tokens += c
        chunk_context += done
        pairs += c * (done - c) + c * (c + 1) // 2
    decode_tokens = work.tokens - chunk_tokens
    if work.decodes:
        q = decode_tokens // work.decodes
        stored = work.context_tokens - chunk_context - decode_tokens  # the decode rows' stored KV
        pairs += q * stored + decode_tokens * (q + 1) // 2
    return pairs


def decode_growth(work: StepWork) -> tuple[int, int]:
    """(context tokens, attention pairs) one decode-only step of ``work``'s shape adds to the next: each
    of its ``D`` rows stores its ``q`` new tokens, which the next step's ``q`` tokens attend."""
    q = work.tokens // work.decodes
    return work.tokens, q * work.tokens


@dataclass(slots=True)
class StepRecord:
    """One step of ``--trace``: when it ran, its real shape, its graph or why eager, what it admitted."""

    step: int
    t_s: float
    dt_s: float
    real: tuple[int, int, int]
    graph: tuple[int, int, int] | None
    eager_reason: str | None
    admitted: list[tuple[int, int, bool]]
    deferred: int | None
    queue_len: int
    paused: int
    rank: int | None = None  # the expert- or data-parallel rank (ep_size or dp_size > 1 only)

    def to_json(self) -> dict:
        doc = {"step": self.step, "t_s": round(self.t_s, 9), "dt_s": round(self.dt_s, 9),
               "real": list(self.real), "graph": list(self.graph) if self.graph else None,
               "eager_reason": self.eager_reason, "admitted": [list(a) for a in self.admitted],
               "deferred": self.deferred, "queue_len": self.queue_len, "paused": self.paused}
        if self.rank is not None:
            doc["rank"] = self.rank
        return doc


class StepPricer(Protocol):
    """Prices a step without running it (the simulator's cost models)."""

    name: str

    def step_time(self, work: StepWork) -> float:
        """Seconds the step takes."""
        ...


class StretchPricer(StepPricer, Protocol):
    """A pricer that also prices decode stretches: runs of decode-only steps of one shape whose context
    and attention pairs grow by a fixed amount per step. Each must give the same floats as
    ``step_time`` on every step of the stretch."""

    def stepper(self, work: StepWork) -> Callable[[int, int], float]:
        """``f(context_tokens, attention_pairs)``: ``step_time`` for steps of ``work``'s shape."""
        ...

    def decode_stretch_times(self, work: StepWork, k: int, ctx_step: int, pairs_step: int) -> Any:
        """The float64 array of the times of ``k`` steps from ``work`` on, growing per step by
        ``ctx_step`` context tokens and ``pairs_step`` attention pairs."""
        ...


class StepBackend(Protocol):
    """Runs (or prices) the engine's steps. ``pricer`` is the backend's ``StretchPricer`` when its step
    times come from one (then it reads no decode rows and the event-proportional engine may run it),
    ``None`` when steps really run. ``captured`` is the set of grid shapes it replays as captured
    graphs, ``None`` when it replays every graph of the grid (the simulator prices them all): a step
    whose grid graph is not in the set runs eager, for ``scheduler.NOT_CAPTURED``."""

    pricer: StretchPricer | None
    captured: frozenset[tuple[int, int, int]] | None

    def run_step(self, work: StepWork, decodes: Sequence[Request]) -> float:
        """Run (or price) one step; ``decodes`` are the running requests in row order, up to date.
        Returns the step's duration in seconds."""
        ...

    def release(self, req: Request) -> None:
        """``req`` finished or lost its KV (eviction): drop whatever the backend holds for it."""
        ...

    def token_ids(self, req: Request) -> list[int]:
        """The tokens the backend generated for ``req`` (empty when it generates none)."""
        ...

    def report(self) -> dict | None:
        """The backend's own section of the result document, or ``None``."""
        ...
