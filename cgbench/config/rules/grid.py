"""``cg.*``: the grid family and its sizes."""

from __future__ import annotations

from typing import Any

from cgbench.config.registry.grids import grid_kind
from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require

DISTRIBUTIONS = ("exponential", "linear", "hybrid")  # hybrid: PR #6667 (1ea7881b), not in 0.19.2


def check_grid(cfg: Any) -> None:
    """The rules of ``cfg.cg``."""
    cg = cfg.cg
    grid_kind(cg.kind)  # a built-in or an installed plug-in, else did-you-mean
    _check_choice(cg.distribution, DISTRIBUTIONS, "cg.distribution")
    _require(cg.num_cuda_graphs is None or cg.num_cuda_graphs >= -1, "cg.num_cuda_graphs",
             f"must be null, -1 (auto) or >= 0, got {cg.num_cuda_graphs}")
    _require(cg.cuda_graph_max_tokens >= 1, "cg.cuda_graph_max_tokens", "must be >= 1")
    _require(cg.sizes_per_octave >= 1 and cg.p_per_octave >= 1, "cg.sizes_per_octave",
             "sizes_per_octave and p_per_octave must be >= 1")
    for i, g in enumerate(cg.graphs):
        _require(len(g) == 3, f"cg.graphs[{i}]", f"must be [T, P, D], got {g}")
    for key in ("capture_sizes", "piecewise_sizes"):
        _require(all(int(s) >= 1 for s in getattr(cg, key)), f"cg.{key}", "sizes must be >= 1")
    _require(cg.max_capture_size >= 0 and cg.piecewise_max_tokens >= 0, "cg.max_capture_size",
             "must be >= 0 (0 = engine default)")
