"""Every option of every group composes; typos, wrong types and bad values are ConfigErrors."""

from __future__ import annotations

import pytest

from cgbench.config.compose import GROUPS, expand_sweep, group_options, load_config
from cgbench.config.schema import BenchConfig, ConfigError


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_has_options(group):
    assert group_options(group), f"conf/{group}/ is empty"


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in group_options(g)])
def test_every_option_composes(group, option):
    cfg = load_config([f"{group}={option}"])
    assert isinstance(cfg, BenchConfig)
    if group in ("model", "workload", "hardware", "sweep"):
        assert getattr(cfg, group).name == option


def test_defaults_are_the_documented_job():
    cfg = load_config([])
    assert (cfg.model.kind, cfg.cg.kind, cfg.policy.name, cfg.backend.name) == ("hybrid", "megatron", "megatron", "sim")
    assert (cfg.engine.max_requests, cfg.engine.max_tokens, cfg.engine.max_sequence_length) == (256, 16384, 2560)


@pytest.mark.parametrize("override,needle", [
    ("cg.num_cuda_graphs=abc", "cg.num_cuda_graphs"),
    ("cg.kind=nope", "cg.kind"),
    ("engine.max_tokens=-1", "engine.max_tokens"),
    ("engine.max_tokkens=5", "max_tokkens"),
    ("model=nope", "model/nope"),
    ("policy.name=greedy", "policy.name"),
    ("engine.max_tokens=100", "engine.max_tokens"),
    ("engine.chunked_prefill=maybe", "chunked_prefill"),
    ("workload.num_requests=0", "workload.num_requests"),
])
def test_bad_overrides_are_config_errors(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert needle in str(e.value)


def test_sweep_expansion_is_cartesian_first_key_slowest():
    points = expand_sweep(["model=transformer,hybrid", "policy=budget,megatron,defer", "seed=7"])
    assert len(points) == 6
    assert points[0] == ["model=transformer", "policy=budget", "seed=7"]
    assert points[1] == ["model=transformer", "policy=megatron", "seed=7"]
    assert points[3][0] == "model=hybrid"


def test_sweep_range_and_glob():
    assert [p[0] for p in expand_sweep(["seed=range(0,3)"])] == ["seed=0", "seed=1", "seed=2"]
    policies = [p[0].split("=")[1] for p in expand_sweep(["policy=glob(*)"])]
    assert sorted(policies) == sorted(group_options("policy"))


def test_sweep_rejects_interval_and_duplicates():
    with pytest.raises(ConfigError):
        expand_sweep(["seed=interval(0,1)"])
    with pytest.raises(ConfigError):
        expand_sweep(["seed=1,2", "seed=3"])
