"""Token-only CUDA-graph grids of vLLM, SGLang and TensorRT-LLM, as ``BatchShape`` lists.

Sources: each engine's own defaults, named in the section for it below (vLLM's
``VllmConfig._set_cudagraph_sizes``, SGLang's server arguments, TensorRT-LLM's CUDA-graph config). Each engine's
graphs are expressed in Megatron's ``(T, P, D)`` shapes so one matcher serves every grid:

* a decode / FULL graph of batch size ``b`` is ``(b*(1+spec), 0, b)``; it serves decode-only
  batches of at most ``b`` requests (padded up), or exactly ``b`` when padding is off;
* a piecewise / token-bucket graph of ``s`` tokens is ``(s, s, 0)``. Matched non-strict, it
  serves every mixed or prefill batch with ``T <= s`` (each request has >= 1 token, so
  ``P + D <= T <= s``): peers pad tokens up and do not care how requests split. Peers therefore
  always match non-strict, whatever the model.

The lists are stored in Megatron's order (descending by ``(T - D*(1+spec), D)``), so
``Grid.find_chunk_size`` behaves the same on them. None of the peers defers a request to fit a
graph: on a miss the step runs eager. Engine limits map as ``max_num_seqs`` = ``engine.max_requests``
and ``max_num_batched_tokens`` / chunked-prefill size = ``engine.max_tokens``.

vLLM v1, FULL_AND_PIECEWISE (the -O2 default; ``VllmConfig._set_cudagraph_sizes``):
    max = min(max_num_seqs * (1+spec) * 2, 512, max_num_batched_tokens)  (``cg.max_capture_size``)
    sizes = [1, 2, 4] + range(8, min(max+1, 256), 8) + range(256, max+1, 16)  (``cg.capture_sizes``)
    plus ``max_num_batched_tokens`` itself when it is <= max (PR #40734); with spec decode every
    size is rounded up to a multiple of 1+spec and sizes above max are dropped
    (``adjust_cudagraph_sizes_for_spec_decode``). One list serves both the FULL graphs of uniform
    decode batches (``s`` tokens = ``s/(1+spec)`` requests) and the PIECEWISE graphs of mixed and
    prefill batches; ``cg.piecewise=false`` is FULL_DECODE_ONLY (mixed steps eager) and
    ``cg.piecewise_sizes`` (a cgbench extension) replaces the piecewise list. Hybrid (Mamba)
    models keep FULL graphs for pure decode and PIECEWISE graphs for the rest (A.1 "backend
    downgrade"), so they get the same grid. Sequence-parallel tp filtering is not modelled.

SGLang (``server_args._generate_cuda_graph_batch_sizes``, ``piecewise_cuda_graph.md``):
    decode max bs (``cg.max_capture_size``, ``--cuda-graph-max-bs``) by ``cg.gpu_memory_gb`` and tp:
    <20 GB: 8; <35: 24 (tp<4) / 80; <60: 32 / 160; <160: 256 / 512; larger: 512; then capped at
    ``max_requests`` (the request pool bounds the graphs SGLang keeps)
    padded list: [1,2,4,8,12] + range(16,257,8) + range(272,512,16) + range(512,max+1,32);
    with spec decode: 1..8, 10..32/2, 40..64/4, 72..256/8, 272../16; all filtered to <= max;
    ``cg.padding=false`` (``--disable-cuda-graph-padding``): range(1, max+1), exact batch sizes.
    Piecewise CUDA graph tokens (on by default): range(4,33,4) + range(48,257,16) + range(288,513,32)
    + range(576,1025,64) + range(1280,4097,256) + range(4608,max+1,512), max =
    ``cg.piecewise_max_tokens`` or the chunked-prefill size (``engine.max_tokens``).

TensorRT-LLM, PyTorch backend (``CudaGraphConfig._generate_cuda_graph_batch_sizes``):
    max batch size = ``cg.max_capture_size`` or 128, capped at ``max_requests`` (a larger graph
    can never be padded into: padding stops at the engine batch size);
    ``enable_padding`` (``cg.padding``) on: [1,2,4] + 8..128/8, then +64 steps while <= max;
    off: 1..31 + [32, 64, 128] + powers of two >= 256 below max, and decode batches need an
    exact batch size (``Grid.exact_decode``); both filtered to <= max, and max appended.
    Only generation-only batches use these graphs. Piecewise prefill graphs (opt-in,
    ``cg.piecewise``): [2**i for i in range(8)] + range(256, 3073, 256) (``prefill_capture_num_tokens``,
    ``cg.piecewise_sizes``), up to ``cg.piecewise_max_tokens`` or ``max_tokens``.

``cg.capture_sizes`` replaces the decode list of every peer (vLLM: the shared list).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from cgbench.config.registry import grids as grid_defaults
from cgbench.config.registry.grids import grid_kind, trtllm_max_batch, vllm_max_capture
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig, ModelConfig
from cgbench.grids.lookup import Grid
from cgbench.grids.shapes import BatchShape


def _upto(sizes: list[int], limit: int) -> list[int]:
    return sorted({s for s in sizes if 1 <= s <= limit})


def _explicit_sizes(cg: CGConfig, key: str) -> list[int]:
    return sorted({int(s) for s in getattr(cg, key)})  # >= 1: checked by the schema


# ---------------------------------------------------------------------------------------------
# vLLM


def vllm_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, num_speculative_tokens: int = 0,
                       max_capture_size: int = 0, capture_sizes: list[int] | None = None) -> list[int]:
    """vLLM's cudagraph capture sizes (in tokens), ascending."""
    q = 1 + num_speculative_tokens
    if capture_sizes:
        sizes = sorted(set(capture_sizes))
        top = max_capture_size or sizes[-1]
    else:
        top = vllm_max_capture(max_num_seqs, max_num_batched_tokens, num_speculative_tokens, max_capture_size)
        sizes = [1, 2, 4] + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))
        if max_num_batched_tokens <= top and max_num_batched_tokens not in sizes:
            sizes.append(max_num_batched_tokens)  # PR #40734
    sizes = _upto(sizes, top)
    if q > 1:
        sizes = _upto([-(-s // q) * q for s in sizes], top) or ([q] if q <= top else [])
    return sizes


def vllm_graphs(cg: CGConfig, engine: EngineConfig) -> list[BatchShape]:
    q = 1 + engine.num_speculative_tokens
    sizes = vllm_capture_sizes(engine.max_requests, engine.max_tokens, engine.num_speculative_tokens,
                               cg.max_capture_size, _explicit_sizes(cg, "capture_sizes"))
    graphs = [BatchShape(b * q, 0, b) for b in sorted({s // q for s in sizes if s // q >= 1})]
    if cg.piecewise:
        pw = _explicit_sizes(cg, "piecewise_sizes") or sizes
        graphs += [BatchShape(s, s, 0) for s in pw]
    return graphs


# ---------------------------------------------------------------------------------------------
# SGLang


def sglang_default_max_bs(gpu_memory_gb: float, tp_size: int) -> int:
    """``--cuda-graph-max-bs`` default by GPU memory and tp (peers.md A.2)."""
    small_tp = tp_size < 4
    if gpu_memory_gb <= 0:
        return 160  # unknown GPU
    if gpu_memory_gb < 20:
        return 8
    if gpu_memory_gb < 35:
        return 24 if small_tp else 80
    if gpu_memory_gb < 60:
        return 32 if small_tp else 160
    if gpu_memory_gb < 160:
        return 256 if small_tp else grid_defaults.SGLANG_MAX_BATCH_SIZE
    return grid_defaults.SGLANG_MAX_BATCH_SIZE


def sglang_batch_sizes(max_bs: int, padding: bool = True, spec: bool = False) -> list[int]:
    if not padding:
        return list(range(1, max_bs + 1))
    if spec:
        sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
                 + list(range(72, 257, 8)) + list(range(272, max_bs + 1, 16)))
    else:
        sizes = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
                 + list(range(512, max_bs + 1, 32)))
    return _upto(sizes, max_bs)


def sglang_piecewise_tokens(max_tokens: int) -> list[int]:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
             + list(range(4608, max_tokens + 1, 512)))
    return _upto(sizes, max_tokens)


def sglang_graphs(cg: CGConfig, engine: EngineConfig) -> list[BatchShape]:
    sizes = _explicit_sizes(cg, "capture_sizes")
    if not sizes:
        max_bs = cg.max_capture_size or sglang_default_max_bs(cg.gpu_memory_gb, engine.tp_size)
        sizes = sglang_batch_sizes(max_bs, cg.padding, engine.num_speculative_tokens > 0)
    return _decode_and_piecewise(cg, engine, sizes, sglang_piecewise_tokens)


# ---------------------------------------------------------------------------------------------
# TensorRT-LLM


def trtllm_batch_sizes(max_bs: int, padding: bool) -> list[int]:
    if padding:
        sizes = [1, 2, 4] + list(range(8, 129, 8))
        while sizes[-1] + 64 <= max_bs:
            sizes.append(sizes[-1] + 64)
    else:
        sizes = list(range(1, 32)) + [32, 64, 128]
        sizes += [2 ** i for i in range(8, math.ceil(math.log2(max_bs)))] if max_bs > 1 else []
    sizes = _upto(sizes, max_bs)
    if not sizes or sizes[-1] != max_bs:
        sizes.append(max_bs)
    return sizes


def trtllm_piecewise_tokens(max_tokens: int) -> list[int]:
    return _upto([2 ** i for i in range(8)] + list(range(256, 3073, 256)), max_tokens)


def trtllm_graphs(cg: CGConfig, engine: EngineConfig) -> list[BatchShape]:
    sizes = _explicit_sizes(cg, "capture_sizes")
    if not sizes:
        sizes = trtllm_batch_sizes(trtllm_max_batch(cg.max_capture_size, engine.max_requests), cg.padding)
    return _decode_and_piecewise(cg, engine, sizes, trtllm_piecewise_tokens)


def _decode_and_piecewise(cg: CGConfig, engine: EngineConfig, batch_sizes: list[int],
                          default_piecewise: Callable[[int], list[int]]) -> list[BatchShape]:
    """Decode graphs of ``batch_sizes`` requests, then (``cg.piecewise``) token-bucket graphs up to
    ``cg.piecewise_max_tokens`` (default ``max_tokens``): the user's list, else the engine's default."""
    q = 1 + engine.num_speculative_tokens
    graphs = [BatchShape(b * q, 0, b) for b in _upto(batch_sizes, engine.max_requests)]
    if cg.piecewise:
        top = cg.piecewise_max_tokens or engine.max_tokens
        pw = _upto(_explicit_sizes(cg, "piecewise_sizes"), top) or default_piecewise(top)
        graphs += [BatchShape(s, s, 0) for s in pw]
    return graphs


# ---------------------------------------------------------------------------------------------


_BUILDERS = {"vllm": vllm_graphs, "sglang": sglang_graphs, "trtllm": trtllm_graphs}


def peer_grid(name: str, graphs: Iterable[BatchShape], engine: EngineConfig, exact_decode: bool = False) -> Grid:
    """A peer grid of ``graphs`` (duplicates dropped), in the order a peer matches them: the most
    prefill tokens first, then the most decode requests; never strict (peers pad tokens up)."""
    q = 1 + engine.num_speculative_tokens
    ordered = sorted(set(graphs), key=lambda g: (g.token_count - g.decode_req_count * q, g.decode_req_count),
                     reverse=True)
    return Grid(name, tuple(ordered), strict=False, exact_decode=exact_decode)


def build_peer_grid(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> Grid:
    """The peer engine's grid named by ``cg.kind``; exact decode sizes where the kind reads
    ``cg.padding`` and it is off."""
    if cg.kind not in _BUILDERS:
        raise ConfigError(f"cg.kind: {cg.kind!r} is not a peer grid ({', '.join(_BUILDERS)})")
    exact = "padding" in grid_kind(cg.kind).reads and not cg.padding
    return peer_grid(cg.kind, _BUILDERS[cg.kind](cg, engine), engine, exact)
