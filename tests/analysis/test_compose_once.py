"""Composing a sweep's points once per set of group selections (``Composer``) gives exactly what a
fresh Hydra composition of each point gives: the same BenchConfig on every point of every shipped
sweep, and the same error message for a bad point."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from cgbench.analysis.sweep.plan import plan_sweep
from cgbench.config.compose import Composer, load_config_fresh
from cgbench.config.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "conf" / "sweep").glob("*.yaml"))


def test_every_shipped_sweep_is_covered():
    assert set(SHIPPED) >= {"ci", "default", "rate"}


@pytest.mark.e2e  # every point of every shipped sweep, composed afresh: about 200 compositions
@pytest.mark.parametrize("name", SHIPPED)
def test_every_point_of_a_shipped_sweep_equals_a_fresh_composition(name):
    plan = plan_sweep([f"sweep={name}"])
    params = yaml.safe_load((ROOT / "conf" / "sweep" / f"{name}.yaml").read_text())["params"]
    assert set(plan.axes) == set(params)  # every axis of the sweep file is in the plan
    for p in plan.points:
        fresh = load_config_fresh(list(p.overrides))
        assert asdict(p.cfg) == asdict(fresh), p.overrides


@pytest.mark.slow
def test_one_hydra_composition_per_distinct_set_of_group_selections():
    composer = Composer()
    points = [["model=hybrid", "cg=dense", f"seed={s}", f"workload.num_requests={n}"]
              for s in range(3) for n in (8, 16)]
    points += [["model=transformer", "cg=dense", "seed=1"], ["cg=dense", "model=transformer", "seed=2"]]
    for p in points:
        assert asdict(composer.load(p)) == asdict(load_config_fresh(p)), p
    # hybrid+dense, transformer+dense, dense+transformer (the written order of the selections is the key)
    assert composer.compositions == 3


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ["model=hybrid", "engine.max_requests=64", "engine.chunked_prefill=true", "slo.ttft_ms=250.5"],
    ["cg=explicit", "cg.graphs=[[8,1,0],[16,2,1]]", "cg.all_prefills=false", "cg.non_decode=true"],
    ["workload=chat", "workload.arrival.rate=12", "workload.num_requests=32", "++seed=4"],
    ["workload.name='a,b'", "out_dir=elsewhere", "sweep.name=x"],
    ["policy=wait_timeout", "policy.wait_timeout.iters=7"],
])
def test_value_overrides_of_every_kind_equal_a_fresh_composition(overrides):
    assert asdict(Composer().load(overrides)) == asdict(load_config_fresh(overrides))


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ["workload.num_requests=abc"],  # a type error from OmegaConf
    ["workload.num_requests=0"],  # a validation error from the schema
    ["workload.nope=1"],  # unknown key, with a did-you-mean
    ["+seed=3"],  # adds a key that exists
    ["model=nope"],  # an unknown option of a group
    ["policy=budget", "policy.wait_timeout.iters=3"],  # a key the chosen option never reads
    ["cg.graphs=[[8,1,0]"],  # an override Hydra cannot parse
])
def test_a_bad_point_gives_the_fresh_compositions_error(overrides):
    with pytest.raises(ConfigError) as fresh:
        load_config_fresh(overrides)
    with pytest.raises(ConfigError) as fast:
        Composer().load(overrides)
    assert str(fast.value) == str(fresh.value)


@pytest.mark.slow
def test_a_user_option_with_its_own_defaults_list_equals_a_fresh_composition(tmp_path, monkeypatch):
    conf = tmp_path / "userconf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "mine.yaml").write_text("defaults: [hybrid]\nname: mine\nhidden_size: 4608\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    for p in (["model=mine", "seed=3"], ["model=mine", "model.num_kv_heads=4"]):
        assert asdict(Composer().load(p)) == asdict(load_config_fresh(p)), p


@pytest.mark.slow
def test_an_interpolation_sees_the_overridden_value_as_in_a_fresh_composition(tmp_path, monkeypatch):
    """With an interpolation in the tree, a value override must reach what refers to it: such a
    tree takes Hydra's own path on a copy (the quick path would set one field only)."""
    conf = tmp_path / "userconf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "linked.yaml").write_text("defaults: [hybrid]\nname: linked\nnum_kv_heads: ${model.head_dim}\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    p = ["model=linked", "model.head_dim=16"]
    fast = Composer().load(p)
    assert fast.model.num_kv_heads == 16
    assert asdict(fast) == asdict(load_config_fresh(p))


@pytest.mark.slow
def test_the_quick_path_leaves_the_cached_composition_unchanged():
    composer = Composer()
    first = composer.load(["model=hybrid", "seed=7", "engine.chunked_prefill=true"])
    again = composer.load(["model=hybrid"])
    assert (first.seed, first.engine.chunked_prefill) == (7, True)
    assert asdict(again) == asdict(load_config_fresh(["model=hybrid"]))
    assert composer.compositions == 1


@pytest.mark.slow
def test_a_partial_model_file_is_refused_as_a_fresh_composition_refuses_it(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "partial.yaml").write_text(
        "name: partial\nkind: transformer\nlayer_pattern: '*-'\npattern_repeat: 2\nhidden_size: 64\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", f"{ROOT / 'conf'}:{tmp_path}")
    point = ["model=partial", "seed=3"]
    with pytest.raises(ConfigError) as fresh:
        load_config_fresh(point)
    composer = Composer()
    with pytest.raises(ConfigError) as once:
        composer.load(point)
    assert str(once.value) == str(fresh.value) and "missing: vocab_size" in str(once.value)
    # stated as overrides, the same fields complete it on both paths
    filled = point + ["model.vocab_size=256", "model.dtype_bytes=2", "model.num_attention_heads=4",
                      "model.num_kv_heads=2", "model.head_dim=16", "model.ffn_hidden_size=128",
                      "model.gated_mlp=true"]
    assert asdict(composer.load(filled)) == asdict(load_config_fresh(filled))
