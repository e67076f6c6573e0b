"""The state file of ``cgbench schedule``: one scheduling round's starting state, read and checked.

A state file describes the engine at the start of one scheduling round: limits (``engine``), the
captured grid (``cg``), the batch counters (``batch``), the hidden chunked-prefill request and the
waiting queue, head first. ``load_state`` / ``parse_state`` turn it into the engine's
``cgbench.engine.replay.RoundState`` (its grid built), or refuse it with one ``ConfigError`` naming
the file and the field; ``cgbench.engine.replay`` replays the round and writes the format
(``state_from_engine``).

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
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from cgbench.config.limits import validate_within_limits
from cgbench.config.plugin_schema import schema_types
from cgbench.config.registry.plugins import plugin_names
from cgbench.config.registry.policies import BUILTIN_POLICIES, policy_spec
from cgbench.config.schema import BenchConfig, CGConfig, ConfigError, EngineConfig, ModelConfig, PolicyConfig
from cgbench.engine.prefix_cache import new_prefix_cache
from cgbench.engine.replay import Batch, QueueEntry, RoundState
from cgbench.grids.build import build_grid

_TOP_KEYS = ("description", "model", "engine", "cg", "policy", "batch", "chunked_request", "queue", "prefix_cache")
_REQUIRED_TOP = ("model", "engine", "batch", "queue")
_BATCH_KEYS = ("active_tokens", "prefill", "decode", "paused", "pinned", "previous_prefill")
_CHUNKED_KEYS = ("id", "remaining", "finished")
_QUEUE_KEYS = ("id", "prompt_tokens", "finished", "cg_wait_iters")
# The format's keys, read by its JSON Schema (cgbench.results.schema): top level, required, per record.
STATE_KEYS: dict[str, tuple[str, ...]] = {"top": _TOP_KEYS, "required": _REQUIRED_TOP, "batch": _BATCH_KEYS,
                                          "chunked_request": _CHUNKED_KEYS, "queue": _QUEUE_KEYS}


# -- typed reading of plain JSON values --------------------------------------------------------------


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
    from cgbench.config.limits import MAX_SIZE

    if v > MAX_SIZE:  # a round adds to its counts (a wait at 2^63-1 would leave 64 bits on output)
        raise ConfigError(f"{key}.{name}: {v:,} is more than the {MAX_SIZE:,} limit of a count")
    return v


# -- the state --------------------------------------------------------------------------------------


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
