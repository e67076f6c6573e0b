"""``cgbench explain RUN.json --request N``: why request N of a run waited, from the run's own records.

A default run records, outside its metrics, every deferred request's waits (``deferrals``,
``cgbench.results.deferrals``) and its whole config. The simulator is deterministic, so the round
in which request N was first deferred (or the round of any step, ``--step K``) is rebuilt by running
the recorded config again with the step-by-step engine and a ``RoundObserver``:

1. a first pass runs the whole run, counting rounds, noting the round of each wanted request's
   first deferral (and of step K), and checks that the replayed run's deferral record equals the
   recorded one (else the run is not the one recorded: another cgbench, a changed trace);
2. a second pass stops at those rounds and saves each one's starting state in the ``cgbench
   schedule`` format (``state_from_engine``), with what the engine decided in it.

Each state is then replayed with ``schedule``'s code (``replay_round``) under the run's policy,
which must agree with the engine, and under what-ifs: no gating (``budget``), the candidate shape
captured as one more graph, fewer running decodes. Cost: one step-by-step simulation of the run plus
one up to the last round asked for (the event-proportional engine the run used is not watched).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.engine.core import Engine
from cgbench.engine.replay import Batch, RoundDecision, RoundState, replay_round, state_from_engine
from cgbench.engine.request import Request
from cgbench.engine.scheduler import RoundResult
from cgbench.results.deferrals import DEFERRAL_COLUMNS, deferral_record, deferral_rows
from cgbench.results.state_file import parse_state

NO_CHUNK_SIZE = "no_chunk_size"  # the miss reason of a chunk that no graph's token size can take exactly


@dataclass(frozen=True)
class EngineRound:
    """What the engine itself decided in one round (the observer's record, for the agreement check)."""

    step: int
    deferred: int | None
    admitted: tuple[tuple[int, int, bool], ...]
    batch_after: tuple[int, int, int]


@dataclass(frozen=True)
class WhatIf:
    """One change to the round's state and what the run's policy then does with the request."""

    change: str
    admitted: bool
    detail: str


@dataclass(frozen=True)
class Explanation:
    request: int | None  # the request explained (None: --step without a deferral in that round)
    step: int
    policy: str
    state: dict[str, Any]  # the round's starting state, ``cgbench schedule``'s format
    decision: RoundDecision  # the replay under the run's policy
    engine: EngineRound
    miss_reason: str | None  # why the deferred candidate matched no graph
    what_ifs: tuple[WhatIf, ...]
    waits: dict[str, int] | None  # the request's deferral record (None: never deferred)
    gating: str = ""  # "yes — why" / "no — why": whether the run gated at all (engine.gating)

    @property
    def agrees(self) -> bool:
        d = self.decision
        return (d.deferred == self.engine.deferred and d.admitted == self.engine.admitted
                and d.batch_after == self.engine.batch_after)

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "step": self.step, "policy": self.policy, "agrees": self.agrees,
                "decision": self.decision.to_json(), "miss_reason": self.miss_reason,
                "what_ifs": [{"change": w.change, "admitted": w.admitted, "detail": w.detail} for w in self.what_ifs],
                "waits": self.waits, "gating": self.gating, "state": self.state}


# ---------------------------------------------------------------------------------------------
# What a run must hold


def explainable_config(doc: dict[str, Any], source: str) -> BenchConfig:
    """The config of the result ``doc`` for a re-run; a ConfigError (one line) when the run cannot be
    rebuilt: no deferral record (an older result), not the simulator, expert parallelism."""
    if "deferrals" not in doc:
        raise ConfigError(f"{source}: no 'deferrals' record (a result written by an older cgbench): run it "
                          "again to explain it")
    record = doc["deferrals"]
    if (not isinstance(record, dict) or record.get("columns") != list(DEFERRAL_COLUMNS)
            or not isinstance(record.get("rows"), list)
            or not all(isinstance(r, list) and len(r) == len(DEFERRAL_COLUMNS)
                       and all(isinstance(v, int) and not isinstance(v, bool) for v in r) for r in record["rows"])):
        raise ConfigError(f"{source}: 'deferrals' must be {{\"columns\": {list(DEFERRAL_COLUMNS)}, \"rows\": "
                          "[[integers], ...]}")
    config = doc.get("config")
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: no 'config' record: the run cannot be rebuilt")
    backend = (config.get("backend") or {}).get("name")
    if backend != "sim":
        raise ConfigError(f"{source}: a backend={backend} run: its steps are timed on real hardware and cannot "
                          "be replayed exactly; explain needs a backend=sim run")
    if (config.get("engine") or {}).get("ep_size", 1) > 1:
        raise ConfigError(f"{source}: an expert-parallel run (engine.ep_size > 1) has one engine state per rank; "
                          "explain replays a single engine")
    if (config.get("engine") or {}).get("dp_size", 1) > 1:
        raise ConfigError(f"{source}: a data-parallel run (engine.dp_size > 1) has one engine state per rank; "
                          "explain replays a single engine")
    return config_from_record(config, source)


def config_from_record(config: dict[str, Any], source: str) -> BenchConfig:
    """A result's ``config`` record back as a validated ``BenchConfig``."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(BenchConfig), config))
    except OmegaConfBaseException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{source}: config: {first}") from None
    assert isinstance(cfg, BenchConfig)
    from cgbench.config.limits import validate_within_limits

    try:  # the size checks run applies, before the re-run builds anything
        return validate_within_limits(cfg)
    except ConfigError as e:
        raise ConfigError(f"{source}: config: {e}") from None


# ---------------------------------------------------------------------------------------------
# The two passes


class _Counting:
    """Pass 1: numbers every round; notes each wanted request's first deferral and step K's round."""

    def __init__(self, engine: Engine, wanted: set[int] | None, step: int | None) -> None:
        self.engine, self.wanted, self.step = engine, wanted, step
        self.rounds = 0
        self.first: dict[int, int] = {}  # request id -> round of its first deferral
        self.step_round: int | None = None  # the last round of step K (the one that scheduled it)

    def before(self, queue: deque[Request]) -> None:
        if self.engine.step == self.step:
            self.step_round = self.rounds

    def after(self, result: RoundResult) -> None:
        d = result.deferred
        if d is not None and d.id not in self.first and (self.wanted is None or d.id in self.wanted):
            self.first[d.id] = self.rounds
        self.rounds += 1


class _Stop(Exception):
    pass


class _Snapshots:
    """Pass 2: the starting state of each chosen round and what the engine decided in it."""

    def __init__(self, engine: Engine, cfg: BenchConfig, rounds: set[int]) -> None:
        self.engine, self.cfg, self.rounds = engine, cfg, rounds
        self.last = max(rounds)
        self.n = 0
        self.pending: dict[str, Any] | None = None
        self.found: dict[int, tuple[dict[str, Any], EngineRound]] = {}

    def before(self, queue: deque[Request]) -> None:
        self.pending = state_from_engine(self.engine, self.cfg) if self.n in self.rounds else None

    def after(self, result: RoundResult) -> None:
        if self.pending is not None:
            ctx = self.engine.ctx
            self.found[self.n] = (self.pending, EngineRound(
                self.engine.step, result.deferred.id if result.deferred is not None else None,
                tuple((a.request.id, a.chunk, a.final) for a in ctx.admitted),
                (ctx.active_tokens, ctx.prefill_count, ctx.decode_count)))
        if self.n == self.last:
            raise _Stop
        self.n += 1


def _oracle(cfg: BenchConfig) -> tuple[Engine, BenchConfig]:
    from cgbench.pipeline import build_engine

    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    engine = build_engine(oracle)
    assert isinstance(engine, Engine)  # ep_size 1: the step-by-step engine
    return engine, oracle


def rebuild_rounds(doc: dict[str, Any], source: str, *, requests: set[int] | None = None,
                   step: int | None = None) -> tuple[BenchConfig, dict[int, int], int | None,
                                                     dict[int, tuple[dict[str, Any], EngineRound]]]:
    """Re-run ``doc``'s config: (config, request -> round of its first deferral, round of ``step``,
    round -> (starting state, the engine's decision)) for the ``requests`` asked for (None: every
    deferred request) and ``step``. A replay whose deferral record differs from the recorded one is a
    ConfigError: the result was not made by this cgbench from this config."""
    cfg = explainable_config(doc, source)
    engine, oracle = _oracle(cfg)
    counting = _Counting(engine, requests, step)
    engine.round_observer = counting
    state = engine.run()
    replayed = deferral_record(state.requests)
    if replayed != doc["deferrals"]:
        raise ConfigError(f"{source}: the re-run's deferrals differ from the recorded ones: the result was made "
                          "by another cgbench version, or its trace or calibration file changed")
    chosen = set(counting.first.values())
    if counting.step_round is not None:
        chosen.add(counting.step_round)
    found: dict[int, tuple[dict[str, Any], EngineRound]] = {}
    if chosen:
        engine, oracle = _oracle(cfg)
        snaps = _Snapshots(engine, oracle, chosen)
        engine.round_observer = snaps
        try:
            engine.run()
        except _Stop:
            pass
        found = snaps.found
    return cfg, counting.first, counting.step_round, found


# ---------------------------------------------------------------------------------------------
# One round explained


def explain_round(cfg: BenchConfig, state_doc: dict[str, Any], engine_round: EngineRound, request: int | None,
                  rows: dict[int, dict[str, int]]) -> Explanation:
    """Replay one rebuilt round under the run's policy and the what-ifs; ``rows``: the run's
    deferral record by request id (``deferral_rows``)."""
    state = parse_state(state_doc, f"step {engine_round.step}")
    policy = cfg.policy.name
    decision = replay_round(state, policy)
    focus = request if request is not None else decision.deferred
    miss = None
    if decision.deferred is not None and decision.deferred_candidate is not None:
        # chunked prefill snaps a chunk to fill a graph exactly: a candidate a larger graph covers
        # (with padding) is still deferred when no graph's token size is within the chunk's reach
        miss = state.grid.lookup(*decision.deferred_candidate)[1] or NO_CHUNK_SIZE
    what_ifs: tuple[WhatIf, ...] = ()
    if focus is not None and focus == decision.deferred:
        what_ifs = _what_ifs(state, state_doc, policy, focus, decision)
    waits = rows.get(focus) if focus is not None else None
    from cgbench.pipeline import gating_of

    return Explanation(focus, engine_round.step, policy, state_doc, decision, engine_round, miss, what_ifs, waits,
                       gating_of(cfg).text)


def _admits(d: RoundDecision, rid: int) -> bool:
    return any(i == rid for i, _, _ in d.admitted)


def _shape(s: tuple[int, ...] | list[int]) -> str:
    return "(" + ", ".join(str(v) for v in s) + ")"


def _graph_text(d: RoundDecision) -> str:
    ran = f"graph {_shape(d.graph)}" if d.graph is not None else f"eager ({d.eager_reason})"
    return f"step {_shape(d.batch_after)} runs {ran}"


def _what_ifs(state: RoundState, state_doc: dict[str, Any], policy: str, rid: int,
              decision: RoundDecision) -> tuple[WhatIf, ...]:
    out = []
    if policy != "budget":
        free = replay_round(state, "budget")
        out.append(WhatIf("no gating (policy=budget)", _admits(free, rid), _graph_text(free)))
    cand = decision.deferred_candidate
    graphs = state_doc["cg"].get("graphs")
    if cand is not None and graphs is not None:
        doc = {**state_doc, "cg": {**state_doc["cg"], "graphs": [*graphs, list(cand)]}}
        try:
            more = replay_round(parse_state(doc, "what-if"), policy)
        except ConfigError as e:  # the shape is not a valid graph for these limits
            out.append(WhatIf(f"capture {_shape(cand)} as one more graph", False, f"not a valid graph: {e}"))
        else:
            out.append(WhatIf(f"capture {_shape(cand)} as one more graph", _admits(more, rid), _graph_text(more)))
    b = state.batch
    if b.prefill == 0 and b.decode > 0:
        q = 1 + state.engine.num_speculative_tokens
        for d in range(b.decode - 1, -1, -1):
            fewer = replace(state, batch=Batch(d * q, 0, d, b.paused))
            got = replay_round(fewer, policy)
            if _admits(got, rid):
                out.append(WhatIf(f"{b.decode - d} fewer running decode(s) (D={d})", True, _graph_text(got)))
                break
        else:
            out.append(WhatIf("fewer running decodes", False, "no decode count admits it in this round"))
    return tuple(out)


def explain(doc: dict[str, Any], source: str, *, request: int | None = None,
            step: int | None = None) -> Explanation:
    """Explain request ``request``'s first deferral in ``doc`` (a result document), or the round of
    ``step`` (for ``request`` if given). Every missing record is a one-line ConfigError."""
    if request is None and step is None:
        raise ConfigError("name a request (--request N) or a step (--step K)")
    metrics = doc.get("metrics") or {}
    total = (metrics.get("requests") or {}).get("total")
    if request is not None and isinstance(total, int) and not 0 <= request < total:
        raise ConfigError(f"--request {request}: out of range: the run has requests 0 to {total - 1}")
    steps = metrics.get("steps")
    if step is not None and isinstance(steps, int) and not 0 <= step < steps:
        raise ConfigError(f"--step {step}: out of range: the run ran steps 0 to {steps - 1}")
    explainable_config(doc, source)
    rows = deferral_rows(doc["deferrals"])
    if request is not None and step is None and request not in rows:
        off = "" if metrics.get("gating_active", True) else (
            " (gating was off: " + ((doc.get("gating") or {}).get("reason") or "metrics.gating_active is false") + ")")
        raise ConfigError(f"--request {request}: request {request} was never deferred by gating in this run{off}; "
                          "--step K shows any round")
    cfg, first, step_round, found = rebuild_rounds(
        doc, source, requests={request} if request is not None else set(), step=step)
    if step is not None:
        if step_round is None:
            raise ConfigError(f"--step {step}: the re-run has no round at step {step}")
        state_doc, eng = found[step_round]
    else:
        assert request is not None
        state_doc, eng = found[first[request]]
    return explain_round(cfg, state_doc, eng, request, rows)


def explain_all(doc: dict[str, Any], source: str) -> list[Explanation]:
    """Every deferred request of ``doc`` explained at its first deferral (two simulations in all)."""
    rows = deferral_rows(doc["deferrals"]) if "deferrals" in doc else {}
    cfg, first, _, found = rebuild_rounds(doc, source, requests=set(rows))
    return [explain_round(cfg, *found[first[rid]], rid, rows) for rid in sorted(rows)]
