"""Gating when the captured list has no prefill or mixed graph: ``megatron`` gates on Megatron's three
conditions only, so non-chunked prefill defers forever (the run stalls, as Megatron's spins); chunked
prefill falls back to the unsnapped chunk; the cgbench-only gating policies keep a fourth condition."""

from __future__ import annotations

import pytest

from cgbench.config.compose import load_config
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.replay import replay_all, state_from_engine
from cgbench.engine.scheduler import gating_active
from cgbench.grids.build import build_grid
from cgbench.pipeline import build_engine, preflight_warnings, run_point
from cgbench.results.state_file import parse_state

CASE = ["model=hybrid", "cg=megatron", "cg.mixed_prefill_count=0", "workload.num_requests=20"]


def _grid(cfg):
    return build_grid(cfg.cg, cfg.engine, cfg.model)


@pytest.mark.slow
def test_the_list_is_decode_only_and_only_megatron_gates_on_it():
    cfg = load_config(CASE)
    grid = _grid(cfg)
    assert grid.graphs and not grid.non_decode and all(tuple(g)[1] == 0 for g in grid.graphs)
    active = {p: gating_active(make_policy(load_config(CASE + [f"policy={p}"]).policy), cfg.cg, grid)
              for p in ("budget", "megatron", "defer", "pad_guard", "wait_timeout", "megatron_6675", "cover")}
    assert active == {"budget": False, "megatron": True, "defer": False, "pad_guard": False,
                      "wait_timeout": False, "megatron_6675": True, "cover": False}


def test_megatron_non_chunked_stalls_without_a_step_and_counts_the_warnings():
    cfg = load_config(CASE)
    m = run_point(cfg)["metrics"]
    assert m["outcome"] == "stalled" and m["steps"] == 0 and m["gating_active"]
    assert "no prefill or mixed graph" in m["diagnosis"] and "every prefill is deferred" in m["diagnosis"]
    # Megatron warns every max(100, msl) rounds of one request's wait; cgbench counts the rounds of
    # its stall watchdog (8 * msl + 1000 by default), all spent deferring the head
    msl = cfg.engine.max_sequence_length
    watchdog = 8 * msl + 1000
    assert m["deferral_events"] == watchdog == m["max_cg_wait_iters"]
    assert m["starvation_warnings"] == watchdog // max(100, msl) == 8


def test_megatron_chunked_counterpart_completes_on_the_unsnapped_chunk():
    cfg = load_config(CASE + ["engine=chunked"])
    doc = run_point(cfg, trace=True)
    m = doc["metrics"]
    assert m["outcome"] == "completed" and m["gating_active"]
    assert m["requests"]["completed"] == 20
    prefill_steps = [s for s in doc["steps"] if s["real"][1] > 0]
    assert prefill_steps and all(s["graph"] is None for s in prefill_steps)
    assert set(m["eager_steps_by_reason"]) == {"no_mixed_graphs"}
    assert m["snap_splits"] == 0  # no graph to snap to: every chunk is the largest that fits


@pytest.mark.slow
def test_6675_stalls_non_chunked_and_serializes_chunked_prefills():
    """PR #6675 keeps Megatron's three conditions: non-chunked prefill stalls as under megatron; a chunk
    waits while other work runs and runs eager on an idle engine, so the chunked run completes with
    every prefill step eager and alone (no decode in it)."""
    m = run_point(load_config(CASE + ["policy=megatron_6675"]))["metrics"]
    assert m["outcome"] == "stalled" and m["steps"] == 0
    doc = run_point(load_config(CASE + ["engine=chunked", "policy=megatron_6675"]), trace=True)
    m = doc["metrics"]
    assert m["outcome"] == "completed" and m["requests"]["completed"] == 20 and m["deferral_events"] > 0
    prefill_steps = [s for s in doc["steps"] if s["real"][1] > 0]
    assert prefill_steps and all(s["graph"] is None and s["real"][2] == 0 for s in prefill_steps)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["defer", "wait_timeout", "budget", "cover"])
def test_cgbench_policies_keep_the_fourth_condition_and_complete(policy):
    m = run_point(load_config(CASE + [f"policy={policy}"]))["metrics"]
    assert m["outcome"] == "completed" and not m["gating_active"] and m["deferral_events"] == 0


def test_an_explicit_decode_only_list_stalls_the_same_way():
    cfg = load_config(["model=hybrid", "cg=explicit", "cg.graphs=[[8,0,8],[16,0,16]]", "workload.num_requests=4"])
    m = run_point(cfg)["metrics"]
    assert m["outcome"] == "stalled" and "no prefill or mixed graph" in m["diagnosis"]


def test_preflight_warning_names_the_configuration():
    (w,) = preflight_warnings(load_config(CASE))
    assert w["code"] == "gating_without_prefill_graphs" and "stall" in w["message"]
    (w,) = preflight_warnings(load_config(CASE + ["engine=chunked"]))
    assert "eager" in w["message"]
    assert preflight_warnings(load_config(CASE + ["policy=defer"])) == []
    assert preflight_warnings(load_config(["model=hybrid"])) == []
    doc = run_point(load_config(CASE))
    assert doc["warnings"][0]["code"] == "gating_without_prefill_graphs"


def test_schedule_makes_megatrons_decision_for_such_a_state():
    cfg = load_config(CASE)
    eng = build_engine(cfg)
    for spec in eng.stream.pop_due(0.0):
        eng.arrive(spec)
    eng.ctx.begin_round(0, 0)
    state = parse_state(state_from_engine(eng, cfg), "state")
    by = {d.policy: d for d in replay_all(state)}
    assert by["megatron"].gating_active and by["megatron"].admitted == ()
    assert by["megatron"].deferred == 0 and by["megatron"].stop_reason == "deferred"
    assert not by["megatron"].step_runs
    assert not by["defer"].gating_active and by["defer"].admitted  # admits on budgets, runs eager
