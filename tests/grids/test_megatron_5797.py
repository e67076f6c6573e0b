"""PR #5797 "Extend default cuda-graph coverage to 512 tokens" (90383cdd on its branch; on main as
740c16e6, and in core_v0.19.0): without ``cuda_graph_all_prefills`` the prefill/mixed graphs are capped
at ``cuda_graph_max_tokens`` (512 by default) clamped to ``[max_requests * (1 + spec), max_tokens]``;
before it the cap was the decode bound. cgbench's 0.19.2 rule (``megatron_cap``) is that rule, so the
pre-#5797 grid is ``cg.cuda_graph_max_tokens`` at or below the decode bound."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.config.schema import CGConfig, EngineConfig, ModelConfig
from cgbench.grids.build import build_grid
from cgbench.grids.megatron import megatron_cap


@pytest.mark.parametrize(("cap", "spec", "want"), [
    (512, 0, 512),  # #5797's default
    (100, 0, 256),  # clamped up to the decode bound: 256 requests x 1 token (the pre-#5797 cap)
    (512, 3, 1024),  # the decode bound with 3 speculative tokens: 256 x 4
    (20000, 0, 16384),  # clamped down to max_tokens
])
def test_the_cap_is_cuda_graph_max_tokens_clamped(cap, spec, want):
    engine = replace(EngineConfig(), num_speculative_tokens=spec)
    assert megatron_cap(CGConfig(all_prefills=False, cuda_graph_max_tokens=cap), engine) == want
    assert megatron_cap(CGConfig(all_prefills=True, cuda_graph_max_tokens=cap), engine) == engine.max_tokens


def test_5797_adds_the_512_token_prefill_and_mixed_graphs():
    engine, model = EngineConfig(), ModelConfig(kind="hybrid")
    after = build_grid(CGConfig(all_prefills=False), engine, model)
    before = build_grid(CGConfig(all_prefills=False, cuda_graph_max_tokens=256), engine, model)
    added = set(after.graphs) - set(before.graphs)
    assert not set(before.graphs) - set(after.graphs)
    assert {g.token_count for g in added} == {512}
    assert all(g.prefill_req_count > 0 for g in added)  # decode graphs stay at the decode bound
    assert before.lookup(300, 1, 0) == (None, "tokens_over_max")
    assert tuple(after.lookup(300, 1, 0)[0]) == (512, 1, 255)
