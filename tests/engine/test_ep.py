"""Expert parallelism: ranks in lockstep, each rule of Megatron 0.19.2's EP handling checked on traces."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.config.compose import load_config
from cgbench.config.schema import POLICIES, ConfigError
from cgbench.engine.ep import EP_PREFILL, EP_PREFILL_OTHER, EPEngine
from cgbench.pipeline import build_engine, run_point
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import examples, make_cfg, specs


def _ep_cfg(k: int, dispatcher: str, *, routing: str = "least_loaded", policy: str = "megatron",
            kind: str = "hybrid", chunked: bool = False, **engine):
    cfg = make_cfg(kind=kind, policy=policy, chunked=chunked, max_requests=16, max_tokens=1024, max_sequence_length=512,
                   block_size=16, **engine)
    return replace(cfg, engine=replace(cfg.engine, ep_size=k, moe_dispatcher=dispatcher, ep_routing=routing))


def _run(cfg, reqs, concurrency=0):
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs, concurrency=concurrency))
    state = eng.run()
    return eng, state


def _by_step(state):
    steps = defaultdict(dict)
    for t in state.trace:
        steps[t.step][t.rank] = t
    return [steps[s] for s in sorted(steps)]


STAGGERED = [RequestSpec(0, 0.0, 40, 30), RequestSpec(1, 0.0, 50, 30), RequestSpec(2, 0.004, 60, 20),
             RequestSpec(3, 0.008, 35, 25), RequestSpec(4, 0.02, 45, 10)]


@pytest.mark.parametrize("dispatcher", ["nccl", "te"])
def test_any_prefill_on_any_rank_makes_every_rank_eager(dispatcher):
    eng, state = _run(_ep_cfg(2, dispatcher), STAGGERED)
    assert state.outcome == "completed" and isinstance(eng, EPEngine)
    assert not eng.gating_active  # non-decode graphs off: gating inactive
    forced = 0
    for ranks in _by_step(state):
        assert sorted(ranks) == [0, 1]
        if any(t.real[1] > 0 for t in ranks.values()):
            for t in ranks.values():
                assert t.graph is None
                assert t.eager_reason == (EP_PREFILL if t.real[1] > 0 else EP_PREFILL_OTHER)
                forced += t.real[1] == 0
    assert forced > 0  # the staggered arrivals prefill on one rank while the other decodes


@pytest.mark.parametrize("dispatcher", ["nccl", "te"])
def test_decode_only_steps_match_on_the_max_token_count_across_ranks(dispatcher):
    eng, state = _run(_ep_cfg(2, dispatcher), STAGGERED)
    decode_graphs = [tuple(g) for g in eng.grid.graphs]
    assert decode_graphs and all(g[1] == 0 for g in decode_graphs)
    checked = 0
    for ranks in _by_step(state):
        if any(t.real[1] > 0 for t in ranks.values()):
            continue
        t_max = max(t.real[0] for t in ranks.values())
        for t in ranks.values():
            # brute force: the smallest decode graph covering the max token count and this rank's decodes
            fits = [g for g in decode_graphs if g[0] >= t_max and g[2] >= t.real[2]]
            assert t.graph == (min(fits) if fits else None)
            checked += 1
        if len({t.real[0] for t in ranks.values()}) > 1:
            assert len({t.graph for t in ranks.values()}) == 1 or None in {t.graph for t in ranks.values()}
    assert checked > 0


def test_nvls_matches_and_gates_per_rank():
    eng, state = _run(_ep_cfg(2, "nvls"), STAGGERED)
    assert eng.gating_active  # non-decode graphs stay on: megatron gates on each rank
    grid = eng.grid
    assert grid.non_decode
    for ranks in _by_step(state):
        for t in ranks.values():
            g, reason = grid.lookup(*t.real)
            assert t.graph == (tuple(g) if g is not None else None) and t.eager_reason == reason
    # a rank's prefill never forces the other eager
    assert EP_PREFILL_OTHER not in state.stats.eager_reasons and EP_PREFILL not in state.stats.eager_reasons


def test_idle_ranks_run_dummy_steps_whenever_any_rank_has_work():
    eng, state = _run(_ep_cfg(3, "nccl"), [RequestSpec(0, 0.0, 20, 12)])
    ep = eng.ep_metrics()
    assert ep["rank_requests"] == [1, 0, 0]
    assert ep["lockstep_steps"] == 12  # one prefill step (first token) + 11 decode steps
    assert ep["rank_dummy_steps"] == [0, 12, 12] and ep["dummy_steps"] == 24
    for ranks in _by_step(state):
        assert ranks[1].real == ranks[2].real == (1, 0, 1)  # (1 + spec, 0, 1)
        assert ranks[1].admitted == []
    assert state.stats.steps == 3 * 12  # whole-system steps are rank-steps


def test_no_step_runs_while_every_rank_is_idle():
    # two requests far apart: between them nobody has work, and no dummy step runs
    eng, state = _run(_ep_cfg(2, "nccl"), [RequestSpec(0, 0.0, 20, 3), RequestSpec(1, 5.0, 20, 3)])
    assert eng.ep_metrics()["lockstep_steps"] == 6


def test_least_loaded_routing_ties_to_the_lowest_index():
    eng = build_engine(_ep_cfg(3, "nccl"), stream=ArrivalStream([]))
    assert [eng.route(RequestSpec(i, 0.0, 10, 5)) for i in range(1)] == [0]
    # routing counts in-flight requests: queue them by hand and watch the choice
    picks = []
    for i in range(7):
        r = eng.route(RequestSpec(i, 0.0, 10, 5))
        picks.append(r)
        eng.ranks[r].arrive(RequestSpec(i, 0.0, 10, 5))
    assert picks == [0, 1, 2, 0, 1, 2, 0]
    eng.ranks[1].queue.clear()  # rank 1 drains: it is the least loaded now
    assert eng.route(RequestSpec(9, 0.0, 10, 5)) == 1


def test_round_robin_routing():
    eng, state = _run(_ep_cfg(3, "nccl", routing="round_robin"), specs(*[(10, 3)] * 7))
    assert eng.ep_metrics()["rank_requests"] == [3, 2, 2]


def test_config_ep_keys():
    with pytest.raises(ConfigError, match="engine.moe_dispatcher"):
        load_config(["engine.moe_dispatcher=nvls"])  # unread with ep_size=1
    with pytest.raises(ConfigError, match="engine.moe_dispatcher"):
        load_config(["engine.ep_size=2", "engine.moe_dispatcher=deepep"])
    with pytest.raises(ConfigError, match="engine.ep_size"):
        load_config(["engine.ep_size=0"])


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("dispatcher", ["nccl", "nvls"])
def test_ep8_runs_with_every_policy(policy, dispatcher):
    m = run_point(load_config(["model=hybrid", "engine.ep_size=8", f"engine.moe_dispatcher={dispatcher}",
                               f"policy={policy}", "workload.num_requests=24"]))["metrics"]
    assert m["outcome"] == "completed" and m["requests"]["completed"] == 24
    assert m["steps"] == 8 * m["ep"]["lockstep_steps"]
    assert sum(m["ep"]["rank_requests"]) == 24


def test_ep_oracle_setting_runs_the_same_engine():
    """The fast engine falls back to the lockstep oracle cores for EP: both settings give one result."""
    cfg = load_config(["model=hybrid", "engine.ep_size=4", "workload.num_requests=16"])
    a = run_point(replace(cfg, engine=replace(cfg.engine, oracle=True)), trace=True)
    b = run_point(replace(cfg, engine=replace(cfg.engine, oracle=False)), trace=True)
    assert a["metrics"] == b["metrics"] and a["steps"] == b["steps"]


# -- property: one busy rank decides like a single engine --------------------------------------------

@st.composite
def one_rank_workloads(draw):
    n = draw(st.integers(1, 8))
    reqs = [RequestSpec(i, 0.0, draw(st.integers(1, 200)), draw(st.integers(1, 60))) for i in range(n)]
    return (draw(st.integers(2, 4)), draw(st.sampled_from(["nccl", "nvls", "te"])),
            draw(st.sampled_from(["megatron", "budget", "defer"])), draw(st.booleans()),
            draw(st.sampled_from(["transformer", "hybrid"])), reqs)


@settings(max_examples=examples(60, stretch=False), suppress_health_check=[HealthCheck.too_slow])
@given(one_rank_workloads())
def test_a_lone_busy_rank_decides_like_a_single_rank_run(case):
    """A closed loop of one request at a time: least-loaded routing sends every request to rank 0 (all
    ranks empty, ties to the lowest index). Rank 0's steps, graphs and admissions then equal a
    single-rank run's (with non-decode graphs off for nccl/te); the other ranks only run dummies."""
    k, dispatcher, policy, chunked, kind, reqs = case
    cfg = _ep_cfg(k, dispatcher, policy=policy, kind=kind, chunked=chunked)
    eng, state = _run(cfg, reqs, concurrency=1)
    single_cg = replace(cfg.cg, non_decode=False) if dispatcher != "nvls" else cfg.cg
    single_cfg = replace(cfg, cg=single_cg, engine=replace(cfg.engine, ep_size=1, oracle=True))
    one, ref = _run(single_cfg, reqs, concurrency=1)
    assert state.outcome == ref.outcome
    ep = eng.ep_metrics()
    assert ep["rank_requests"] == [len(reqs)] + [0] * (k - 1)
    mine = [(t.step, t.real, t.graph, t.admitted, t.deferred) for t in state.trace if t.rank == 0]
    theirs = [(t.step, t.real, t.graph, t.admitted, t.deferred) for t in ref.trace]
    assert mine == theirs
    assert all(t.real == (1, 0, 1) for t in state.trace if t.rank != 0)
    assert [(r.id, r.finish_step, r.generated) for r in state.requests] == \
        [(r.id, r.finish_step, r.generated) for r in ref.requests]
    for rank in eng.ranks:  # conservation per rank: every block back in its pool
        assert rank.ctx.free_blocks == rank.ctx.pool_blocks


def test_ep_size_1_is_the_single_engine():
    cfg = load_config(["model=hybrid", "workload.num_requests=16"])
    eng = build_engine(cfg)
    assert not isinstance(eng, EPEngine)
    assert "ep" not in run_point(cfg)["metrics"]


def test_te_equals_nccl():
    a = run_point(load_config(["model=hybrid", "engine.ep_size=4", "engine.moe_dispatcher=nccl",
                               "workload.num_requests=16"]))["metrics"]
    b = run_point(load_config(["model=hybrid", "engine.ep_size=4", "engine.moe_dispatcher=te",
                               "workload.num_requests=16"]))["metrics"]
    a["ep"].pop("moe_dispatcher"), b["ep"].pop("moe_dispatcher")
    assert a == b


