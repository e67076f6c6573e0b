"""Config -> ``Grid``: the captured-graph list that the ``cg`` config group describes."""

from __future__ import annotations

from cgbench.config.content_memo import ContentMemo
from cgbench.config.limits import check_grid_size
from cgbench.config.schema import CGConfig, EngineConfig, ModelConfig
from cgbench.grids.lookup import Grid
from cgbench.grids.registry import BUILDERS, grid_builder

# A built-in kind's grid is a function of the three sections: the few most recent are kept, so a
# sweep's points of one grid build it once (a Grid only memoizes its lookups, which are the same for
# every run). A plug-in's builder is asked every time.
_BUILT: ContentMemo[Grid] = ContentMemo(16)


def build_grid(cg: CGConfig, engine: EngineConfig, model: ModelConfig) -> Grid:
    """The captured-graph grid that the ``cg`` config describes (its kind's builder in
    ``cgbench.grids.registry``)."""
    check_grid_size(cg, engine)  # every caller (run, grid, schedule's state files) gets the limit
    if cg.kind not in BUILDERS:
        return grid_builder(cg.kind)(cg, engine, model)
    return _BUILT.get((cg, engine, model), lambda: BUILDERS[cg.kind](cg, engine, model))


def forget_grids() -> None:
    """Drop the kept grids (a test that changes a generator's code in the process)."""
    _BUILT.clear()
