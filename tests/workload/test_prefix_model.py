"""workload.prefix: generated prefix ids (shared system prompts, multi-turn sessions) and the mapping
of source blocks onto engine blocks."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from cgbench.config.compose import load_config
from cgbench.config.schema import PrefixModelConfig
from cgbench.workload.arrivals import RequestSpec
from cgbench.workload.prefix_hashes import engine_block_hashes
from cgbench.workload.prefix_model import SOURCE_TOKENS, prefix_source_tokens, with_prefix_blocks
from cgbench.workload.stream import generate_requests, make_stream


def _specs(*lengths: tuple[int, int]) -> list[RequestSpec]:
    return [RequestSpec(i, 0.0, p, o) for i, (p, o) in enumerate(lengths)]


def test_a_session_turn_repeats_the_previous_prompt_and_output_after_the_system_prompt():
    p = PrefixModelConfig(system_prompts=1, system_prompt_tokens=64, session_turns=3)
    out = list(with_prefix_blocks(iter(_specs((10, 5), (20, 7), (30, 1), (40, 2))), p, random.Random(0)))
    assert [s.prompt_tokens for s in out] == [64 + 10, 64 + 15 + 20, 64 + 42 + 30, 64 + 40]  # 4th: a new session
    first, second = out[0].prefix_blocks, out[1].prefix_blocks
    assert len(second) == -(-out[1].prompt_tokens // SOURCE_TOKENS)
    assert list(second[:len(first) - 1]) == list(first[:-1])  # turn 2 extends turn 1 (its partial last block too)
    assert list(out[3].prefix_blocks[:4]) == list(first[:4])  # the same system prompt: 64 tokens, 4 blocks
    assert out[3].prefix_blocks[4] != first[4]  # then its own session


def test_sessions_share_only_the_system_prompt_they_drew():
    p = PrefixModelConfig(system_prompts=3, system_prompt_tokens=40, session_turns=1)
    out = list(with_prefix_blocks(iter(_specs(*[(50, 1)] * 30)), p, random.Random(1)))
    heads = {tuple(s.prefix_blocks[:2]) for s in out}  # 40 tokens: 2 whole 16-token blocks
    assert len(heads) == 3
    assert len({s.prefix_blocks[2] for s in out}) == 30  # the straddling block is the session's


@pytest.mark.slow
def test_the_stream_and_the_list_agree_and_a_seed_fixes_them():
    o = ["workload=chat", "workload.num_requests=40", "workload.prefix.session_turns=4",
         "workload.prefix.system_prompts=2", "workload.prefix.system_prompt_tokens=128"]
    w = load_config(o).workload
    a, b = generate_requests(w, 3), list(make_stream(w, 3).pop_due(1e18))
    def seen(specs):
        return [(s.prompt_tokens, list(s.prefix_blocks)) for s in specs]

    assert seen(a) == seen(b)
    assert [list(s.prefix_blocks) for s in generate_requests(w, 3)] == [list(s.prefix_blocks) for s in a]
    assert prefix_source_tokens(w) == SOURCE_TOKENS
    plain = generate_requests(replace(w, prefix=PrefixModelConfig()), 3)
    assert all(s.prefix_blocks is None for s in plain)


def test_engine_hashes_cover_the_complete_blocks_the_source_ids_describe():
    coarse = engine_block_hashes([5], 512, 512, 256)
    assert len(coarse) == 2 and coarse[0] != coarse[1]
    assert engine_block_hashes([5, 6], 1000, 512, 256)[:1] == coarse[:1]
    assert engine_block_hashes([5], 200, 512, 256) == []  # no complete engine block
    assert engine_block_hashes([5], 600, 512, 256) == coarse  # past the last id: no hash
