"""The grid-family registry's builders half: ``cg.kind`` -> the ``Grid`` it builds.

The kinds, their families, the keys they read and their estimates are
``cgbench.config.registry.grids`` (the config checks them without importing this package);
``BUILDERS`` holds one builder per built-in kind (a test checks the two agree). A plug-in's
``GridKind.build`` returns its graphs as ``BatchShape``s in stored order; they become a ``Grid`` the
way its family's grids are: strict on hybrid models for the ``megatron`` family, never strict for
``peer`` grids.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral

from cgbench.config.registry.grids import grid_kind
from cgbench.config.registry.plugin_source import at_most, foreign, shown
from cgbench.config.registry.plugins import plugin_error, plugin_where
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig, ModelConfig
from cgbench.grids import peers as peer_grids
from cgbench.grids.lookup import Grid
from cgbench.grids.megatron import batch_invariant_validity_error, megatron_family
from cgbench.grids.shapes import BatchShape, validity_error

GridBuilder = Callable[[CGConfig, EngineConfig, ModelConfig], Grid]


def _strict(model: ModelConfig) -> bool:
    return model.kind == "hybrid"


def _explicit(cg: CGConfig, engine: EngineConfig) -> list[BatchShape]:
    graphs = []
    for i, g in enumerate(cg.graphs):
        key = f"cg.graphs[{i}]"
        try:
            shape = BatchShape(*(int(x) for x in g))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{key}: must be three integers [T, P, D], got {g}") from exc
        check = batch_invariant_validity_error if engine.batch_invariant else validity_error
        err = check(shape, engine.max_requests, engine.max_sequence_length, engine.num_speculative_tokens)
        if err is not None:
            raise ConfigError(f"{key}: {list(shape)} is not a valid graph: {err}")
        graphs.append(shape)
    return graphs


BUILDERS: dict[str, GridBuilder] = {
    "megatron": lambda cg, e, m: Grid("megatron", tuple(megatron_family(cg, e, cg.non_decode)), _strict(m)),
    "decode_only": lambda cg, e, m: Grid("decode_only", tuple(megatron_family(cg, e, False)), _strict(m)),
    "none": lambda cg, e, m: Grid("none", (), _strict(m)),
    "explicit": lambda cg, e, m: Grid("explicit", tuple(_explicit(cg, e)), _strict(m)),
    "vllm": peer_grids.build_peer_grid,
    "sglang": peer_grids.build_peer_grid,
    "trtllm": peer_grids.build_peer_grid,
}


def _ints(values: list) -> list[int]:
    return [int(x) for x in values]


def _plugin_shapes(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> list[BatchShape]:
    """The plug-in's graphs, read through the plug-in boundary: at most ``MAX_GRAPHS`` (an endless
    iterator is read to one past it), each three integers."""
    from cgbench.config.limits import MAX_GRAPHS

    kind = grid_kind(cg.kind)
    assert kind.build is not None  # grid_kind refuses a plug-in without one
    where = plugin_where("grids", cg.kind)
    built = at_most(where, "build failed", foreign(where, "build failed", kind.build, cg, engine, model), MAX_GRAPHS)
    if len(built) > MAX_GRAPHS:
        raise plugin_error("grids", cg.kind, f"built more than the {MAX_GRAPHS:,}-graph limit")
    shapes = []
    for s in built:
        values = at_most(where, "build failed", s, 3)
        if len(values) != 3 or any(isinstance(x, bool) or not isinstance(x, Integral) for x in values):
            raise plugin_error("grids", cg.kind, f"built {shown(s)}, not a graph (three integers T, P, D)")
        shapes.append(BatchShape(*foreign(where, "build failed", _ints, values)))
    return shapes


def _plugin_grid(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> Grid:
    kind = grid_kind(cg.kind)
    shapes = _plugin_shapes(cg, engine, model)
    for s in shapes:
        err = validity_error(s, engine.max_requests, engine.max_sequence_length, engine.num_speculative_tokens)
        if err is not None:
            raise plugin_error("grids", cg.kind, f"built {list(s)}, not a valid graph: {err}")
    if kind.family == "peer":
        return peer_grids.peer_grid(cg.kind, shapes, engine)
    return Grid(cg.kind, tuple(shapes), _strict(model))


def grid_builder(kind: str) -> GridBuilder:
    """The builder of ``cg.kind`` ``kind`` (a built-in's, else an installed plug-in's)."""
    builder = BUILDERS.get(kind)
    if builder is not None:
        return builder
    grid_kind(kind)  # refuses an unknown kind with the names that exist
    return _plugin_grid
