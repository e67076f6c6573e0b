"""``policy=cover`` (a gate that does not wait for nothing) and ``policy=megatron_6675`` (PR #6675,
73f34663, as its code reads): worked rounds, where each agrees with ``defer`` / ``megatron`` and where it
differs, and whole runs (the fast engine equals the oracle, the engine invariants hold).
docs/megatron-prs.md explains the cases."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.config.schema import ConfigError
from cgbench.engine.policy_registry import build_policy
from cgbench.engine.replay import replay_all
from cgbench.engine.scheduler import gating_active, gating_without_prefill_graphs
from cgbench.results.state_file import load_state, parse_state
from tests.engine.test_fast_engine import _everything, _run
from tests.engine.test_schedule_cmd import random_states
from tests.helpers import examples, scenarios

STATES = Path(__file__).resolve().parents[1] / "states"
COMPARED = ("budget", "megatron", "defer", "wait_timeout", "megatron_6675", "cover")


def decisions(doc: dict) -> dict:
    return {d.policy: d for d in replay_all(parse_state(doc), COMPARED)}


def hybrid_chunked(batch: dict, queue: list[dict], cg: dict | None = None, **engine) -> dict:
    return {"model": {"kind": "hybrid"}, "engine": {"chunked_prefill": True, **engine},
            "cg": cg or {"all_prefills": True}, "batch": batch, "queue": queue}


# -- cover -----------------------------------------------------------------------------------------------

def test_cover_admits_the_issues_request_that_defer_holds_back():
    """Issue 27's case: A=1190 with one prefill and 5 decodes, a new 406-token prompt. No graph T in
    [1191, 1596] serves P=2, D=5 (the default hybrid grid has none between 1024 and 2048), so defer and
    #6675 hold the request back; (2048, 2, 254) covers the unsnapped step (1596, 2, 5), so cover admits
    it and the step runs on that graph (padded by 452 tokens), as budget's and megatron's do."""
    by = decisions(hybrid_chunked({"active_tokens": 1190, "prefill": 1, "decode": 5},
                                  [{"id": 7, "prompt_tokens": 406}]))
    saved = {d.policy: d for d in replay_all(load_state(STATES / "cover_issue_round.json"), COMPARED)}
    assert {k: d.to_json() for k, d in saved.items()} == {k: d.to_json() for k, d in by.items()}
    for held in ("defer", "wait_timeout", "megatron_6675"):
        d = by[held]
        assert d.admitted == () and d.deferred == 7 and d.deferred_candidate == (1596, 2, 5)
        assert dict(d.cg_wait_iters)[7] == 1 and d.stop_reason == "deferred"
    cover = by["cover"]
    assert cover.admitted == ((7, 406, True),) and cover.deferred is None
    assert cover.batch_after == (1596, 2, 5) and cover.graph == (2048, 2, 254)
    assert dict(cover.cg_wait_iters)[7] == 0
    for same in ("budget", "megatron"):
        assert (by[same].admitted, by[same].graph) == (cover.admitted, cover.graph)


def test_cover_snaps_when_a_boundary_fits_as_defer_does():
    """5 decodes and a new 2000-token prompt: (1024, 1, 255) is the first graph in stored order whose
    boundary fits, so every gating policy snaps the chunk to 1024 - 5 = 1019 (not the padded 2005)."""
    by = decisions(hybrid_chunked({"decode": 5}, [{"id": 7, "prompt_tokens": 2000}]))
    for name in ("megatron", "defer", "megatron_6675", "cover"):
        d = by[name]
        assert d.admitted == ((7, 1019, False),) and d.graph == (1024, 1, 255), name
    assert by["budget"].admitted == ((7, 2000, True),)


def test_cover_defers_only_when_no_graph_covers_the_step():
    """Design §6.4's strict miss: 2 prefills and 253 decodes, a third prompt. (1753, 3, 253) needs
    P >= 3 and D >= 253, and the geometric P-grid jumps from (2, 254) to (4, 252): no boundary fits and
    no graph covers, so cover waits as defer does (megatron takes the unsnapped chunk, eager)."""
    by = decisions(hybrid_chunked({"active_tokens": 1253, "prefill": 2, "decode": 253},
                                  [{"id": 7, "prompt_tokens": 500}]))
    for name in ("defer", "megatron_6675", "cover"):
        assert by[name].admitted == () and by[name].deferred == 7, name
    assert by["megatron"].admitted == ((7, 500, True),)
    assert by["megatron"].graph is None and by["megatron"].eager_reason == "shape"


def test_cover_non_chunked_is_defer():
    """Non-chunked prefill already admits whenever a graph covers the candidate (padded): there cover,
    defer, megatron and #6675 decide alike (the reference test in test_schedule_cmd draws this)."""
    doc = {"model": {"kind": "hybrid"}, "engine": {"chunked_prefill": False}, "cg": {"all_prefills": True},
           "batch": {"decode": 253}, "queue": [{"id": i, "prompt_tokens": 500} for i in (1, 2, 3)]}
    by = decisions(doc)
    want = by["megatron"].to_json()
    for name in ("defer", "megatron_6675", "cover"):
        assert {**by[name].to_json(), "policy": "megatron"} == want, name
    assert by["cover"].admitted == ((1, 500, True), (2, 500, True)) and by["cover"].deferred == 3


# -- megatron_6675 against defer ---------------------------------------------------------------------------

PR_CASE_GRAPHS = [[116, 1, 31], [256, 1, 31], [256, 2, 30], [256, 4, 28]]


def _pr_case(batch: dict) -> dict:
    """The PR's own test (test_hybrid_continuation_resumes_after_active_prefills_complete): a
    continuation with an 85-token budget on a strict list with neighbouring P buckets."""
    return hybrid_chunked(batch, [{"id": 9, "prompt_tokens": 85, "finished": 100}],
                          cg={"all_prefills": True, "graphs": PR_CASE_GRAPHS}, max_requests=32, max_tokens=256)


def test_6675_and_defer_agree_on_the_prs_own_case():
    """3P + 29D: (256, 4, 28) cannot cover it (strict), so the continuation waits one round; once the
    two prefills decode (0P + 31D, A=31), (116, 1, 31) admits the 85 tokens. defer decides the same;
    0.19.2 megatron never gates a continuation, so it takes the 85 tokens at once, eager."""
    chunked = {"id": 9, "remaining": 85, "finished": 100}
    busy = decisions({**_pr_case({"active_tokens": 171, "prefill": 2, "decode": 29}), "chunked_request": chunked})
    for name in ("megatron_6675", "defer"):
        assert busy[name].admitted == () and dict(busy[name].cg_wait_iters)[9] == 1, name
    assert busy["megatron"].admitted == ((9, 85, True),) and busy["megatron"].graph is None
    later = decisions({**_pr_case({"decode": 31}), "chunked_request": chunked})
    for name in ("megatron_6675", "defer", "megatron"):
        assert later[name].admitted == ((9, 85, True),) and later[name].graph == (116, 1, 31), name


def test_6675_snaps_a_continuation_that_defer_leaves_whole():
    """Reference 11.1 step 2 (transformer): the hidden request has 36 tokens left. Its unsnapped step
    (36, 1, 0) is covered, so defer (and 0.19.2 megatron) admit all 36 and then the next request's
    snapped chunk; #6675 snaps the continuation like a new prefill, to the first boundary in stored
    order, 32, and the split ends the round."""
    state = load_state(STATES / "11_1_step2.json")
    by = {d.policy: d for d in replay_all(state, COMPARED)}
    for name in ("defer", "megatron", "cover"):
        assert by[name].admitted == ((0, 36, True), (1, 92, False)), name
    pr = by["megatron_6675"]
    assert pr.admitted == ((0, 32, False),) and pr.batch_after == (32, 1, 0) and pr.graph == (32, 1, 31)


def test_6675_holds_a_short_continuation_a_graph_covers():
    """The chat preset's pathology (docs/megatron-prs.md): 4 decodes, the chunked request has 2 tokens
    left. No graph T lies in [5, 6] (the sizes are powers of two), so #6675 holds the continuation,
    and the queue behind it, until a decode finishes; (8, 1, 7) covers the unsnapped (6, 1, 4), so
    defer, cover and 0.19.2 megatron admit it and go on to the next request."""
    chunked = {"id": 6, "remaining": 2, "finished": 44}
    doc = {"model": {"kind": "transformer"}, "engine": {"chunked_prefill": True}, "cg": {"all_prefills": True},
           "batch": {"decode": 4}, "chunked_request": chunked,
           "queue": [{"id": 6, "prompt_tokens": 2, "finished": 44}, {"id": 7, "prompt_tokens": 50}]}
    by = decisions(doc)
    pr = by["megatron_6675"]
    assert pr.admitted == () and pr.deferred == 6 and pr.deferred_candidate == (6, 1, 4)
    assert pr.graph == (4, 0, 4)  # the step runs the 4 decodes only
    for name in ("megatron", "defer", "cover"):
        assert by[name].admitted == ((6, 2, True), (7, 26, False)) and by[name].graph == (32, 2, 30), name


def test_6675_gates_a_decode_only_list_that_defer_does_not():
    """Megatron's three gating conditions only: on a decode-only list a chunk waits while decodes run
    and runs eager on an idle engine; defer (and cover) keep cgbench's fourth condition and admit on
    budgets."""
    graphs = {"all_prefills": True, "graphs": [[8, 0, 8], [4, 0, 4]]}
    busy = decisions(hybrid_chunked({"decode": 3}, [{"id": 7, "prompt_tokens": 20}], cg=graphs))
    assert busy["megatron_6675"].gating_active and busy["megatron_6675"].deferred == 7
    assert busy["megatron_6675"].admitted == () and busy["megatron_6675"].graph == (4, 0, 4)
    for name in ("defer", "cover"):
        assert not busy[name].gating_active and busy[name].admitted == ((7, 20, True),)
    idle = decisions(hybrid_chunked({"decode": 0}, [{"id": 7, "prompt_tokens": 20}], cg=graphs))
    assert idle["megatron_6675"].admitted == ((7, 20, True),)
    assert idle["megatron_6675"].eager_reason == "no_mixed_graphs"
    state = parse_state(hybrid_chunked({"decode": 3}, [], cg=graphs))
    pol = build_policy("megatron_6675", None)
    assert gating_active(pol, state.cg, state.grid)
    warning = gating_without_prefill_graphs(pol, state.cg, state.grid, chunked_prefill=True)
    assert warning is not None and "idle engine" in warning


# -- whole runs ----------------------------------------------------------------------------------------------

@pytest.mark.slow
@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(scenarios(), st.sampled_from(["megatron_6675", "cover"]))
def test_fast_engine_equals_oracle_under_the_new_policies(scenario, policy):
    cfg, reqs = scenario
    cfg = replace(cfg, policy=replace(cfg.policy, name=policy))
    fast = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=False)), reqs))
    slow = _everything(*_run(replace(cfg, engine=replace(cfg.engine, oracle=True)), reqs))
    assert fast == slow


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["defer", "cover", "megatron_6675"])
def test_chat_run_cover_never_defers_more_than_defer(policy):
    """A short chunked hybrid chat run: every deferral cover makes, defer makes too (cover only removes
    the waits a larger graph would have served), and under all three no mixed step runs eager."""
    from cgbench.config.compose import load_config
    from cgbench.pipeline import run_point

    def run(name):
        return run_point(load_config(["model=hybrid", "workload=chat", "engine=chunked", "workload.num_requests=300",
                                      f"policy={name}"]), trace=True)

    doc, base = run(policy), run("defer")
    m = doc["metrics"]
    assert m["outcome"] == "completed" and m["requests"]["completed"] == 300
    assert not [s for s in doc["steps"] if s["graph"] is None and s["real"][1] > 0 and s["real"][2] > 0]
    if policy == "cover":
        assert m["deferral_events"] <= base["metrics"]["deferral_events"]


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(random_states())
def test_6675_and_defer_agree_on_every_round_without_a_continuation(doc):
    """On random round states: without a chunked request in flight, and with a prefill or mixed graph in
    the list (cgbench's fourth condition holds), #6675 and defer make the same decision in every field
    (they differ only on continuations and decode-only lists, the worked cases above). cover never
    defers where defer admits, and its admissions begin with defer's: it decides as defer up to the
    round where defer waits for nothing."""
    try:
        state = parse_state(doc)
    except ConfigError:
        return
    by = {d.policy: d.to_json() for d in replay_all(state, ("defer", "megatron_6675", "cover"))}
    if state.chunked_request_id < 0 and state.grid.non_decode:
        assert {**by["megatron_6675"], "policy": "defer"} == by["defer"]
    if by["defer"]["deferred"] is None:
        assert by["cover"]["deferred"] is None
    assert by["cover"]["admitted"][:len(by["defer"]["admitted"])] == by["defer"]["admitted"]
