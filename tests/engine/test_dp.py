"""Data-parallel ranks (cgbench.engine.dp): independent clocks behind the coordinator, EP groups in
lockstep, the fast engine equal to the oracle per rank, the merged ledger, the config rules."""

from __future__ import annotations

from array import array
from dataclasses import astuple, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.config.compose import load_config
from cgbench.config.schema import ConfigError, SloConfig
from cgbench.engine.core import Engine
from cgbench.engine.dp import DPEngine
from cgbench.engine.fast import FastEngine
from cgbench.engine.request import Outcome
from cgbench.pipeline import build_engine, metrics_of, run_point
from cgbench.results.metrics import request_record
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import examples, make_cfg, scenarios

EXAMPLES = examples(150)


def _dp_cfg(k: int, *, routing: str = "least_loaded", oracle: bool = False, **engine):
    cfg = make_cfg(max_requests=16, max_tokens=1024, max_sequence_length=512, block_size=16, **engine)
    return replace(cfg, engine=replace(cfg.engine, dp_size=k, dp_routing=routing, oracle=oracle))


def _run(cfg, reqs, concurrency=0, trace=True):
    eng = build_engine(cfg, trace=trace, stream=ArrivalStream(reqs, concurrency=concurrency))
    return eng, eng.run()


def _ids_by_rank(eng):
    return [sorted(r.id for r in rank.state.requests) for rank in eng.ranks]


def _everything(eng, state):
    return (metrics_of(eng, state, SloConfig()), [t.to_json() for t in state.trace],
            [request_record(r) for r in state.requests])


def test_dp_size_1_is_the_single_engine_byte_for_byte():
    base = run_point(load_config(["workload.num_requests=60"]), [])
    one = run_point(load_config(["workload.num_requests=60", "engine.dp_size=1"]), [])
    assert "dp" not in one["metrics"]
    for key in ("metrics", "graph_usage", "deferrals", "warnings", "config"):
        assert one[key] == base[key]


def test_ranks_have_their_own_clocks():
    # two requests at t = 0 on two ranks: each runs as if alone (no lockstep), so each rank's makespan
    # is the single engine's for its request alone
    reqs = [RequestSpec(0, 0.0, 40, 30), RequestSpec(1, 0.0, 40, 5)]
    eng, state = _run(_dp_cfg(2), reqs)
    assert isinstance(eng, DPEngine) and state.outcome == "completed"
    assert _ids_by_rank(eng) == [[0], [1]]
    alone = [_run(_dp_cfg(1), [replace(r, id=0)])[1] for r in reqs]
    dp = eng.dp_metrics()
    assert dp["rank_makespan_s"] == [s.now_s for s in alone]
    assert dp["rank_steps"] == [s.stats.steps for s in alone] == [30, 5]
    assert state.now_s == max(s.now_s for s in alone)
    assert state.stats.steps == 35


def test_fewest_in_flight_counts_pending_requests_at_the_arrival():
    # request 0 at t=0 -> rank 0 (tie, lowest index); request 1 at t=1e-4, while rank 0 still runs
    # request 0 -> rank 1; request 2 long after both finished -> rank 0 again (tie); request 3 at the
    # same instant -> rank 1 (rank 0 now has one pending)
    reqs = [RequestSpec(0, 0.0, 40, 30), RequestSpec(1, 1e-4, 40, 30), RequestSpec(2, 10.0, 30, 4),
            RequestSpec(3, 10.0, 30, 4)]
    eng, state = _run(_dp_cfg(2), reqs)
    assert _ids_by_rank(eng) == [[0, 2], [1, 3]]
    assert eng.dp_metrics()["rank_requests"] == [2, 2]


def test_a_completion_after_the_arrival_is_not_yet_reported():
    # rank 0 runs requests 0 (short) and 2, rank 1 request 1. Request 3 arrives in the middle of the
    # step at whose end request 0 finishes: the coordinator still counts 2 pending on rank 0 (1 on
    # rank 1), so it goes to rank 1; arriving at that step's end, rank 0's count is 1: a tie, rank 0
    base = [RequestSpec(0, 0.0, 40, 3), RequestSpec(1, 0.0, 40, 60), RequestSpec(2, 0.0, 40, 60)]
    eng, state = _run(_dp_cfg(2), base)
    assert _ids_by_rank(eng) == [[0, 2], [1]]
    done = next(r.finish_s for r in state.requests if r.id == 0)
    last = next(t for t in eng.ranks[0].state.trace if t.t_s + t.dt_s == done)
    for t, ranks in ((last.t_s + last.dt_s / 2, [[0, 2], [1, 3]]), (done, [[0, 2, 3], [1]])):
        eng, _ = _run(_dp_cfg(2), base + [RequestSpec(3, t, 20, 2)])
        assert _ids_by_rank(eng) == ranks


def test_prefix_routing_follows_the_shared_prefix():
    def spec(i, t, *hashes):
        return RequestSpec(i, t, 64, 8, array("q", hashes))

    # two conversations; each turn's hashes extend its conversation's: routed where its history went
    reqs = [spec(0, 0.0, 1, 2), spec(1, 0.0, 7, 8), spec(2, 0.5, 1, 2, 3), spec(3, 0.5, 7, 8, 9),
            spec(4, 1.0, 7, 8, 9, 10), spec(5, 1.0, 1, 2, 3, 4)]
    eng, state = _run(_dp_cfg(2, routing="prefix_longest"), reqs)
    assert state.outcome == "completed"
    assert _ids_by_rank(eng) == [[0, 2, 5], [1, 3, 4]]
    eng, _ = _run(_dp_cfg(2), reqs)  # least_loaded ignores the hashes
    assert _ids_by_rank(eng) == [[0, 2, 4], [1, 3, 5]]


@pytest.mark.parametrize("n", [127, 128, 129, 300])
def test_merged_ledger_and_every_request_its_tokens(n):
    reqs = [RequestSpec(i, i * 0.002, 20 + i % 50, 1 + i % 17) for i in range(n)]
    eng, state = _run(_dp_cfg(3), reqs, trace=False)
    assert state.outcome == "completed"
    merged = [astuple(r) for r in state.requests]
    per_rank = sorted((astuple(r) for rank in eng.ranks for r in rank.state.requests), key=lambda t: t[0])
    assert merged == per_rank
    assert [r.id for r in state.requests] == list(range(n))
    for r in state.requests:
        assert r.generated == r.output_len == reqs[r.id].output_tokens
    assert sum(eng.dp_metrics()["rank_completed"]) == n
    for rank in eng.ranks:  # KV conservation per rank: every block back in its own pool
        assert rank.ctx.free_blocks == rank.ctx.pool_blocks
    oracle, ostate = _run(_dp_cfg(3, oracle=True), reqs, trace=False)
    assert _everything(oracle, ostate) == _everything(eng, state)


def test_ep_groups_step_in_lockstep_inside_and_independently_across():
    cfg = make_cfg(kind="hybrid", max_requests=16, max_tokens=1024, max_sequence_length=512, block_size=16)
    cfg = replace(cfg, engine=replace(cfg.engine, dp_size=4, ep_size=2))
    reqs = [RequestSpec(0, 0.0, 40, 40), RequestSpec(1, 0.0, 40, 3), RequestSpec(2, 0.0, 40, 5),
            RequestSpec(3, 0.0, 40, 5)]
    eng, state = _run(cfg, reqs)
    assert state.outcome == "completed"
    assert _ids_by_rank(eng) == [[0], [1], [2], [3]]
    dp = eng.dp_metrics()
    ep = metrics_of(eng, state, SloConfig())["ep"]
    assert ep["rank_requests"] == dp["rank_requests"] == [1, 1, 1, 1]
    assert ep["rank_dummy_steps"] == [0, 37, 0, 0] and ep["dummy_steps"] == 37
    assert ep["lockstep_steps"] == 40 + 5
    steps, clock = dp["rank_steps"], dp["rank_makespan_s"]
    # ranks 0, 1 form group 0, ranks 2, 3 group 1: equal within a group (rank 1 runs dummy forwards
    # while rank 0 decodes), different across
    assert steps[0] == steps[1] == 40 and steps[2] == steps[3] == 5
    assert clock[0] == clock[1] and clock[2] == clock[3] and clock[2] < clock[0]


@pytest.mark.slow  # an oracle comparison over random configs
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([2, 3, 4]), st.sampled_from(["least_loaded", "round_robin", "prefix_longest",
                                                                 "prefix_first_block"]),
       st.sampled_from([0, 0, 2]), st.randoms(use_true_random=False))
def test_fast_engine_equals_oracle_per_rank(scenario, k, routing, concurrency, rnd):
    cfg, reqs = scenario
    if routing.startswith("prefix"):  # a few shared prefixes of random depth
        reqs = [replace(r, prefix_blocks=array("q", [rnd.randint(0, 2)] + [rnd.randint(0, 3)
                                                                               for _ in range(rnd.randint(0, 3))]))
                for r in reqs]
    # independent single-engine ranks (DP x EP groups have their own test); prefix caching is on one engine only
    cfg = replace(cfg, engine=replace(cfg.engine, dp_size=k, dp_routing=routing, ep_size=1, prefix_caching=False,
                                      prefix_caching_mamba_slots=0, prefix_gate="full"))
    fast, fs = _run(replace(cfg, engine=replace(cfg.engine, oracle=False)), reqs, concurrency)
    slow, ss = _run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs, concurrency)
    assert all(isinstance(r, FastEngine) for r in fast.ranks)
    assert all(type(r) is Engine for r in slow.ranks)
    f, s = _everything(fast, fs), _everything(slow, ss)
    assert f[0] == s[0]
    assert f[1] == s[1]
    assert f[2] == s[2]
    for r in fs.requests:  # every completed request got exactly its tokens
        if r.outcome == Outcome.COMPLETED:
            assert r.generated == r.output_len


def test_config_rules():
    with pytest.raises(ConfigError, match="engine.dp_size"):
        load_config(["engine.dp_size=0"])
    with pytest.raises(ConfigError, match="engine.dp_routing"):
        load_config(["engine.dp_size=2", "engine.dp_routing=fastest"])
    with pytest.raises(ConfigError, match="engine.dp_routing_alpha"):
        load_config(["engine.dp_size=2", "engine.dp_routing=prefix_longest", "engine.dp_routing_alpha=1.5"])
    with pytest.raises(ConfigError, match="engine.dp_routing"):  # unread: dp_size 1
        load_config(["engine.dp_routing=round_robin"])
    with pytest.raises(ConfigError, match="engine.dp_routing_alpha"):  # unread: not a prefix routing
        load_config(["engine.dp_size=2", "engine.dp_routing_alpha=0.3"])
    with pytest.raises(ConfigError, match="prefix-block hashes"):  # a generated workload has none
        load_config(["engine.dp_size=2", "engine.dp_routing=prefix_longest"])
    with pytest.raises(ConfigError, match="multiple of engine.ep_size"):
        load_config(["model=hybrid", "engine.dp_size=3", "engine.ep_size=2"])
    with pytest.raises(ConfigError, match="engine.ep_routing"):  # the coordinator routes: dp_routing
        load_config(["model=hybrid", "engine.dp_size=4", "engine.ep_size=2", "engine.ep_routing=round_robin"])
    with pytest.raises(ConfigError, match="simulated only"):
        load_config(["backend=torch", "engine.dp_size=2"])
    assert load_config(["engine.dp_size=2"]).engine.dp_size == 2


@pytest.mark.slow
def test_a_gating_flag_saves_the_round_of_the_rank_that_shows_it(tmp_path):
    import json

    from typer.testing import CliRunner

    from cgbench.cli.app import app
    from cgbench.results.state_file import load_state

    out = tmp_path / "r.json"
    runner = CliRunner()
    r = runner.invoke(app, ["run", "policy=defer", "cg=sparse", "engine=chunked", "workload=chat",
                            "workload.num_requests=120", "engine.dp_size=2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    flag = next(w for w in doc["warnings"] if "state_file" in w)  # the first gating flag's
    assert flag["code"] == "long_graph_wait"
    state = load_state(flag["state_file"])
    # the first rank whose round reaches the flag's threshold (142 consecutive waits here)
    assert flag["threshold"] < doc["metrics"]["max_cg_wait_iters"]
    assert state.description.startswith("data-parallel rank 0 of 2")
    assert state.engine.dp_size == 1  # a rank is one engine
    s = runner.invoke(app, ["schedule", flag["state_file"], "--policy", "defer", "--format", "json"])
    assert s.exit_code == 0 and json.loads(s.stdout)["deferred"] is not None  # the round defers again


def test_a_rank_far_more_eager_than_the_others_is_flagged():
    from cgbench.results.health import dp_eager_rank_flag

    def dp(*eager):
        return {"dp": {"rank_eager_step_fraction": list(eager), "most_eager_rank": eager.index(max(eager)),
                       "routing": "least_loaded"}}

    flag = dp_eager_rank_flag(dp(0.02, 0.30, 0.04))  # 0.30 vs the others' mean 0.03
    assert [f["code"] for f in flag] == ["dp_eager_rank"] and flag[0]["rank"] == 1
    assert "rank 1 ran 30.00%" in flag[0]["message"]
    assert dp_eager_rank_flag(dp(0.02, 0.06, 0.04)) == []  # 0.03 above the mean: under the gap
    assert dp_eager_rank_flag(dp(0.40, 0.50, 0.30)) == []  # 0.15 above, but not twice the mean
    assert dp_eager_rank_flag({}) == []  # not a data-parallel run


@pytest.mark.slow
def test_a_dp_result_validates_against_the_result_schema():
    from tests.helpers import schema_errors

    for extra in (["engine.dp_size=3"], ["model=hybrid", "engine.dp_size=4", "engine.ep_size=2"]):
        doc = run_point(load_config(["workload.num_requests=24", *extra]), [], trace=True)
        assert "dp" in doc["metrics"] and schema_errors(doc) == ("result", [])
        assert {s["rank"] for s in doc["steps"]} == set(range(doc["metrics"]["dp"]["dp_size"]))


@pytest.mark.slow  # random configs through EP groups
@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["nccl", "nvls"]))
def test_ep_groups_keep_every_invariant(scenario, dispatcher):
    cfg, reqs = scenario  # check_invariants: KV conservation per rank at every step
    cfg = replace(cfg, engine=replace(cfg.engine, dp_size=4, ep_size=2, moe_dispatcher=dispatcher))
    eng, state = _run(cfg, reqs)
    ids = sorted(r.id for r in state.requests)
    # every request arrives, unless every group crashed first (then, as on one engine, the rest never do)
    assert ids == [r.id for r in reqs] if not all(eng.crashed) else set(ids) <= {r.id for r in reqs}
    assert sum(eng.dp_metrics()["rank_requests"]) == len(ids)
    for r in state.requests:
        if r.outcome == Outcome.COMPLETED:
            assert r.generated == r.output_len
    if state.outcome == "completed":
        for rank in eng.ranks:
            assert rank.ctx.free_blocks == rank.ctx.pool_blocks


def test_a_rank_that_stops_leaves_the_others_running_whatever_the_engine():
    # found by the property above: rank 0 hits Megatron's KV assertion while rank 1 still has work.
    # The fast engine runs rank 1 ahead in one stretch; had the run ended at the assertion, rank 0's
    # progress would depend on the engine. A stopped rank steps no more and the others run on.
    from cgbench.config.schema import CGConfig

    cg = CGConfig(all_prefills=False, cuda_graph_max_tokens=16, non_decode=False, sizes_per_octave=1)
    cfg = make_cfg(policy="budget", cg=cg, max_requests=2, max_tokens=64, max_sequence_length=64, block_size=16,
                   kv_blocks=4, num_speculative_tokens=3)
    cfg = replace(cfg, engine=replace(cfg.engine, dp_size=2))
    reqs = [RequestSpec(0, 0.0, 1, 2), RequestSpec(1, 0.0, 1, 10), RequestSpec(2, 0.0, 57, 6)] + [
        RequestSpec(i, 0.0, 1, 1) for i in range(3, 7)]
    fast, fs = _run(cfg, reqs)
    slow, ss = _run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs)
    assert _everything(fast, fs) == _everything(slow, ss)
    assert fs.outcome == "engine_assertion" and fs.diagnosis.startswith("rank 0: ")
    assert fast.retired == [True, False] and fast.ranks[1].drained  # rank 1 served everything it got
