"""Megatron main's batch-invariant SSM chunking (engine.batch_invariant with a hybrid model and
chunked prefill): ``dynamic_engine.py`` ``_mamba_batch_invariant_prefill_chunk_length`` and its use in
``schedule_chunked_prefill`` (#4871 ``57deb435``; the same at ``d98e8a64``): a non-final chunk floored
to ``ssm_chunk_alignment`` (one alignment less when one token would be left), 0 = the request waits,
and the flash-attn guard skipped in that mode."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import pytest

from cgbench.config.schema import CGConfig, ConfigError, validate
from cgbench.engine.batch_invariant import aligned_chunk, ssm_alignment
from cgbench.engine.context import Context
from cgbench.engine.request import make_request
from cgbench.grids.lookup import Grid
from tests.helpers import make_cfg, round_scheduler, run_engine, specs

NO_GATING = replace(CGConfig(), all_prefills=False)


def _cfg(kind="hybrid", bi=True, **engine):
    base = dict(max_requests=8, max_tokens=256, max_sequence_length=1024, block_size=64,
                megatron_rules="main", batch_invariant=bi, ssm_chunk_alignment=128)
    base.update(engine)
    return make_cfg(kind=kind, policy="megatron", chunked=True, cg=NO_GATING, **base)


def test_the_chunk_rule():
    assert aligned_chunk(300, 400, 128) == 300  # it fits: the whole rest (the final call may be short)
    assert aligned_chunk(300, 256, 128) == 256
    assert aligned_chunk(257, 256, 128) == 128  # 256 would leave one token: one alignment less
    assert aligned_chunk(300, 127, 128) == 0  # nothing aligned fits: wait
    assert aligned_chunk(129, 128, 128) == 0  # 128 would leave one token, 0 is left: wait


def test_the_rule_is_on_only_for_a_batch_invariant_hybrid_with_chunked_prefill():
    assert ssm_alignment(_cfg().engine, hybrid=True) == 128
    assert ssm_alignment(_cfg().engine, hybrid=False) == 0
    assert ssm_alignment(_cfg(bi=False).engine, hybrid=True) == 0
    assert ssm_alignment(replace(_cfg().engine, chunked_prefill=False), hybrid=True) == 0


@pytest.mark.parametrize("oracle", [True, False])
def test_a_257_token_prompt_splits_128_129_and_not_255_2(oracle):
    _, state = run_engine(_cfg(oracle=oracle), specs((257, 4)))
    assert [t.admitted for t in state.trace[:2]] == [[(0, 128, False)], [(0, 129, True)]]
    _, state = run_engine(_cfg(bi=False, oracle=oracle), specs((257, 4)))  # flash-attn guard: 255 + 2
    assert [t.admitted for t in state.trace[:2]] == [[(0, 255, False)], [(0, 2, True)]]
    _, state = run_engine(_cfg(kind="transformer", oracle=oracle), specs((257, 4)))  # a transformer: as off
    assert [t.admitted for t in state.trace[:2]] == [[(0, 255, False)], [(0, 2, True)]]


def test_a_chunk_that_cannot_reach_an_alignment_waits():
    ctx = Context(max_requests=16, max_tokens=136, max_sequence_length=1024, block_size=64,
                  num_speculative_tokens=0, active_blocks=64, paused_block_budget=0, free_blocks=64)
    ctx.begin_round(10, 0)  # ten decodes: 126 tokens of room, less than one 128-token alignment
    req = make_request(0, 300, 4, 1024)
    req.start_prefill(300)
    sched = round_scheduler(_cfg(), ctx=ctx, grid=Grid("none", (), True))  # a hybrid grid of no graphs
    assert sched.ssm_alignment == 128 and not sched.gating_active
    queue = deque([req])
    result = sched.schedule(queue)
    assert result.stop_reason == "ssm_chunk_alignment" and ctx.admitted == [] and list(queue) == [req]


def test_main_refuses_what_its_context_asserts():
    with pytest.raises(ConfigError, match="num_speculative_tokens=0"):
        validate(_cfg(num_speculative_tokens=1, max_tokens=512))
    with pytest.raises(ConfigError, match="max_tokens"):
        validate(_cfg(max_tokens=128, ssm_chunk_alignment=128))
    validate(_cfg(kind="transformer", num_speculative_tokens=1, max_tokens=512))
