"""Config -> ``Grid``: the captured-graph list that the ``cg`` config group describes."""

from __future__ import annotations

from cgbench.config.limits import check_grid_size
from cgbench.config.schema import CGConfig, EngineConfig, ModelConfig
from cgbench.grids.lookup import Grid
from cgbench.grids.registry import grid_builder


def build_grid(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> Grid:
    """The captured-graph grid that the ``cg`` config describes (its kind's builder in
    ``cgbench.grids.registry``)."""
    check_grid_size(cg, engine)  # every caller (run, grid, schedule's state files) gets the limit
    return grid_builder(cg.kind)(cg, engine, model)
