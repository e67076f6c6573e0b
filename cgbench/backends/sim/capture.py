"""What capturing a grid costs: an estimate of capture time and graph-pool memory, and whether the
model, its KV pool and the graphs fit the device (``docs/cost-model.md``, "Graph capture").

Capturing one graph runs its shape eagerly ``CAPTURE_WARMUPS`` times, then records it (the host issues
every op, the GPU runs nothing) and instantiates it (per node). All graphs share one memory pool, so
the pool holds the largest graph's activations once, plus a small per-node overhead for every graph.
"""

from __future__ import annotations

from typing import Any

from cgbench.backends.sim.cost_model import RooflineCostModel
from cgbench.backends.sim.moe_cost import moe_activation_width
from cgbench.config.content_memo import ContentMemo
from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepWork

CAPTURE_WARMUPS = 1  # eager runs of a graph's shape before it is recorded
GRAPH_INSTANTIATE_US_PER_NODE = 2.0  # cudaGraphInstantiate, per kernel node
GRAPH_NODE_BYTES = 8 * 1024  # pool and executable-graph overhead per kernel node
LOGIT_BYTES = 4  # logits are kept in fp32
GB = 1e9


def activation_bytes(model: ModelConfig, tokens: int, rows: int, tp_size: int = 1) -> float:
    """Peak live activations of one step of ``tokens`` tokens and ``rows`` sampled rows, per rank: the
    widest layer's input, intermediate and output for every token, and the fp32 logits of every row."""
    t = tp_size
    h, d = model.hidden_size, model.head_dim
    q = model.num_attention_heads / t
    kv = max(model.num_kv_heads / t, 1)
    g = 2 if (model.gated_mlp if model.gated_mlp is not None else model.kind == "transformer") else 1
    f = model.ffn_hidden_size / t
    e = model.mamba_num_heads * model.mamba_head_dim / t
    gn = max(model.mamba_num_groups / t, 1) * model.mamba_state_dim
    widths = []
    layers = model.layers
    if "*" in layers:
        widths.append(h + (q + 2 * kv) * d + q * d + h)
    if "-" in layers:
        widths.append(h + g * f + f + h)
    if "M" in layers:
        widths.append(h + (2 * e + 2 * gn + model.mamba_num_heads / t) + (e + 2 * gn) + e + h)
    if "E" in layers:
        widths.append(moe_activation_width(model, t, g == 2))
    return tokens * max(widths) * model.dtype_bytes + rows * model.vocab_size / t * LOGIT_BYTES


# The estimates of the last few (grid, model, hardware, engine): the points of a sweep mostly share
# them (a seed or a workload axis), and pricing every graph of a grid is most of a small point's time.
_ESTIMATES: ContentMemo[dict[str, Any]] = ContentMemo(32)


def grid_capture_estimate(grid: Any, model: ModelConfig, hardware: HardwareConfig,
                          engine: EngineConfig) -> dict[str, Any]:
    """Estimated capture time and graph-pool memory of ``grid`` (a ``cgbench.grids.lookup.Grid``), and the
    device-memory check: weights + KV pool + Mamba state + eager activations + graph pool vs
    ``hardware.memory_gb``. Plain JSON types; the run document records it as ``capture``.

    A pure function of the grid's shapes (in stored order) and the three records, so it is worked out
    once per distinct set of them in a process (``ContentMemo``) and each caller gets its own copy."""
    shapes = tuple((g.token_count, g.prefill_req_count, g.decode_req_count) for g in grid.graphs)
    found = _ESTIMATES.get((shapes, model, hardware, engine), lambda: _estimate(grid, model, hardware, engine))
    return {**found, "memory_gb": dict(found["memory_gb"])}


def _estimate(grid: Any, model: ModelConfig, hardware: HardwareConfig, engine: EngineConfig) -> dict[str, Any]:
    from cgbench.backends.sim.factory import make_roofline

    cost: RooflineCostModel = make_roofline(model, hardware, engine)
    t = engine.tp_size
    capture_s, pool_peak, nodes_total = 0.0, 0.0, 0
    for g in grid.graphs:
        tokens, p, d = g.token_count, g.prefill_req_count, g.decode_req_count
        eager = cost.step_time(StepWork(tokens, p, d, tokens, None))
        record = cost.host_seconds(p)
        nodes = cost.kernel_count(p)
        capture_s += CAPTURE_WARMUPS * eager + record + nodes * GRAPH_INSTANTIATE_US_PER_NODE * 1e-6
        nodes_total += nodes
        pool_peak = max(pool_peak, activation_bytes(model, tokens, p + d, t))
    pool = pool_peak + nodes_total * GRAPH_NODE_BYTES
    embedding = model.hidden_size * model.vocab_size / t * model.dtype_bytes
    weights = cost.weight_bytes + embedding
    kv = engine.resolved_kv_blocks() * engine.block_size * cost.kv_bytes_per_token
    state = engine.max_requests * cost.mamba_state_bytes
    eager_act = activation_bytes(model, engine.max_tokens, engine.max_requests, t)
    total = weights + kv + state + eager_act + pool
    device = hardware.memory_gb * GB
    return {
        "graphs": len(grid.graphs),
        "capture_s": round(capture_s, 4),
        "graph_pool_gb": round(pool / GB, 4),
        "memory_gb": {
            "weights": round(weights / GB, 4),
            "kv_cache": round(kv / GB, 4),
            "mamba_state": round(state / GB, 4),
            "activations": round(eager_act / GB, 4),
            "graph_pool": round(pool / GB, 4),
            "total": round(total / GB, 4),
            "device": hardware.memory_gb,
        },
        "fits": total <= device,
        "tp_size": t,
        "method": "estimate (cgbench docs cost-model, Graph capture)",
    }
