"""The registries: every registered name has its builder, every tuple of names, unread-key rule,
graph estimate and state-file section derives from them, and an unknown name is refused at
validation with the closest one."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from cgbench.config.compose import load_config
from cgbench.config.limits import estimate_graphs
from cgbench.config.registry.grids import BUILTIN_GRID_KINDS, grid_kind
from cgbench.config.registry.policies import BUILTIN_POLICIES, builtin_sections, options_of
from cgbench.config.registry.pricers import COST_MODELS
from cgbench.config.registry.records import builder
from cgbench.config.registry.workloads import ARRIVAL_PROCESSES, LENGTH_DISTRIBUTIONS, OPEN_LOOP
from cgbench.config.schema import (
    CG_KINDS,
    PEER_KINDS,
    POLICIES,
    ArrivalConfig,
    BenchConfig,
    CGConfig,
    ConfigError,
    DistConfig,
    PolicyConfig,
    unread_keys,
)
from cgbench.engine.policies import Policy
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.replay import replay_round
from cgbench.grids.build import build_grid
from cgbench.grids.registry import BUILDERS as GRID_BUILDERS
from cgbench.results.state_file import parse_state
from cgbench.workload.sources import lengths_drawer, times_drawer

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CG = sorted(p.stem for p in (ROOT / "conf" / "cg").glob("*.yaml"))
STATE = ROOT / "tests" / "states" / "11_2_round1.json"


def test_every_registered_name_has_its_builder():
    assert set(GRID_BUILDERS) == set(BUILTIN_GRID_KINDS)
    for family in (ARRIVAL_PROCESSES, LENGTH_DISTRIBUTIONS, COST_MODELS):
        for name, record in family.items():  # each names its builder, and the name resolves
            assert callable(builder(record.builder)), name
    for name in POLICIES:
        policy = make_policy(PolicyConfig(name=name))
        assert isinstance(policy, Policy) and policy.name == name and policy.plugin is None


def test_the_schema_tuples_are_the_registries_names():
    # derived, and (for the names that existed before the registries) the same as the lists written by hand
    assert CG_KINDS == tuple(BUILTIN_GRID_KINDS) and POLICIES == tuple(BUILTIN_POLICIES)
    assert set(CG_KINDS) >= {"megatron", "decode_only", "none", "explicit", "vllm", "sglang", "trtllm"}
    assert set(POLICIES) >= {"budget", "megatron", "defer", "pad_guard", "wait_timeout"}
    assert PEER_KINDS == ("vllm", "sglang", "trtllm")
    assert {"poisson", "gamma", "constant"} <= set(OPEN_LOOP) and not {"all_at_once", "closed_loop"} & set(OPEN_LOOP)
    assert {"pad_guard", "wait_timeout"} <= set(builtin_sections())
    # the schema's option sections are exactly the registry's
    assert sorted(f.name for f in fields(PolicyConfig)) == sorted(["name", *builtin_sections()])


def test_every_arrival_process_and_length_distribution_draws():
    for name, source in ARRIVAL_PROCESSES.items():
        a = ArrivalConfig(process=name, rate=10.0, concurrency=2)
        if name == "closed_loop":
            continue  # the stream releases a closed loop's requests; it has no arrival times to draw
        times = times_drawer(a, random.Random(0))(5)
        assert len(times) == 5 and times == sorted(times), name
        assert ("rate" in source.reads) == (name in OPEN_LOOP)
    for name in LENGTH_DISTRIBUTIONS:
        d = DistConfig(dist=name, value=7, min=1, max=100, mean=20.0, std=5.0, sigma=0.5, bins=[1, 10, 50],
                       weights=[1.0, 2.0])
        lengths = lengths_drawer(d, random.Random(0))(50)
        assert len(lengths) == 50 and all(1 <= x <= 100 for x in lengths), name


@pytest.mark.e2e
@pytest.mark.parametrize("preset", SHIPPED_CG)
def test_each_estimate_bounds_the_built_grid_of_every_shipped_config(preset):
    built = 0
    for engine in ("default", "small", "chunked", "kv_tight"):
        for model in ("hybrid", "transformer"):
            cfg = load_config([f"cg={preset}", f"engine={engine}", f"model={model}"])
            try:
                count = len(build_grid(cfg.cg, cfg.engine, cfg.model).graphs)
            except ConfigError:
                continue  # the explicit list holds graphs larger than engine=small's limits
            estimate, key = estimate_graphs(cfg)
            assert estimate >= count, (preset, engine, model)
            if cfg.cg.kind in ("explicit", "none"):
                assert estimate == count
            assert key.startswith(("cg.", "engine."))
            built += 1
    assert built >= 2


def test_every_kind_has_an_estimate_and_an_unknown_one_is_refused_with_the_closest_name():
    for name in CG_KINDS:
        n, key = grid_kind(name).estimate(CGConfig(kind=name), BenchConfig().engine)
        assert n >= 0 and key
    with pytest.raises(ConfigError, match=r"cg.kind: 'vlm' is not one of .*; did you mean vllm\?"):
        load_config(["cg.kind=vlm"])
    with pytest.raises(ConfigError, match=r"policy.name: 'defr' is not one of .*; did you mean defer\?"):
        load_config(["policy.name=defr"])
    with pytest.raises(ConfigError, match="did you mean vllm"):
        estimate_graphs(BenchConfig(cg=CGConfig(kind="vlm")))


def test_unread_cg_keys_are_those_other_kinds_read():
    every = {k for kind in BUILTIN_GRID_KINDS.values() for k in kind.reads}
    for name, kind in BUILTIN_GRID_KINDS.items():
        cfg = BenchConfig(cg=CGConfig(kind=name, all_prefills=False))
        unread = {k.removeprefix("cg.") for k in unread_keys(cfg) if k.startswith("cg.")}
        assert unread == every - set(kind.reads), name
    # the worked example: padding is read by sglang and trtllm only, and the message says so
    why = unread_keys(BenchConfig(cg=CGConfig(kind="vllm")))["cg.padding"]
    assert why == "cg.kind=vllm (read with cg=sglang or trtllm)"
    # a kind's own extra rule: with all_prefills the cap is max_tokens
    assert "cg.cuda_graph_max_tokens" in unread_keys(BenchConfig(cg=CGConfig(kind="megatron", all_prefills=True)))


def test_unread_policy_workload_and_pricer_keys_follow_their_registries():
    unread = unread_keys(BenchConfig(policy=PolicyConfig(name="megatron")))
    assert {k for k in unread if k.startswith("policy.")} == {f"policy.{s}" for s in builtin_sections()}
    assert "policy.pad_guard" not in unread_keys(BenchConfig(policy=PolicyConfig(name="pad_guard")))
    cfg = BenchConfig()
    cfg.workload.arrival.process = "gamma"
    unread = unread_keys(cfg)
    assert "workload.arrival.burstiness" not in unread and "workload.arrival.rate" not in unread
    assert unread["workload.arrival.concurrency"] == "workload.arrival.process=gamma (read with closed_loop)"
    assert unread["backend.calibration"] == "backend.cost_model=roofline (read with cost_model=calibrated)"


def test_a_state_saves_and_restores_each_policys_options():
    doc = json.loads(STATE.read_text())
    changed = {"pad_guard": {"max_ratio": 1.25}, "wait_timeout": {"iters": 0}}
    doc["policy"] = changed
    state = parse_state(doc)
    for section in builtin_sections():  # the sections the state sets, and the defaults of the others
        expected = changed.get(section, asdict(BUILTIN_POLICIES[section].default_options()))
        assert asdict(options_of(state.policy, section)) == expected
    # the restored option is the one the replay uses: two prompts fit a graph, the third misses; with
    # iters=0 it is admitted at once (eager), with iters=5 it is deferred
    eager = replay_round(state, "wait_timeout")
    assert eager.deferred is None and [a[0] for a in eager.admitted] == [1, 2, 3]
    doc["policy"] = {"wait_timeout": {"iters": 5}}
    waiting = replay_round(parse_state(doc), "wait_timeout")
    assert waiting.deferred == 3 and [a[0] for a in waiting.admitted] == [1, 2]
