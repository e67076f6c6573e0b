"""Config -> ``Grid``: the captured-graph list that the ``cg`` config group describes."""

from __future__ import annotations

from cgbench.config.limits import check_grid_size
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig, ModelConfig
from cgbench.grids import peers as peer_grids
from cgbench.grids.lookup import Grid
from cgbench.grids.megatron import megatron_family
from cgbench.grids.shapes import BatchShape, validity_error


def _explicit(cg: CGConfig, engine: EngineConfig) -> list[BatchShape]:
    graphs = []
    for i, g in enumerate(cg.graphs):
        key = f"cg.graphs[{i}]"
        try:
            shape = BatchShape(*(int(x) for x in g))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{key}: must be three integers [T, P, D], got {g}") from exc
        err = validity_error(shape, engine.max_requests, engine.max_sequence_length,
                             engine.num_speculative_tokens)
        if err is not None:
            raise ConfigError(f"{key}: {list(shape)} is not a valid graph: {err}")
        graphs.append(shape)
    return graphs


def build_grid(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> Grid:
    """The captured-graph grid that the ``cg`` config describes."""
    check_grid_size(cg, engine)  # every caller (run, grid, schedule's state files) gets the limit
    strict = model.kind == "hybrid"
    kind = cg.kind
    if kind == "megatron":
        return Grid("megatron", tuple(megatron_family(cg, engine, cg.non_decode)), strict)
    if kind == "decode_only":
        return Grid("decode_only", tuple(megatron_family(cg, engine, False)), strict)
    if kind == "none":
        return Grid("none", (), strict)
    if kind == "explicit":
        return Grid("explicit", tuple(_explicit(cg, engine)), strict)
    if kind in ("vllm", "sglang", "trtllm"):
        return peer_grids.build_peer_grid(cg, engine, model)
    raise ConfigError(f"cg.kind: {kind!r} is not one of megatron, decode_only, none, explicit, "
                      "vllm, sglang, trtllm")

