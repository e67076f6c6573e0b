"""``build_grid`` keeps the few most recent built-in grids: the same sections give the grid the
builder gives (the kept one), other sections another, and a plug-in's builder is asked every time."""

from __future__ import annotations

import dataclasses

from cgbench.config.schema import BenchConfig, CGConfig, EngineConfig
from cgbench.grids import build
from cgbench.grids.registry import BUILDERS


def _stored(grid) -> list[tuple[int, int, int]]:
    return [(g.token_count, g.prefill_req_count, g.decode_req_count) for g in grid.graphs]


def test_the_same_sections_give_the_kept_grid_equal_to_a_fresh_one():
    build.forget_grids()
    for kind in ("megatron", "decode_only", "vllm", "sglang", "trtllm"):
        cfg = BenchConfig(cg=CGConfig(kind=kind))
        first = build.build_grid(cfg.cg, cfg.engine, cfg.model)
        again = build.build_grid(dataclasses.replace(cfg.cg), dataclasses.replace(cfg.engine), cfg.model)
        assert again is first
        assert _stored(first) == _stored(BUILDERS[kind](cfg.cg, cfg.engine, cfg.model))


def test_other_sections_give_another_grid():
    build.forget_grids()
    cfg = BenchConfig()
    small = build.build_grid(cfg.cg, EngineConfig(max_requests=16), cfg.model)
    large = build.build_grid(cfg.cg, EngineConfig(max_requests=256), cfg.model)
    assert _stored(small) != _stored(large)
    assert _stored(small) == _stored(BUILDERS[cfg.cg.kind](cfg.cg, EngineConfig(max_requests=16), cfg.model))


def test_at_most_the_kept_number(monkeypatch):
    build.forget_grids()
    monkeypatch.setattr(build._BUILT, "kept", 2)
    cfg = BenchConfig()
    grids = [build.build_grid(cfg.cg, EngineConfig(max_requests=n), cfg.model) for n in (16, 32, 64)]
    assert len(build._BUILT) == 2
    assert build.build_grid(cfg.cg, EngineConfig(max_requests=16), cfg.model) is not grids[0]  # the oldest went
    assert build.build_grid(cfg.cg, EngineConfig(max_requests=64), cfg.model) is grids[2]
