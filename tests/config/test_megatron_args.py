"""Megatron launch arguments -> cgbench overrides (cgbench.config.megatron_args)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from cgbench.config.compose import load_config
from cgbench.config.megatron_args import (
    NO_EFFECT,
    NOT_MODELLED,
    RULES,
    TRANSLATED,
    KVSizing,
    inference_config_fields,
    kv_blocks_for,
    megatron_names,
    rule_of,
    translate,
    with_megatron_args,
)
from cgbench.config.schema import ConfigError, EngineConfig, ModelConfig

LAUNCH = Path(__file__).with_name("data") / "nemotron_h_8b_tp8.sh"
NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


def test_nemotron_h_launch_line_translates_to_exactly_these_overrides():
    t = translate(LAUNCH.read_text())
    t.check()
    assert t.overrides == [
        f"model.layer_pattern='{NEMOTRON_H_8B}'", "model.pattern_repeat=1", "model.kind=hybrid",
        "model.mamba_conv_kernel=4", "model.hidden_size=4096", "model.ffn_hidden_size=21504",
        "model.num_attention_heads=32", "model.head_dim=128", "model.mamba_state_dim=128",
        "model.mamba_head_dim=64", "model.mamba_num_groups=8", "model.mamba_num_heads=128",
        "model.vocab_size=131072", "model.num_kv_heads=8", "model.gated_mlp=false", "model.dtype_bytes=2",
        "engine.tp_size=8", "engine.block_size=256", "engine.max_requests=256", "engine.max_tokens=8192",
        "engine.chunked_prefill=true", "engine.max_sequence_length=8192",
        "cg.kind=megatron", "cg.num_cuda_graphs=16", "cg.all_prefills=false", "cg.mixed_prefill_count=16",
    ]
    assert t.launcher[-1] == "examples/inference/gpt/gpt_dynamic_inference.py"
    assert [f for f, _ in t.no_effect] == [
        "--seq-length", "--normalization", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
        "--tokenizer-type", "--tokenizer-model", "--load", "--micro-batch-size", "--seed", "--log-interval"]
    assert [f for f, _ in t.accepted] == ["--pipeline-model-parallel-size 1"]


def test_the_kv_buffer_in_gib_becomes_blocks_as_megatron_sizes_them():
    # Nemotron-H-8B at TP 8: 4 attention layers, 1 KV head per rank -> 2*2*4*256*1*128 bytes a block;
    # Mamba state per request: 24 layers x (conv dim 1024 + 2*128 = 1280, x kernel 4, + 16 heads x 64 x 128) x 2 B.
    ovr, shown = with_megatron_args(f"@{LAUNCH}", [])
    cfg = load_config(ovr)
    block = 2 * 2 * 4 * 256 * 1 * 128
    state = 24 * (1280 * 4 + 16 * 64 * 128) * 2
    total = 20 * 1024**3
    after_state = int(total * (1 - 256 * state / total))
    assert cfg.engine.kv_blocks == after_state // block - 1 == 37767
    assert cfg.engine.paused_blocks == 0
    assert cfg.model.layer_pattern == NEMOTRON_H_8B and cfg.engine.tp_size == 8
    assert "engine.kv_blocks=37767" in shown and f"{block:,} bytes a block" in shown


def test_without_max_requests_megatron_derives_them_from_the_blocks():
    model = ModelConfig(name="t", kind="transformer", layer_pattern="*-", pattern_repeat=2, hidden_size=64,
                        num_attention_heads=4, num_kv_heads=2, head_dim=16, ffn_hidden_size=128, vocab_size=256)
    engine = EngineConfig(tp_size=2, block_size=256)
    kv = kv_blocks_for(KVSizing(0.01, None, None, False, "x"), model, engine)
    block = 2 * 2 * 2 * 256 * 1 * 16  # dtype x K,V x 2 layers x 256 tokens x 1 KV head per rank x 16
    blocks = int(0.01 * 1024**3) // block
    assert kv.block_bytes == block and kv.kv_blocks == blocks - 1
    assert kv.max_requests == (blocks - 1) // 2 * 2 // 4 * 4


def test_an_unsupported_flag_is_refused_by_name_saying_what_is_missing():
    with pytest.raises(ConfigError, match=r"--moe-expert-capacity-factor is not modelled by cgbench: this mixture"):
        translate(LAUNCH.read_text() + " --num-experts 8 --moe-expert-capacity-factor 1.0").check()
    with pytest.raises(ConfigError, match=r"--pipeline-model-parallel-size is not modelled.*pipeline"):
        translate("--pipeline-model-parallel-size 2").check()


def test_a_typo_is_refused_with_the_closest_real_name():
    with pytest.raises(ConfigError, match=r"--inference-dynamic-batching-max-request is not a Megatron 0.19.2 "
                                          r"argument \(did you mean --inference-dynamic-batching-max-requests\?\)"):
        translate("--inference-dynamic-batching-max-request 64").check()


def test_the_users_own_overrides_win_and_are_named():
    ovr, shown = with_megatron_args("--hidden-size 4096 --num-attention-heads 32 --bf16", ["model.hidden_size=2048"])
    assert "model.hidden_size=4096" not in ovr and ovr[-1] == "model.hidden_size=2048"
    assert "model.num_attention_heads=32" in ovr
    assert "yours wins   model.hidden_size=2048" in shown
    assert load_config(ovr).model.hidden_size == 2048


def test_decode_only_graphs_eager_default_and_absent_defaults_follow_megatron():
    t = translate("--inference-dynamic-batching --cuda-graph-impl local --decode-only-cuda-graphs")
    assert "cg.non_decode=false" in t.overrides and "cg.num_cuda_graphs=16" in t.overrides
    t = translate("--inference-dynamic-batching --inference-dynamic-batching-max-requests 8")
    assert "cg.num_cuda_graphs=null" in t.overrides  # Megatron's --cuda-graph-impl default: none
    t = translate("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --swiglu")
    assert t.overrides == ["model.layer_pattern='*-'", "model.pattern_repeat=32", "model.kind=transformer",
                           "model.hidden_size=4096", "model.num_attention_heads=32", "model.head_dim=128",
                           "model.ffn_hidden_size=16384", "model.num_kv_heads=32", "model.gated_mlp=true",
                           "model.dtype_bytes=4"]


def test_prefix_caching_takes_megatrons_default_eviction_policy_ref_zero():
    """--inference-dynamic-batching-prefix-caching-eviction-policy defaults to ref_zero in Megatron's
    arguments (and InferenceConfig): cgbench's own default, lru, is not what such a launch runs."""
    t = translate("--inference-dynamic-batching-prefix-caching")
    assert {"engine.prefix_caching=true", "engine.prefix_caching_eviction=ref_zero"} <= set(t.overrides)
    t = translate("--inference-dynamic-batching-prefix-caching "
                  "--inference-dynamic-batching-prefix-caching-eviction-policy lru")
    assert {"engine.prefix_caching=true", "engine.prefix_caching_eviction=lru"} <= set(t.overrides)
    t = translate("--inference-dynamic-batching-prefix-caching-eviction-policy lru")
    assert not any("prefix" in o for o in t.overrides) and [f for f, _ in t.no_effect] == [
        "--inference-dynamic-batching-prefix-caching-eviction-policy"]
    with pytest.raises(ConfigError, match="takes ref_zero or lru"):
        translate("--inference-dynamic-batching-prefix-caching "
                  "--inference-dynamic-batching-prefix-caching-eviction-policy fifo")


def test_every_rule_names_a_megatron_argument():
    names = megatron_names()
    for r in RULES:
        assert r.kind in (TRANSLATED, NO_EFFECT, NOT_MODELLED)
        if r.flag.endswith("*"):
            assert any(n.startswith(r.flag[:-1]) for n in names), r.flag
        else:
            assert r.flag in names, r.flag
    assert rule_of("--lr").kind == NO_EFFECT and rule_of("--moe-expert-capacity-factor").kind == NOT_MODELLED


def test_the_inference_config_fields_cgbench_translates_exist():
    assert {"block_size_tokens", "buffer_size_gb", "paused_buffer_size_gb", "mamba_memory_ratio", "max_requests",
            "max_tokens", "num_cuda_graphs", "cuda_graph_mixed_prefill_count", "cuda_graph_sizing_distribution",
            "use_cuda_graphs_for_non_decode_steps", "cuda_graph_all_prefills", "cuda_graph_max_tokens",
            "max_sequence_length", "enable_chunked_prefill", "num_speculative_tokens"} <= inference_config_fields()


def _literal_flags(source: str) -> set[str]:
    flags = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def test_the_committed_names_match_an_installed_megatron_core():
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-core is not installed: the committed list (megatron_args.txt) is the reference")
    root = Path(next(iter(spec.submodule_search_locations)))
    args = root / "training" / "arguments.py"
    if not args.exists():
        pytest.skip("the installed megatron-core has no megatron/training/arguments.py")
    assert _literal_flags(args.read_text()) <= megatron_names()


def test_the_doc_is_rendered_from_the_table():
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "scripts" / "megatron_args_doc.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_group_option_typed_after_replaces_the_translated_keys_of_its_group():
    ovr, shown = with_megatron_args("--inference-dynamic-batching --cuda-graph-impl local "
                                    "--decode-only-cuda-graphs --tensor-model-parallel-size 2", ["cg=dense"])
    assert not [o for o in ovr if o.startswith("cg.")] and "engine.tp_size=2" in ovr
    assert "yours wins   cg=dense" in shown and "replaces the translated cg.*" in shown
    cfg = load_config(ovr)
    assert cfg.cg.non_decode is True and cfg.cg.sizes_per_octave > 1  # dense, not the translated grid


def test_the_context_length_is_raised_to_max_requests_as_megatron_does():
    t = translate("--inference-dynamic-batching-max-requests 4096")
    assert "engine.max_sequence_length=4096" in t.overrides  # above the default 2560
    t = translate("--inference-max-seq-length 8192 --inference-dynamic-batching-max-requests 64")
    assert "engine.max_sequence_length=8192" in t.overrides
    t = translate("--position-embedding-type learned_absolute --max-position-embeddings 4096 "
                  "--inference-max-seq-length 8192")
    assert "engine.max_sequence_length=4096" in t.overrides


def test_the_graph_cap_is_dropped_with_all_prefills_as_megatron_ignores_it():
    line = ("--cuda-graph-impl local --inference-dynamic-batching --inference-cuda-graph-all-prefills "
            "--inference-cuda-graph-max-tokens 1024")
    ovr, shown = with_megatron_args(line, [])
    assert "cg.all_prefills=true" in ovr and not [o for o in ovr if "cuda_graph_max_tokens" in o]
    assert "ignored with --inference-cuda-graph-all-prefills" in shown
    assert load_config(ovr).cg.all_prefills is True
