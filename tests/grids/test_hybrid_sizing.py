"""``cg.distribution=hybrid``: PR #6667 (``1ea7881b``) ``CudaGraphSizingDistribution.HYBRID``, which
``generate_cuda_graph_batch_dimensions_list`` resolves to EXPONENTIAL token sizes for the prefill/mixed
graphs and LINEAR ones for the decode-only graphs (the P-grid stays EXPONENTIAL's geometric one)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.config.compose import load_config
from cgbench.config.registry.grids import grid_kind
from cgbench.config.schema import CGConfig, ConfigError, validate
from cgbench.grids.build import build_grid
from cgbench.grids.megatron import family_distributions, megatron_grid
from tests.helpers import examples


def grid(dist: str, **kw) -> list:
    args = dict(tp_size=1, num_cuda_graphs=16, cuda_graph_max_tokens=16384, mixed_prefill_count=16,
                max_requests=40, max_tokens=16384, max_sequence_length=2560, non_decode_graphs=True)
    args.update(kw)
    return megatron_grid(distribution=dist, **args)[0]


def decode_requests(graphs) -> list[int]:
    return [g.decode_req_count for g in graphs if g.prefill_req_count == 0]


def prefill_graphs(graphs) -> list:
    return [g for g in graphs if g.prefill_req_count > 0]


def test_hybrid_resolves_to_one_distribution_per_family():
    assert family_distributions("hybrid") == ("exponential", "linear")
    assert family_distributions("exponential") == ("exponential", "exponential")
    assert family_distributions("linear") == ("linear", "linear")


@pytest.mark.parametrize("n", [16, -1])
def test_the_prs_message_40_requests(n):
    """The commit message: 40 requests, the decode set becomes [40, 32, 24, 16, 8] (here tp=8, where
    LINEAR's stride rounds up to 8). The prefill/mixed graphs, their order included, are EXPONENTIAL's.
    By the code, EXPONENTIAL's decode set at this configuration is [40, 24, 16, 8] (40 halves to 20,
    which tp rounds up to 24), not the message's [40, 16, 8]: HYBRID adds one graph, not two."""
    hybrid, exponential = grid("hybrid", tp_size=8, num_cuda_graphs=n), grid("exponential", tp_size=8,
                                                                              num_cuda_graphs=n)
    assert decode_requests(hybrid) == [40, 32, 24, 16, 8]
    assert decode_requests(exponential) == [40, 24, 16, 8]
    assert prefill_graphs(hybrid) == prefill_graphs(exponential)
    assert len(hybrid) == len(exponential) + 1
    assert hybrid[-5:] == [g for g in hybrid if g.prefill_req_count == 0]  # decode graphs sort last


def test_a_derived_case_with_speculative_tokens():
    """Derived by hand: tp=1, one speculative token (q=2), auto mode (n=-1). The decode cap is
    40 * 2 = 80 tokens. LINEAR's auto sizes up to 80 are 1, 2, 4, 8, 16, ..., 80; each size s becomes
    d = min(s // 2, 40) requests (s=1 gives 0 requests: invalid, dropped), and auto mode also keeps the
    1- and 2-request graphs (lcm(q, tp) = 2 and 4 tokens). EXPONENTIAL's auto sizes up to 80 halve:
    80, 40, 20, 10, 4 (5 rounds down to 4), 2, plus tp=1, giving 40, 20, 10, 5, 2, 1 requests."""
    hybrid = grid("hybrid", num_cuda_graphs=-1, num_speculative_tokens=1)
    assert decode_requests(hybrid) == [40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 2, 1]
    assert [g.token_count for g in hybrid if g.prefill_req_count == 0] == [80, 72, 64, 56, 48, 40, 32, 24,
                                                                             16, 8, 4, 2]
    exponential = grid("exponential", num_cuda_graphs=-1, num_speculative_tokens=1)
    assert decode_requests(exponential) == [40, 20, 10, 5, 2, 1]
    assert prefill_graphs(hybrid) == prefill_graphs(exponential)
    # LINEAR for both families would also switch the P-grid to the fixed mixed count
    assert {g.prefill_req_count for g in prefill_graphs(grid("linear", num_cuda_graphs=-1))} != \
        {g.prefill_req_count for g in prefill_graphs(hybrid)}


def test_decode_only_grid_under_hybrid_is_linear_sizing():
    """A decode-only list (no mixed graphs) gets LINEAR decode sizes too: the same decode graphs."""
    on = grid("hybrid", tp_size=8, non_decode_graphs=False)
    assert on == [g for g in grid("hybrid", tp_size=8) if g.prefill_req_count == 0]
    assert on == grid("linear", tp_size=8, non_decode_graphs=False)


def test_the_option_is_a_config_value_and_bounded_by_its_estimate():
    cfg = load_config(["model=hybrid", "cg.distribution=hybrid", "engine.max_requests=40"])
    assert cfg.cg.distribution == "hybrid"
    built = build_grid(cfg.cg, cfg.engine, cfg.model)
    assert decode_requests(built.graphs) == [40, 38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8,
                                             6, 4, 2]
    kind = grid_kind("megatron")
    for e in (cfg.engine, replace(cfg.engine, max_requests=256), replace(cfg.engine, num_speculative_tokens=3)):
        for n in (4, 16, -1):
            cg = replace(cfg.cg, num_cuda_graphs=n)
            estimate, _ = kind.estimate(cg, e)
            assert estimate >= len(build_grid(cg, e, cfg.model).graphs), (e.max_requests, n)
    with pytest.raises(ConfigError, match="hybrid"):
        validate(replace(cfg, cg=replace(CGConfig(), distribution="hybird")))


@settings(max_examples=examples(150))
@given(tp=st.sampled_from([1, 2, 4, 8]), spec=st.sampled_from([0, 1, 3]), n=st.sampled_from([-1, 1, 2, 4, 16, 32]),
       R_mult=st.integers(1, 16), extra_tokens=st.integers(0, 4000), msl=st.integers(2, 5000),
       non_decode=st.booleans(), mixed=st.sampled_from([0, 4, 16]), k=st.sampled_from([1, 2]))
def test_hybrid_is_exponentials_prefill_graphs_plus_linears_decode_graphs(tp, spec, n, R_mult, extra_tokens, msl,
                                                                         non_decode, mixed, k):
    R = R_mult * tp
    kw = dict(tp_size=tp, num_cuda_graphs=n, cuda_graph_max_tokens=R * (spec + 1) + extra_tokens,
              mixed_prefill_count=mixed, max_requests=R, max_tokens=R * (spec + 1) + extra_tokens,
              max_sequence_length=msl, non_decode_graphs=non_decode, num_speculative_tokens=spec,
              sizes_per_octave=k)
    hybrid = grid("hybrid", **kw)
    want = prefill_graphs(grid("exponential", **kw)) + [g for g in grid("linear", **kw) if g.prefill_req_count == 0]
    q = spec + 1
    # the same graphs in Megatron's stored order; ties of the sort key (same T and D) keep the order of
    # Megatron's set dedupe, which depends on the whole set, so only the key sequence is compared
    assert sorted(hybrid) == sorted(want) and len(set(hybrid)) == len(hybrid)
    keys = [(g.token_count - g.decode_req_count * q, g.decode_req_count) for g in hybrid]
    assert keys == sorted(keys, reverse=True)
