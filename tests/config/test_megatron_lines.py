"""Megatron launch lines cgbench prints (cgbench.config.megatron_lines): the translator's table read
backwards, so every printed line translates back (``--megatron-args``) to the settings it prints;
what to add and remove on the user's line; the arguments of Megatron's own inference scripts."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.analysis.advise.megatron_space import MegatronKnobs, megatron_space
from cgbench.config.compose import load_config
from cgbench.config.megatron_args import (
    RULES,
    closest_name,
    example_names,
    launch_tokens,
    megatron_names,
    translate,
)
from cgbench.config.megatron_lines import (
    ANY_LINE,
    GRAPH_FLAGS,
    YOUR_LINE,
    LaunchArg,
    applied,
    cg_settings,
    flag_for,
    graph_launch_args,
    launch_advice,
    megatron_default_line,
)
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig
from cgbench.grids.build import build_grid

DATA = Path(__file__).with_name("data")
NEMOTRON = (DATA / "nemotron_h_8b_tp8.sh").read_text()
OFFLINE = DATA / "qwen2_5_1_5b_offline.sh"
DYNAMIC = DATA / "gpt_dynamic_inference_583m.sh"


def _cg_keys(knobs: MegatronKnobs) -> dict[str, str]:
    """The cg settings a knob setting means, in the translator's text (cg.* key -> value)."""
    out = {"cg.kind": "megatron", "cg.num_cuda_graphs": str(knobs.num_cuda_graphs),
           "cg.distribution": knobs.distribution, "cg.all_prefills": str(knobs.all_prefills).lower()}
    if not knobs.non_decode:
        out["cg.non_decode"] = "false"
        out["cg.all_prefills"] = "false"  # decode-only: no all-prefills flag, Megatron's default
        return out
    out["cg.mixed_prefill_count"] = str(knobs.mixed_prefill_count)
    if not knobs.all_prefills:
        out["cg.cuda_graph_max_tokens"] = str(knobs.cuda_graph_max_tokens)
    return out


def test_every_printed_setting_has_exactly_one_megatron_flag_that_translates_back():
    printed = [r for r in RULES if r.sets]
    assert {r.sets for r in printed} >= {"cg.kind=megatron", "cg.num_cuda_graphs", "cg.distribution",
                                         "cg.mixed_prefill_count", "cg.all_prefills=true",
                                         "cg.cuda_graph_max_tokens", "cg.non_decode=false"}
    for r in printed:
        assert r.flag in megatron_names(), r.flag
        assert flag_for(r.sets) is r
        key, _, value = r.sets.partition("=")
        arg = LaunchArg(r.flag, r.value or None) if value else LaunchArg(r.flag, "7")
        line = str(arg) if r.sets == "cg.kind=megatron" else f"--cuda-graph-impl local {arg}"
        if key == "cg.distribution":
            line = "--cuda-graph-impl local --inference-dynamic-batching-cuda-graph-sizing-distribution linear"
        t = translate(line)
        t.check()
        want = f"{key}={value or ('linear' if key == 'cg.distribution' else '7')}"
        assert want in t.overrides, (line, t.overrides)
    with pytest.raises(KeyError):
        flag_for("cg.sizes_per_octave")  # no Megatron flag: such a grid is never printed as one


def test_the_name_advise_used_to_print_is_not_megatrons_and_is_never_printed():
    assert "--inference-dynamic-batching-cuda-graph-max-tokens" not in megatron_names()
    with pytest.raises(ConfigError, match="is not a Megatron 0.19.2 argument"):
        translate("--inference-dynamic-batching-cuda-graph-max-tokens 2048").check()
    for knobs, _, _ in megatron_space(EngineConfig()):
        assert "--inference-dynamic-batching-cuda-graph-max-tokens" not in knobs.command


@pytest.mark.parametrize("engine", [EngineConfig(), EngineConfig(max_requests=64, max_tokens=4096),
                                    EngineConfig(num_speculative_tokens=2, tp_size=2),
                                    EngineConfig(max_requests=128, max_tokens=8192, max_sequence_length=8192)],
                         ids=["default", "small", "spec-tp2", "long"])
def test_every_megatron_knob_setting_prints_a_line_that_translates_to_its_settings_and_grid(engine):
    space = megatron_space(engine)
    for knobs, _, _ in space:
        t = translate(knobs.command)
        t.check()
        assert not t.no_effect and not t.unknown, knobs
        assert cg_settings(knobs.command) == _cg_keys(knobs), knobs
    # the grid it composes to is the grid advise simulated for that setting
    limits = [f"engine.{k}={getattr(engine, k)}" for k in ("max_requests", "max_tokens", "max_sequence_length",
                                                            "num_speculative_tokens", "tp_size")]
    for knobs, graphs, _ in random.Random(3).sample(space, 6):
        cfg = load_config(["model=hybrid", *limits, *translate(knobs.command).overrides])
        assert tuple(tuple(g) for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs) == graphs, knobs


def test_megatron_cannot_express_a_finer_or_a_peer_grid():
    assert graph_launch_args(replace(CGConfig(), sizes_per_octave=2)) is None
    assert graph_launch_args(replace(CGConfig(), kind="vllm")) is None
    assert graph_launch_args(replace(CGConfig(), num_cuda_graphs=None)) is None
    assert megatron_default_line() == "--cuda-graph-impl local"
    assert cg_settings(megatron_default_line()) == {"cg.kind": "megatron", "cg.num_cuda_graphs": "16",
                                                    "cg.all_prefills": "false"}


def test_against_the_users_line_only_the_differences_are_added_and_removed():
    knobs = MegatronKnobs(16, "exponential", 16, False, 2048, True)
    a = launch_advice(knobs.launch_args(), NEMOTRON)
    assert a.against == YOUR_LINE
    assert [str(x) for x in a.add] == ["--inference-dynamic-batching-cuda-graph-sizing-distribution exponential",
                                       "--inference-cuda-graph-max-tokens 2048"]
    assert a.remove == []
    gated = MegatronKnobs(8, "linear", 4, True, 512, True)
    line = "--enable-cuda-graph --inference-cuda-graph-max-tokens 1024 --decode-only-cuda-graphs"
    a = launch_advice(gated.launch_args(), line)
    assert [str(x) for x in a.remove] == ["--inference-cuda-graph-max-tokens 1024", "--decode-only-cuda-graphs"]
    assert "--cuda-graph-impl local" not in [str(x) for x in a.add]  # --enable-cuda-graph is that flag's old name
    assert cg_settings(applied(line, a)) == _cg_keys(gated)
    # a recommendation without all-prefills drops the user's --inference-cuda-graph-all-prefills
    a = launch_advice(knobs.launch_args(), NEMOTRON + " --inference-cuda-graph-all-prefills")
    assert [str(x) for x in a.remove] == ["--inference-cuda-graph-all-prefills"]


def test_without_a_line_the_advice_names_every_graph_flag_to_drop_if_present():
    a = launch_advice(MegatronKnobs(16, "exponential", 16, False, 2048, True).launch_args())
    assert a.against == ANY_LINE and [x.flag for x in a.add] == [x.flag for x in a.args]
    assert "--inference-cuda-graph-all-prefills" in [x.flag for x in a.remove]
    assert "remove if present --enable-cuda-graph" in a.text()
    for x in a.remove:
        assert x.flag in megatron_names()


_USER_GRAPH_ARGS = st.lists(st.sampled_from([
    "--cuda-graph-impl local", "--cuda-graph-impl none", "--cuda-graph-impl transformer_engine", "--enable-cuda-graph",
    "--external-cuda-graph", "--inference-dynamic-batching-num-cuda-graphs 8",
    "--inference-dynamic-batching-num-cuda-graphs 16", "--inference-dynamic-batching-num-cuda-graphs -1",
    "--inference-dynamic-batching-cuda-graph-sizing-distribution linear",
    "--inference-dynamic-batching-cuda-graph-mixed-prefill-count 4", "--decode-only-cuda-graphs",
    "--inference-cuda-graph-all-prefills", "--inference-cuda-graph-max-tokens 1024"]), max_size=6, unique=True)


@settings(max_examples=200, deadline=None)
@given(user=_USER_GRAPH_ARGS, pick=st.integers(0, 10**6))
def test_any_users_line_changed_as_advised_translates_to_the_recommendation(user, pick):
    space = megatron_space(EngineConfig())
    knobs = space[pick % len(space)][0]
    impl = [u for u in user if u.startswith(("--cuda-graph-impl", "--enable-cuda-graph", "--external-cuda-graph"))]
    user = [u for u in user if u not in impl[1:]]  # Megatron refuses two spellings of the graph switch
    line = "python gpt_dynamic_inference.py --hidden-size 1024 " + " ".join(user)
    a = launch_advice(knobs.launch_args(), line)
    changed = applied(line, a)
    translate(changed).check()
    assert cg_settings(changed) == _cg_keys(knobs)
    assert {x.flag for x in a.remove} <= set(GRAPH_FLAGS)
    assert "--hidden-size 1024" in changed  # nothing but graph flags is touched


def test_a_real_offline_inference_launch_line_is_read_whole():
    launcher, words = launch_tokens(OFFLINE.read_text())
    assert launcher[-2:] == ["-m", "examples.inference.offline_inference"] and words[0] == "--use-coordinator"
    t = translate(OFFLINE.read_text())
    t.check()
    no_effect = dict(t.no_effect)
    assert "offline_inference.py" in no_effect["--use-coordinator"]
    assert "no effect on what cgbench models" in no_effect["--async-mode"]
    assert "cg.non_decode=false" in t.overrides and "model.num_kv_heads=2" in t.overrides


def test_the_arguments_megatrons_inference_scripts_add_are_known_and_listed():
    t = translate(DYNAMIC.read_text())
    t.check()  # no refusal: every argument of the line is known
    no_effect = dict(t.no_effect)
    for flag in ("--num-tokens-to-generate", "--temperature", "--top_k", "--return-log-probs", "--prompts",
                 "--incoming-requests-per-sec", "--output-path", "--inference-repeat-n"):
        assert "megatron/inference/utils.py" in no_effect[flag], flag
    assert "engine.max_requests=64" in t.overrides and "cg.num_cuda_graphs=16" in t.overrides
    names = example_names()
    assert {"--top_p", "--incoming-requests-per-step", "--prompt-file", "--num-tokens-to-prompt",
            "--stop-words"} <= set(names)
    assert not set(names) & megatron_names()  # the scripts' own, not the main parser's


def test_a_misspelt_script_argument_gets_the_scripts_name_not_a_distant_megatron_one():
    assert closest_name("--num-tokens-to-generat") == "--num-tokens-to-generate"
    assert closest_name("--top-k") == "--top_k"
    with pytest.raises(ConfigError, match=r"--top-p is not a Megatron 0.19.2 argument \(did you mean --top_p\?\)"):
        translate("--top-p 0.9").check()


def test_the_committed_script_names_match_an_installed_megatron():
    import importlib.util

    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-core is not installed: the committed list (megatron_example_args.txt) is the reference")
    utils = Path(next(iter(spec.submodule_search_locations))) / "inference" / "utils.py"
    if not utils.exists():
        pytest.skip("the installed megatron has no megatron/inference/utils.py")
    from tests.helpers import load_script

    literal = load_script("megatron_arg_names").literal_flags(utils)
    assert literal <= set(example_names()) | megatron_names()

