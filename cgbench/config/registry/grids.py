"""The grid-family registry's config half: every ``cg.kind``, its family, the ``cg`` keys it reads
and its graph-count estimate.

``family`` says how the grid matches and how ``cgbench schedule`` saves it: ``megatron`` grids
(strict on hybrid models, saved as their explicit list) or ``peer`` grids (vLLM / SGLang /
TensorRT-LLM: never strict, exact decode sizes possible, saved as their ``cg`` keys and regenerated).
``reads``: the ``cg`` keys the kind reads beyond ``kind``, ``all_prefills`` and ``non_decode``
(which gating reads for every kind); every other key some kind reads is refused as unread
(``schema.unread_keys``). ``estimate``: an upper estimate of the graphs the kind builds (the lists
built on the way included) and the key that drives it, checked against ``limits.MAX_GRAPHS`` before
anything is built. The builders live in ``cgbench.grids.registry``; a plug-in's ``GridKind`` carries
its own ``build``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from cgbench.config.registry.plugin_source import foreign, shown
from cgbench.config.registry.plugins import builtin_or_plugin, names_with_plugins, plugin_error, plugin_where


class GridSettings(Protocol):
    """What a grid kind's estimate and its unread keys read of ``cg``: ``cgbench.config.schema.CGConfig``
    (which validates with this registry, so the registry names the fields it reads instead of importing it)."""

    kind: str
    num_cuda_graphs: int | None
    all_prefills: bool
    cuda_graph_max_tokens: int
    distribution: str
    mixed_prefill_count: int
    non_decode: bool
    sizes_per_octave: int
    p_per_octave: int
    graphs: list[list[int]]
    capture_sizes: list[int]
    max_capture_size: int
    piecewise: bool
    piecewise_sizes: list[int]
    piecewise_max_tokens: int
    padding: bool


class EngineLimits(Protocol):
    """What a grid kind's estimate reads of ``engine`` (``cgbench.config.schema.EngineConfig``)."""

    max_requests: int
    max_tokens: int
    num_speculative_tokens: int

FAMILIES = ("megatron", "peer")
MEGATRON_KEYS = ("num_cuda_graphs", "distribution", "mixed_prefill_count", "sizes_per_octave", "p_per_octave",
                 "cuda_graph_max_tokens")
PEER_KEYS = ("capture_sizes", "max_capture_size", "piecewise", "piecewise_sizes", "piecewise_max_tokens")


@dataclass(frozen=True)
class GridKind:
    """One ``cg.kind``. ``build`` (plug-ins only; the grids package builds the built-ins):
    ``(cg, engine, model) -> iterable of BatchShape`` (``cgbench.grids.shapes``), in stored order.
    ``unread``: extra keys this kind leaves unread for some settings (key -> why)."""

    name: str
    family: str
    reads: tuple[str, ...]
    estimate: Callable[[GridSettings, EngineLimits], tuple[int, str]]
    unread: Callable[[GridSettings], dict[str, str]] | None = None
    build: Callable[..., Any] | None = None
    summary: str = ""


# The peer engines' default capture limits, one source for their generators (``cgbench.grids.peers``)
# and the graph-count estimates below.
VLLM_MAX_CAPTURE_SIZE = 512  # vLLM's default cap on max_num_seqs * (1 + spec) * 2
SGLANG_MAX_BATCH_SIZE = 512  # SGLang's largest memory-dependent default cuda_graph_max_bs
TRTLLM_MAX_BATCH_SIZE = 128  # TensorRT-LLM's default cuda_graph_config.max_batch_size


def vllm_max_capture(max_requests: int, max_tokens: int, num_speculative_tokens: int, max_capture_size: int) -> int:
    """vLLM's largest capture size (tokens) without an explicit list (``cg.max_capture_size`` 0: its default)."""
    q = 1 + num_speculative_tokens
    return min(max_tokens, max_capture_size or min(max_requests * q * 2, VLLM_MAX_CAPTURE_SIZE))


def trtllm_max_batch(max_capture_size: int, max_requests: int) -> int:
    """TensorRT-LLM's largest graph batch size (``cg.max_capture_size`` 0: its default)."""
    return min(max_capture_size or TRTLLM_MAX_BATCH_SIZE, max_requests)


def _megatron_graphs(cg: GridSettings, e: EngineLimits, non_decode: bool) -> tuple[int, str]:
    n = cg.num_cuda_graphs
    if n is None or n == 0:
        return 0, "cg.num_cuda_graphs"
    cap = e.max_tokens
    octaves = math.log2(max(2, cap)) + 2
    if cg.distribution == "linear":
        sizes = cap / 16 + 40 if n == -1 else min(n, cap)
        key = "cg.num_cuda_graphs"
        p_values = 1
    else:
        sizes = octaves * cg.sizes_per_octave
        key = "cg.sizes_per_octave"
        p_values = (math.log2(max(2, e.max_requests)) + 1) * cg.p_per_octave
        if cg.p_per_octave > cg.sizes_per_octave:
            key = "cg.p_per_octave"
    if not non_decode or not cg.mixed_prefill_count:
        p_values = 0
    if cg.distribution == "hybrid":  # PR #6667: LINEAR sizes for the decode-only graphs
        decode_cap = min(cap, e.max_requests * (e.num_speculative_tokens + 1))
        decode = decode_cap / 16 + 40 if n == -1 else min(n, decode_cap)
        if decode > sizes * (p_values + 1):
            key = "cg.num_cuda_graphs"
        return int(sizes * (p_values + 1) + decode), key
    return int(sizes * (p_values + 2)), key


def _peer_graphs(cg: GridSettings, e: EngineLimits) -> tuple[int, str]:
    if cg.capture_sizes:
        decode, key = len(cg.capture_sizes), "cg.capture_sizes"
    elif cg.kind == "vllm":
        top = vllm_max_capture(e.max_requests, e.max_tokens, e.num_speculative_tokens, cg.max_capture_size)
        decode, key = top // 8 + 40, "cg.max_capture_size"
    elif cg.kind == "sglang":
        top = cg.max_capture_size or SGLANG_MAX_BATCH_SIZE
        decode = top if not cg.padding else top // 16 + 60
        key = "cg.max_capture_size"
    else:  # trtllm
        top = trtllm_max_batch(cg.max_capture_size, e.max_requests)
        decode = top // 64 + 40 if cg.padding else 80
        key = "cg.max_capture_size"
    piecewise = 0
    if cg.piecewise:
        top_tokens = cg.piecewise_max_tokens or e.max_tokens
        if cg.piecewise_sizes:
            piecewise = len(cg.piecewise_sizes)
        elif cg.kind == "sglang":
            piecewise = top_tokens // 512 + 60
        elif cg.kind == "vllm":
            piecewise = decode
        else:
            piecewise = 20
        if piecewise > decode and not cg.piecewise_sizes:
            key = "cg.piecewise_max_tokens" if cg.piecewise_max_tokens else "engine.max_tokens"
    return decode + piecewise, key


def _all_prefills_cap(cg: GridSettings) -> dict[str, str]:
    if cg.all_prefills:
        return {"cg.cuda_graph_max_tokens": "cg.all_prefills=true (the cap is engine.max_tokens)"}
    return {}


BUILTIN_GRID_KINDS: dict[str, GridKind] = {k.name: k for k in (
    GridKind("megatron", "megatron", MEGATRON_KEYS,
             lambda cg, e: _megatron_graphs(cg, e, cg.non_decode), _all_prefills_cap,
             summary="Megatron's generator: decode, prefill and mixed graphs"),
    GridKind("decode_only", "megatron", MEGATRON_KEYS, lambda cg, e: _megatron_graphs(cg, e, False),
             _all_prefills_cap, summary="Megatron's generator, decode graphs only"),
    GridKind("none", "megatron", (), lambda cg, e: (0, "cg.kind"), summary="no graphs: every step eager"),
    GridKind("explicit", "megatron", ("graphs",), lambda cg, e: (len(cg.graphs), "cg.graphs"),
             summary="the list in cg.graphs, in stored order"),
    GridKind("vllm", "peer", PEER_KEYS, _peer_graphs, summary="vLLM's capture sizes (FULL + PIECEWISE)"),
    GridKind("sglang", "peer", (*PEER_KEYS, "padding", "gpu_memory_gb"), _peer_graphs,
             summary="SGLang's batch sizes (+ piecewise CUDA graphs)"),
    GridKind("trtllm", "peer", (*PEER_KEYS, "padding"), _peer_graphs,
             summary="TensorRT-LLM's batch sizes (+ piecewise)"),
)}


def kinds_of(family: str) -> tuple[str, ...]:
    """The built-in kinds of one family, in registry order."""
    return tuple(k.name for k in BUILTIN_GRID_KINDS.values() if k.family == family)


def grid_kind_names(*, plugins: bool = True) -> tuple[str, ...]:
    return names_with_plugins(BUILTIN_GRID_KINDS, "grids") if plugins else tuple(BUILTIN_GRID_KINDS)


def grid_kind(name: str, key: str = "cg.kind") -> GridKind:
    """The entry of ``cg.kind`` ``name``: a built-in, else an installed plug-in (loaded now)."""
    plugin = builtin_or_plugin(BUILTIN_GRID_KINDS, "grids", name, key, grid_kind_names)
    if name in BUILTIN_GRID_KINDS:
        return BUILTIN_GRID_KINDS[name]
    if not isinstance(plugin, GridKind):
        raise plugin_error("grids", name, f"is a {type(plugin).__name__}, not a cgbench.config.registry.grids.GridKind")
    if not callable(plugin.build) or not callable(plugin.estimate):
        raise plugin_error("grids", name, "needs both build and estimate functions")
    if plugin.family not in FAMILIES:
        raise plugin_error("grids", name, f"family {plugin.family!r} is not one of {', '.join(FAMILIES)}")
    return plugin


def _readers(key: str, kinds: list[GridKind]) -> str:
    names = [k.name for k in kinds if key in k.reads]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def grid_unread(cg: GridSettings) -> dict[str, str]:
    """The ``cg`` keys kind ``cg.kind`` does not read, each with why (``schema.unread_keys``)."""
    chosen = grid_kind(cg.kind)
    kinds = list(BUILTIN_GRID_KINDS.values()) + ([chosen] if chosen.name not in BUILTIN_GRID_KINDS else [])
    keys = list(dict.fromkeys(k for kind in kinds for k in kind.reads))
    unread = {f"cg.{k}": f"cg.kind={cg.kind} (read with cg={_readers(k, kinds)})"
              for k in keys if k not in chosen.reads}
    if chosen.unread is not None:
        extra = foreign(partial(plugin_where, "grids", cg.kind), "unread failed", chosen.unread, cg)
        if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
            raise plugin_error("grids", cg.kind, f"unread returned {shown(extra)}, not a dict of key -> why")
        unread.update(extra)
    return unread


def graph_estimate(cg: GridSettings, engine: EngineLimits) -> tuple[int, str]:
    """The estimate ``cg.kind`` registers (``limits.MAX_GRAPHS`` is checked against it); a plug-in's
    through the plug-in boundary, and refused unless it is (a count >= 0, a key)."""
    kind = grid_kind(cg.kind)
    if cg.kind in BUILTIN_GRID_KINDS:
        return kind.estimate(cg, engine)
    found = foreign(partial(plugin_where, "grids", cg.kind), "estimate failed", kind.estimate, cg, engine)
    if not (isinstance(found, tuple) and len(found) == 2 and isinstance(found[0], int)
            and not isinstance(found[0], bool) and found[0] >= 0 and isinstance(found[1], str)):
        raise plugin_error("grids", cg.kind, f"estimate returned {shown(found)}, not (graph count >= 0, key)")
    return found
