"""Replay one scheduling round from a saved engine state (``cgbench schedule STATE.json``).

A state file describes the engine at the start of one scheduling round: limits (``engine``), the
captured grid (``cg``), the batch counters (``batch``), the hidden chunked-prefill request and the
waiting queue, head first. ``load_state`` / ``parse_state`` turn it into a ``RoundState``;
``replay_round`` builds the engine's own objects from it (``Context``, ``Request``, ``Grid``,
``Policy``, ``Scheduler``), runs ``Scheduler.schedule`` once and reports what the round decided and
which graph the resulting step replays, exactly as ``Engine.run`` / ``Engine.advance`` would.
``state_from_engine`` writes the same format from a live engine, so a round inside a full run can
be replayed decision by decision.

Decisions about the format (docs/schedule.md gives the user's view):

* ``cg`` takes the ``CGConfig`` keys with their defaults (Megatron's, as ``conf/cg/megatron.yaml``).
  A ``graphs`` list means ``kind: explicit`` (the list in stored order, validated against the
  engine limits); without it the grid is generated from the other keys.
* ``engine`` takes the ``EngineConfig`` keys plus ``free_blocks`` (default: the whole pool free).
* ``batch.prefill``, ``batch.paused`` and ``batch.pinned`` (handoff-pinned Mamba slots) default to 0;
  ``batch.active_tokens`` defaults to ``decode * (1 + num_speculative_tokens)``, the only value it
  can have when ``prefill`` is 0. ``batch.previous_prefill`` (written only under
  ``engine.async_overlap``): the prefill count of the step before the round; with it 0 and nothing
  paused, a deferred head is an overlap step (no wait).
* The chunked request (``chunked_request``) is the queue's head. If the queue lists it, it must be
  ``queue[0]`` and agree on ``prompt_tokens`` (= ``remaining``) and ``finished``; if the queue omits
  it, it is inserted at the head. It is hidden: not counted in ``batch``.
* Every other queued request has ``finished`` 0: only the chunked request has prefilled tokens.
* ``prefix_cache`` (only with ``engine.prefix_caching``): the KV pool's prefix cache as
  ``PrefixCache.to_state`` writes it (its LRU clock, the free blocks in bag order, every block's hash,
  references, stamp, parent and child count, the hash map, the requests' block tables and block
  hashes, the Mamba slots and cached states); without it the cache starts empty.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections import deque
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from cgbench.config.limits import validate_within_limits
from cgbench.config.plugin_schema import schema_types
from cgbench.config.registry.grids import grid_kind
from cgbench.config.registry.plugins import plugin_names
from cgbench.config.registry.policies import BUILTIN_POLICIES, option_sections, options_of, policy_spec
from cgbench.config.schema import (
    POLICIES,
    BenchConfig,
    CGConfig,
    ConfigError,
    EngineConfig,
    ModelConfig,
    PolicyConfig,
)
from cgbench.engine.batch_invariant import ssm_alignment
from cgbench.engine.context import Context
from cgbench.engine.policy_registry import build_policy
from cgbench.engine.prefix_cache import new_prefix_cache
from cgbench.engine.request import Request, make_request
from cgbench.engine.scheduler import GraphChoice, Scheduler, gating_active
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid

_TOP_KEYS = ("description", "model", "engine", "cg", "policy", "batch", "chunked_request", "queue", "prefix_cache")
_REQUIRED_TOP = ("model", "engine", "batch", "queue")
_BATCH_KEYS = ("active_tokens", "prefill", "decode", "paused", "pinned", "previous_prefill")
_CHUNKED_KEYS = ("id", "remaining", "finished")
_QUEUE_KEYS = ("id", "prompt_tokens", "finished", "cg_wait_iters")
# The format's keys, read by its JSON Schema (cgbench.results.schema): top level, required, per record.
STATE_KEYS: dict[str, tuple[str, ...]] = {"top": _TOP_KEYS, "required": _REQUIRED_TOP, "batch": _BATCH_KEYS,
                                          "chunked_request": _CHUNKED_KEYS, "queue": _QUEUE_KEYS}


# ---------------------------------------------------------------------------------------------
# Typed reading of plain JSON values


def _what(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    return "a list" if isinstance(value, list) else "an object"


def _unknown(key: str, known: typing.Iterable[str]) -> ConfigError:
    known = list(known)
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
    return ConfigError(f"{key}: unknown key{hint}")


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: must be an integer, got {_what(value)}")
    return value


def _object(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be an object, got {_what(value)}")
    return value


def _typed(value: Any, tp: Any, key: str) -> Any:
    """``value`` checked (and, for dataclasses, converted) against the annotation ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _typed(value, inner, key)
    if origin is list:
        (inner,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: must be a list, got {_what(value)}")
        return [_typed(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, inner = typing.get_args(tp)
        return {str(k): _typed(v, inner, f"{key}.{k}") for k, v in _object(value, key).items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: must be true or false, got {_what(value)}")
        return value
    if tp is int:
        return _int(value, key)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: must be a number, got {_what(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: must be a string, got {_what(value)}")
        return value
    if isinstance(tp, type) and is_dataclass(tp):
        return _fill(tp, value, key)
    raise TypeError(f"{key}: unsupported annotation {tp!r}")  # a settings field of a new kind


def _fill(cls: type, value: Any, key: str, extra: tuple[str, ...] = ()) -> Any:
    """A ``cls`` dataclass from a JSON object: defaults for absent keys, unknown keys refused."""
    obj = _object(value, key)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    kwargs = {}
    for k, v in obj.items():
        if k in extra:
            continue
        if k not in hints:
            raise _unknown(f"{key}.{k}", names + list(extra))
        kwargs[k] = _typed(v, hints[k], f"{key}.{k}")
    return cls(**kwargs)


def _record(obj: dict[str, Any], key: str, known: tuple[str, ...],
            required: tuple[str, ...]) -> dict[str, Any]:
    for k in obj:
        if k not in known:
            raise _unknown(f"{key}.{k}", known)
    for k in required:
        if k not in obj:
            raise ConfigError(f"{key}.{k}: missing (required)")
    return obj


def _count(obj: dict[str, Any], name: str, key: str, default: int | None = None, low: int = 0) -> int:
    if name not in obj:
        if default is None:
            raise ConfigError(f"{key}.{name}: missing (required)")
        return default
    v = _int(obj[name], f"{key}.{name}")
    if v < low:
        raise ConfigError(f"{key}.{name}: must be >= {low}, got {v}")
    return v


# ---------------------------------------------------------------------------------------------
# The state


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
        if self.engine.prefix_caching:
            ctx.prefix = new_prefix_cache(self.engine, self.model.kind == "hybrid", self.engine.block_size)
            if self.prefix_cache is not None:
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


def load_state(path: str | Path) -> RoundState:
    """Read and validate a state file; any problem is a ``ConfigError`` naming the file and field."""
    from cgbench.safeio import read_json

    return parse_state(read_json(path), str(path))


def parse_state(doc: Any, source: str = "state") -> RoundState:
    """Validate a state document (the parsed JSON) and build a ``RoundState``."""
    try:
        return _parse(doc, source)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _parse(doc: Any, source: str) -> RoundState:
    if not isinstance(doc, dict):
        raise ConfigError(f"the state must be a JSON object, got {_what(doc)}")
    for k in doc:
        if k not in _TOP_KEYS:
            raise _unknown(k, _TOP_KEYS)
    for k in _REQUIRED_TOP:
        if k not in doc:
            raise ConfigError(f"{k}: missing (required)")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"description: must be a string, got {_what(description)}")

    model_doc = _object(doc["model"], "model")
    if "kind" not in model_doc:
        raise ConfigError("model.kind: missing (required): transformer or hybrid")
    model: ModelConfig = _fill(ModelConfig, model_doc, "model")
    engine: EngineConfig = _fill(EngineConfig, doc["engine"], "engine", extra=("free_blocks",))
    cg = _cg(doc.get("cg", {}))
    policy = _policy(doc.get("policy", {}))
    # the limits compose applies (sizes bounded before anything is built: a layer pattern repeated
    # 10^9 times is refused, not expanded), then the cross-field rules
    validate_within_limits(BenchConfig(model=model, cg=cg, engine=engine, policy=policy))
    grid = build_grid(cg, engine, model)

    engine_doc = _object(doc["engine"], "engine")
    pool = engine.resolved_kv_blocks() + engine.paused_blocks
    free_blocks = _count(engine_doc, "free_blocks", "engine", default=pool)
    if free_blocks > pool:
        raise ConfigError(f"engine.free_blocks: {free_blocks} exceeds the KV pool (kv_blocks + paused_blocks "
                          f"= {pool})")

    batch = _batch(_object(doc["batch"], "batch"), engine)
    queue, chunked_id = _queue(doc["queue"], doc.get("chunked_request"), engine)
    prefix_doc = doc.get("prefix_cache")
    if prefix_doc is not None:
        if not engine.prefix_caching:
            raise ConfigError("prefix_cache: needs engine.prefix_caching true")
        try:
            new_prefix_cache(engine, model.kind == "hybrid", engine.block_size).load_state(prefix_doc)
        except ValueError as e:
            raise ConfigError(f"prefix_cache.{e}") from None
    return RoundState(source=source, model=model, engine=engine, cg=cg, policy=policy,
                      free_blocks=free_blocks, batch=batch, chunked_request_id=chunked_id,
                      queue=queue, grid=grid, description=description, prefix_cache=prefix_doc)


def _cg(value: Any) -> CGConfig:
    obj = _object(value, "cg")
    cg: CGConfig = _fill(CGConfig, obj, "cg")
    if "graphs" in obj:
        if "kind" not in obj:
            cg.kind = "explicit"
        elif cg.kind != "explicit" and cg.graphs:
            raise ConfigError(f"cg.graphs: an explicit list needs cg.kind explicit (or no cg.kind), "
                              f"got cg.kind {cg.kind!r}")
    return cg


def _policy(value: Any) -> PolicyConfig:
    """The state's option sections: the built-in policies' and those of installed plug-ins it holds."""
    obj = _object(value, "policy")
    if "name" in obj:
        raise ConfigError("policy.name: the state holds policy options only; choose the policy with --policy")
    installed = set(plugin_names("policies")) - set(BUILTIN_POLICIES)
    plugins = [k for k in obj if k in installed and policy_spec(k, key=f"policy.{k}").options is not None]
    policy_type, _ = schema_types(plugins)
    return _fill(policy_type, obj, "policy")


def _batch(obj: dict[str, Any], e: EngineConfig) -> Batch:
    _record(obj, "batch", _BATCH_KEYS, ("decode",))
    q = 1 + e.num_speculative_tokens
    prefill = _count(obj, "prefill", "batch", default=0)
    decode = _count(obj, "decode", "batch")
    paused = _count(obj, "paused", "batch", default=0)
    previous = _count(obj, "previous_prefill", "batch", default=0) if "previous_prefill" in obj else -1
    if prefill == 0:
        active = _count(obj, "active_tokens", "batch", default=decode * q)
    else:
        active = _count(obj, "active_tokens", "batch")
    if prefill + decode + paused > e.max_requests:
        raise ConfigError(f"batch: prefill + decode + paused = {prefill + decode + paused} exceeds "
                          f"engine.max_requests ({e.max_requests})")
    pinned = _count(obj, "pinned", "batch", default=0)
    if pinned and not e.handoff_pinning:
        raise ConfigError("batch.pinned: pinned handoff slots need engine.handoff_pinning true")
    if prefill + decode + paused + pinned > e.max_requests:
        raise ConfigError(f"batch.pinned: prefill + decode + paused + pinned = {prefill + decode + paused + pinned} "
                          f"exceeds the engine.max_requests ({e.max_requests}) Mamba slots")
    decode_tokens = decode * q
    if prefill == 0 and active != decode_tokens:
        raise ConfigError(f"batch.active_tokens: with no prefill in the batch it must equal decode * "
                          f"(1 + num_speculative_tokens) = {decode_tokens}, got {active}")
    if active < decode_tokens + prefill:
        raise ConfigError(f"batch.active_tokens: must be >= decode * (1 + num_speculative_tokens) + prefill "
                          f"= {decode_tokens + prefill} (each prefill has at least one token), got {active}")
    if active > e.max_tokens:
        raise ConfigError(f"batch.active_tokens: {active} exceeds engine.max_tokens ({e.max_tokens})")
    return Batch(active, prefill, decode, paused, pinned, previous)


def _queue(value: Any, chunked_value: Any, e: EngineConfig) -> tuple[tuple[QueueEntry, ...], int]:
    if not isinstance(value, list):
        raise ConfigError(f"queue: must be a list (head first), got {_what(value)}")
    raw = [_record(_object(v, f"queue[{i}]"), f"queue[{i}]", _QUEUE_KEYS, ("id",))
           for i, v in enumerate(value)]
    ids = [_count(r, "id", f"queue[{i}]") for i, r in enumerate(raw)]

    chunked: dict[str, Any] | None = None
    if chunked_value is not None:
        chunked = _record(_object(chunked_value, "chunked_request"), "chunked_request", _CHUNKED_KEYS,
                          _CHUNKED_KEYS)
        cid = _count(chunked, "id", "chunked_request")
        _count(chunked, "remaining", "chunked_request", low=1)
        _count(chunked, "finished", "chunked_request", low=1)
        if not e.chunked_prefill:
            raise ConfigError("chunked_request: only a chunked-prefill engine has one "
                              "(engine.chunked_prefill is false)")
        if cid in ids and ids.index(cid) != 0:
            raise ConfigError(f"chunked_request.id: request {cid} is queue[{ids.index(cid)}]; the chunked "
                              "request must be the queue's head (queue[0])")
        if cid not in ids:  # the queue may omit it: it is the head by definition
            raw.insert(0, {"id": cid})
            ids.insert(0, cid)

    entries = []
    seen: dict[int, int] = {}
    for i, (r, rid) in enumerate(zip(raw, ids, strict=True)):
        key = f"queue[{i}]"
        if rid in seen:
            raise ConfigError(f"{key}.id: duplicate request id {rid} (also queue[{seen[rid]}])")
        seen[rid] = i
        is_chunked = chunked is not None and i == 0
        if is_chunked:
            for mine, theirs in (("prompt_tokens", "remaining"), ("finished", "finished")):
                if mine in r and _int(r[mine], f"{key}.{mine}") != chunked[theirs]:
                    raise ConfigError(f"{key}.{mine}: {r[mine]} disagrees with chunked_request.{theirs} "
                                      f"({chunked[theirs]}) for the same request")
            prompt, finished = chunked["remaining"], chunked["finished"]
        else:
            prompt = _count(r, "prompt_tokens", key, low=1)
            finished = _count(r, "finished", key, default=0)
            if finished != 0:
                raise ConfigError(f"{key}.finished: must be 0: only the chunked request (chunked_request) "
                                  f"has prefilled tokens, got {finished}")
        waits = _count(r, "cg_wait_iters", key, default=0)
        total = finished + prompt
        if total > e.max_sequence_length:
            raise ConfigError(f"{key}.prompt_tokens: a prompt of {total} tokens exceeds "
                              f"engine.max_sequence_length ({e.max_sequence_length}); the engine fails it on "
                              "arrival")
        # A queued prompt over max_tokens without chunked prefill is a real state: an evicted request
        # re-queued with its generated tokens (Megatron's rule) can never be admitted again, and the
        # round shows it blocking the queue.
        entries.append(QueueEntry(rid, prompt, finished, waits))
    return tuple(entries), (-1 if chunked is None else entries[0].id)


# ---------------------------------------------------------------------------------------------
# Replay


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
    sched = Scheduler(ctx, state.grid, pol, chunked_prefill=state.engine.chunked_prefill,
                      gating=gating_active(pol, state.cg, state.grid),
                      flash_attn_guard=state.engine.flash_attn_guard,
                      ssm_alignment=ssm_alignment(state.engine, state.grid.strict),
                      gate_on_computed=state.engine.prefix_gate == "computed",
                      async_overlap=state.engine.async_overlap)
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


# ---------------------------------------------------------------------------------------------
# From a live engine


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
    if cfg.engine.async_overlap and engine.scheduler.previous_prefill >= 0:
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

