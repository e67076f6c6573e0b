"""Speculative decoding: Megatron 0.19.2's shape rules under ``num_speculative_tokens`` and the
acceptance model (``engine.spec_acceptance``): worked cases, determinism, byte-identity of the
all-accepted case, exact output tokens, KV conservation, and the step-by-step engine it runs on."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.config.compose import load_config
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig, SloConfig, SpecAcceptanceConfig, validate
from cgbench.engine.acceptance import (
    AcceptanceModel,
    acceptance_model,
    length_distribution,
    needs_step_engine,
    uniform,
)
from cgbench.engine.context import Context
from cgbench.engine.core import Engine
from cgbench.engine.fast import FastEngine
from cgbench.engine.request import Outcome, Request
from cgbench.grids.megatron import megatron_grid
from cgbench.pipeline import build_engine, metrics_of, run_point
from cgbench.results.metrics import graph_usage_records, request_record
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import core_of_class, examples, make_cfg, scenarios, specs, tight_pools

EXAMPLES = examples(60)


def _with_acceptance(cfg, **acceptance):
    return replace(cfg, engine=replace(cfg.engine, spec_acceptance=SpecAcceptanceConfig(**acceptance)))


def _run(cfg, reqs, *, model: AcceptanceModel | None = None, force: bool = False):
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs))
    if force:
        eng.ctx.acceptance = model
    state = eng.run()
    return eng, state


def _everything(eng, state, e: EngineConfig | None = None):
    return (metrics_of(eng, state, SloConfig(), e), graph_usage_records(state.stats, eng.grid.graphs),
            [t.to_json() for t in state.trace], [request_record(r) for r in state.requests])


# -- Megatron's shape rules under S (batch_dimensions_utils.py, dynamic_context.py) ----------------

def _grid(spec: int, **kw):
    base = dict(tp_size=1, num_cuda_graphs=16, cuda_graph_max_tokens=512, mixed_prefill_count=16,
                max_requests=32, max_tokens=2048, max_sequence_length=4096, non_decode_graphs=True,
                num_speculative_tokens=spec)
    base.update(kw)
    return megatron_grid(**base)[0]


@pytest.mark.parametrize("spec", [1, 2, 3])
def test_decode_graphs_are_d_times_s_plus_1_capped_at_max_requests(spec):
    # bdu: decode token counts are sized up to min(cuda_graph_max_tokens, max_requests * (S + 1)), and
    # each holds D = min(size // (S + 1), max_requests) rows of S + 1 tokens
    graphs = _grid(spec, cuda_graph_max_tokens=1024)
    decode = [g for g in graphs if g.prefill_req_count == 0]
    assert decode
    assert all(g.token_count == g.decode_req_count * (spec + 1) for g in decode)
    assert max(g.token_count for g in decode) == 32 * (spec + 1)  # the cap, reached


@pytest.mark.parametrize("spec", [1, 3])
def test_mixed_graphs_hold_d_rows_of_s_plus_1_beside_p_prefills(spec):
    # bdu: D = max(0, min((size - P) // (S + 1), max_requests - P)); a prefill-only graph has D = 0
    graphs = _grid(spec)
    mixed = [g for g in graphs if g.prefill_req_count > 0 and g.decode_req_count > 0]
    assert mixed
    for g in mixed:
        t, p = g.token_count, g.prefill_req_count
        assert g.decode_req_count == min((t - p) // (spec + 1), 32 - p)


def test_a_worked_mixed_graph():
    # size 64, P = 4, S = 3: D = min(60 // 4, 32 - 4) = 15; S = 0 would give min(60, 28) = 28
    assert any((g.token_count, g.prefill_req_count, g.decode_req_count) == (64, 4, 15) for g in _grid(3))
    assert any((g.token_count, g.prefill_req_count, g.decode_req_count) == (64, 4, 28) for g in _grid(0))


@pytest.mark.parametrize("spec,prompt,pauses", [(0, 7, 0), (0, 8, 1), (3, 4, 0), (3, 5, 1), (3, 8, 1)])
def test_pause_offset_is_block_size_minus_1_minus_s(spec, prompt, pauses):
    """ctx update_requests: a request pauses for a new block when its last block offset (0-based, of
    its last stored token) reaches block_size - 1 - S. Block 8: after a prompt of n tokens the offset
    is n - 1; with S = 3 it pauses from offset 4 (n = 5) on, with S = 0 only at offset 7 (n = 8)."""
    ctx = Context.from_engine(replace(EngineConfig(), block_size=8, num_speculative_tokens=spec))
    r = Request(0, prompt, 10, kv_tokens=prompt, blocks=-(-prompt // 8))
    offset = (prompt - 1) % 8
    assert (ctx.decode_blocks_needed(r) > 0) == (offset >= 8 - 1 - spec) == bool(pauses)


def test_active_cap_max_tokens_over_s_plus_1_never_binds_a_valid_config():
    # ctx force-pauses decode rows past min(max_requests, max_tokens // (S + 1)); cgbench's configs keep
    # max_tokens >= max_requests * (S + 1), where that cap is max_requests (the budget check above it)
    cfg = load_config(["engine.max_requests=64", "engine.max_tokens=128", "engine.num_speculative_tokens=1"])
    assert min(64, 128 // 2) == 64
    with pytest.raises(ConfigError, match="max_requests \\* \\(num_speculative_tokens \\+ 1\\)"):
        validate(replace(cfg, engine=replace(cfg.engine, num_speculative_tokens=2)))


# -- the acceptance model --------------------------------------------------------------------------

def test_length_distributions():
    assert length_distribution([0.8, 0.5], [], 2) == pytest.approx([0.2, 0.4, 0.4])
    assert length_distribution([], [1, 1, 2], 2) == [0.25, 0.25, 0.5]
    assert length_distribution([], [], 3) == [0.0, 0.0, 0.0, 1.0]


def test_draws_depend_only_on_seed_request_and_position():
    a, b = AcceptanceModel([0.2, 0.3, 0.5], 7), AcceptanceModel([0.2, 0.3, 0.5], 7)
    keys = [(i, g) for i in range(20) for g in range(0, 40, 3)]
    forward = [a.draw(i, g) for i, g in keys]
    backward = [b.draw(i, g) for i, g in reversed(keys)][::-1]
    assert forward == backward
    assert a.draws == b.draws == len(keys) and a.accepted == b.accepted == sum(forward)
    other = AcceptanceModel([0.2, 0.3, 0.5], 8)
    assert [other.draw(i, g) for i, g in keys] != forward
    assert all(0.0 <= uniform(s, i, g) < 1.0 for s in (0, 1, 2**70) for i in range(5) for g in range(5))


def test_draw_frequencies_follow_the_distribution():
    m = AcceptanceModel(length_distribution([0.85], [], 1), 0)
    n = 40_000
    hits = sum(m.draw(i, 0) for i in range(n))
    assert abs(hits / n - 0.85) < 0.01  # DeepSeek-V3's 85-90 % for the second token
    assert m.mean_accepted == pytest.approx(0.85)


def test_a_model_that_always_accepts_everything_is_no_model():
    e = replace(EngineConfig(), num_speculative_tokens=2)
    assert acceptance_model(e, 0) is None and not needs_step_engine(e)
    for sa in (SpecAcceptanceConfig(per_position=[1.0, 1.0]), SpecAcceptanceConfig(lengths=[0, 0, 5])):
        assert acceptance_model(replace(e, spec_acceptance=sa), 0) is None
    assert needs_step_engine(replace(e, spec_acceptance=SpecAcceptanceConfig(per_position=[1.0, 0.5])))


def test_rewind_releases_a_block_only_rejected_drafts_used():
    """mtp_utils_pytorch.rewind_kv_cache: block 8, S = 3, a 6-token prompt (offset 5 >= 8 - 1 - 3:
    paused, then granted block 2 for positions 6..9). 0 drafts accepted: 7 tokens kept, block 2 goes
    back and the pause rule fires again; 3 accepted: 10 tokens, both blocks kept."""
    ctx = Context.from_engine(replace(EngineConfig(), block_size=8, num_speculative_tokens=3, kv_blocks=10))
    r = Request(0, 6, 20, kv_tokens=6, blocks=1)
    ctx.free_blocks -= 1
    assert ctx.decode_blocks_needed(r) == 1
    ctx.grant_decode_blocks([r])
    free = ctx.free_blocks
    r.kv_tokens += 1 + 0
    ctx.rewind(r)
    assert (r.blocks, ctx.free_blocks, ctx.decode_blocks_needed(r)) == (1, free + 1, 1)
    ctx.grant_decode_blocks([r])
    r.kv_tokens += 1 + 3
    ctx.rewind(r)
    assert (r.blocks, ctx.free_blocks, r.kv_tokens) == (2, free, 11)


def _spec_cfg(spec: int = 3, **acceptance):
    cfg = make_cfg(kind="transformer", policy="budget", cg=CGConfig(num_cuda_graphs=-1, all_prefills=False),
                   max_requests=8, max_tokens=64, max_sequence_length=256, block_size=8,
                   num_speculative_tokens=spec)
    return _with_acceptance(cfg, **acceptance) if acceptance else cfg


def test_a_request_takes_one_decode_step_per_token_when_nothing_is_accepted():
    # S = 3, nothing ever accepted: 9 decode steps for 10 tokens (all accepted: ceil(9 / 4) = 3)
    none = _run(_spec_cfg(lengths=[1, 0, 0, 0]), specs((6, 10)))[1]
    every = _run(_spec_cfg(), specs((6, 10)))[1]
    (r,), (s,) = list(none.requests), list(every.requests)
    assert r.generated == s.generated == 10
    assert r.finish_step - r.first_token_step == 9 and s.finish_step - s.first_token_step == 3
    assert none.stats.decode_rows == 9 and every.stats.decode_rows == 3


def test_stochastic_acceptance_runs_step_by_step_and_equals_the_oracle():
    cfg = _spec_cfg(per_position=[0.8, 0.6, 0.4])
    reqs = [RequestSpec(i, 0.001 * i, 5 + 7 * i, 30 + 11 * i) for i in range(12)]
    eng, state = _run(cfg, reqs)
    assert type(eng) is Engine and eng.ctx.acceptance is not None
    oracle = _run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs)
    assert _everything(eng, state, cfg.engine) == _everything(*oracle, cfg.engine)
    with pytest.raises(ValueError, match="step-by-step"):
        core_of_class(FastEngine, cfg, reqs)
    spec = metrics_of(eng, state, SloConfig(), cfg.engine)["spec"]
    assert spec["step_engine"] == "step_by_step" and spec["acceptance_model"] == "per_position"
    assert spec["decode_row_steps"] == eng.ctx.acceptance.draws == state.stats.decode_rows
    assert 1.0 < spec["tokens_per_step"] < 1 + 3


@st.composite
def _speculating(draw, base):
    cfg, reqs = draw(base)
    spec = draw(st.sampled_from([1, 2, 3]))
    spec = min(spec, cfg.engine.block_size - 1)
    e = replace(cfg.engine, num_speculative_tokens=spec, ep_size=1,  # the model is set on the one engine's context
                max_tokens=max(cfg.engine.max_tokens, cfg.engine.max_requests * (spec + 1)))
    return replace(cfg, engine=e), reqs, spec


def _check_tokens_and_counts(eng, state, model):
    for r in state.requests:
        assert r.generated <= r.output_len
        if r.outcome == Outcome.COMPLETED:
            assert r.generated == r.output_len
    if state.outcome == "engine_assertion":  # Megatron's code raised in the update: its step's draws were never made
        assert model.draws <= state.stats.decode_rows
    else:
        assert model.draws == state.stats.decode_rows


@pytest.mark.slow  # a property over random configs, each run twice
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(_speculating(scenarios()))
def test_all_accepted_through_the_acceptance_path_is_byte_identical(case):
    """The acceptance path with a model that accepts every draft is today's engine, bit for bit (KV
    conservation is checked every step: make_cfg turns engine.check_invariants on)."""
    cfg, reqs, spec = case
    oracle = replace(cfg, engine=replace(cfg.engine, oracle=True))
    today = _everything(*_run(oracle, reqs))
    model = AcceptanceModel([0.0] * spec + [1.0], 0)
    eng, state = _run(oracle, reqs, model=model, force=True)
    assert _everything(eng, state) == today
    _check_tokens_and_counts(eng, state, model)
    assert model.accepted == spec * model.draws


@pytest.mark.slow  # a property over random configs
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(_speculating(tight_pools()), st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3), st.integers(0, 9))
def test_every_request_gets_exactly_its_tokens_and_kv_is_conserved(case, probs, seed):
    cfg, reqs, spec = case
    model = AcceptanceModel(length_distribution(probs[:spec], [], spec), seed)
    eng, state = _run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs, model=model, force=True)
    _check_tokens_and_counts(eng, state, model)
    # the same model again: the same run (the draws are a function of the seed, request and position)
    again = AcceptanceModel(length_distribution(probs[:spec], [], spec), seed)
    assert _everything(eng, state) == _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)),
                                                        reqs, model=again, force=True))


def test_a_run_is_deterministic_in_its_seed_and_the_seed_matters():
    over = ["workload.num_requests=24", "engine.num_speculative_tokens=2",
            "engine.spec_acceptance.per_position=[0.8,0.5]"]
    a = run_point(load_config(over), over)["metrics"]
    b = run_point(load_config(over), over)["metrics"]
    c = run_point(load_config([*over, "seed=1"]), over)["metrics"]
    assert a == b
    assert a["spec"]["drafts_accepted"] != c["spec"]["drafts_accepted"]
    assert a["spec"]["expected_tokens_per_step"] == pytest.approx(1 + 0.8 + 0.8 * 0.5)


def test_expert_parallel_ranks_draw_per_request():
    over = ["model=hybrid", "workload.num_requests=16", "engine.ep_size=2", "engine.num_speculative_tokens=1",
            "engine.spec_acceptance.lengths=[1,3]"]
    m = run_point(load_config(over), over)["metrics"]
    assert m["requests"]["completed"] == 16
    assert 0.6 < m["spec"]["acceptance_rate"] < 0.9  # 3/4 expected, over a few hundred draws
