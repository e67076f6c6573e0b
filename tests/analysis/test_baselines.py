"""The baselines a run or a recommendation is compared with (cgbench.analysis.baselines): the lines
users run, each a plain run of the overrides it names, checked against the shipped presets and the
translator."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from cgbench.analysis.baselines import (
    GATING_OFF,
    LAUNCH_LINE,
    MEGATRON_DEFAULT,
    NO_GRAPHS,
    baselines,
    megatron_default_overrides,
)
from cgbench.config.compose import load_config
from cgbench.config.megatron_args import with_megatron_args
from cgbench.config.schema import PolicyConfig
from cgbench.pipeline import gating_of

LINE = (Path(__file__).resolve().parents[1] / "config" / "data" / "nemotron_h_8b_tp8.sh").read_text()
GATED = ["model=hybrid", "workload.num_requests=48", "policy=defer", "engine.chunked_prefill=true"]


def _by_kind(overrides, **kw):
    found, notes = baselines(load_config(overrides), overrides, **kw)
    return {b.kind: b for b in found}, notes


def test_a_gated_run_is_compared_with_gating_off_megatrons_default_line_and_no_graphs():
    cfg = load_config(GATED)
    found, notes = _by_kind(GATED)
    assert list(found) == [GATING_OFF, MEGATRON_DEFAULT, NO_GRAPHS]
    assert notes == ["your launch line: no --megatron-args line given"]
    assert found[GATING_OFF].cfg == replace(cfg, policy=PolicyConfig(name="budget"))
    assert not gating_of(found[GATING_OFF].cfg).active
    # Megatron's default line is the shipped Megatron-defaults-without-all-prefills preset, under Megatron's scheduler
    megatron = found[MEGATRON_DEFAULT].cfg
    assert megatron.cg == load_config(["cg=megatron_no_all_prefills"]).cg and megatron.policy.name == "megatron"
    assert replace(megatron, cg=cfg.cg, policy=cfg.policy) == cfg  # nothing else changes
    assert "--inference-cuda-graph-all-prefills" in found[MEGATRON_DEFAULT].label
    assert "gating active" not in found[MEGATRON_DEFAULT].label
    assert not gating_of(megatron).active and "needs --inference-cuda-graph-all-prefills" in gating_of(megatron).reason
    assert found[NO_GRAPHS].cfg.cg.kind == "none" and found[NO_GRAPHS].cfg.policy.name == "budget"
    for b in found.values():
        assert load_config(list(b.overrides)) == b.cfg  # each is a plain run of what it names


def test_the_users_line_is_what_the_line_alone_composes_to_on_the_same_workload():
    user = ["policy=defer", "cg.all_prefills=true", "engine.max_tokens=4096", "workload.num_requests=64",
            "hardware=h200", "engine.kv_blocks=0"]
    ovr, _ = with_megatron_args(LINE, user)
    found, _ = _by_kind(ovr, launch_line=LINE)
    line = found[LAUNCH_LINE].cfg
    alone = load_config(with_megatron_args(LINE, ["workload.num_requests=64", "hardware=h200", "policy=megatron"])[0])
    assert line == alone
    assert line.cg.all_prefills is False and line.policy.name == "megatron"  # what the line runs today
    assert line.engine.max_tokens == 8192 and line.engine.kv_blocks == 37767  # the line's, not the user's
    assert line.workload == load_config(ovr).workload and line.hardware.name == "h200"
    assert not gating_of(line).active


def test_a_baseline_that_is_the_run_itself_or_another_is_not_compared_twice():
    default = ["cg=megatron_no_all_prefills", "policy=megatron", "workload.num_requests=16"]
    found, notes = _by_kind(default)
    assert list(found) == [NO_GRAPHS]
    assert notes[0].startswith("gating off: this run already runs without gating (needs")
    assert notes[1] == "your launch line: no --megatron-args line given"
    assert notes[2].startswith("Megatron's default line: composes to the same config as this run")
    # the user's line is Megatron's default: one comparison, named once
    ovr, _ = with_megatron_args("--cuda-graph-impl local", ["policy=defer", "cg.all_prefills=true"])
    found, notes = _by_kind(ovr, launch_line="--cuda-graph-impl local")
    assert list(found) == [GATING_OFF, LAUNCH_LINE, NO_GRAPHS]
    assert "Megatron's default line: composes to the same config as your launch line" in notes[0]


def test_megatron_default_overrides_come_from_the_translator():
    assert megatron_default_overrides() == ["cg=megatron", "cg.kind=megatron", "cg.num_cuda_graphs=16",
                                            "cg.all_prefills=false", "policy=megatron"]


@pytest.mark.parametrize("extra", [["cg=dense", "policy.wait_timeout.iters=3", "policy=wait_timeout"],
                                   ["cg=explicit", "cg.graphs=[[64,0,64],[512,4,60]]"]])
def test_the_users_grid_and_policy_options_are_dropped_with_the_group(extra):
    found, _ = _by_kind(["model=hybrid", *extra])
    assert asdict(found[MEGATRON_DEFAULT].cfg.cg) == asdict(load_config(["cg=megatron_no_all_prefills"]).cg)
    assert found[GATING_OFF].cfg.policy == PolicyConfig(name="budget")
