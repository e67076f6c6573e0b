"""``cgbench schedule``: state files -> one scheduling round per policy (cgbench.engine.replay).

Checked against the reference's worked rounds (semantics sections 11 and 9.2, state files under
tests/states/), a naive re-implementation of the reference pseudo-code (sections 1.1, 3, 6.3, 6.4)
on random states, and the rounds of full engine runs (snapshot -> replay -> same decisions).
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.cli import app as cli
from cgbench.cli.schedule import schedule_cmd
from cgbench.config.schema import POLICIES, CGConfig, ConfigError
from cgbench.engine.replay import replay_all, replay_round, state_from_engine
from cgbench.grids.shapes import BatchShape, match
from cgbench.pipeline import build_engine
from cgbench.results.state_file import load_state, parse_state
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import examples, make_cfg

STATES = Path(__file__).resolve().parents[1] / "states"


def state_doc(name: str) -> dict:
    return json.loads((STATES / name).read_text())


def decide(name: str, policy: str) -> dict:
    return replay_round(load_state(STATES / name), policy).to_json()


def after(d: dict) -> tuple[int, int, int]:
    b = d["batch_after"]
    return b["active_tokens"], b["prefill"], b["decode"]


def naive_graph(state, shape: tuple[int, int, int]):
    g = match(BatchShape(*shape), state.grid.graphs, state.grid.strict)
    return list(g) if g is not None else None


def cli_app() -> typer.Typer:
    """The real app once ``schedule`` is registered there, else a local app with the command."""
    if any(c.name == "schedule" for c in cli.app.registered_commands):
        return cli.app
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    app.command("schedule")(schedule_cmd)
    return app


def invoke(*args: str):
    return CliRunner().invoke(cli_app(), ["schedule", *args])


# -- 11.1: chunked prefill, transformer, list (B): the engine's trace, one round at a time --------------

# (state file, megatron's admissions (reference table 11.1), the step's real shape, its graph)
TRACE_11_1 = [
    ("11_1_step1.json", [[0, 64, False]], (64, 1, 0), [64, 1, 63]),
    ("11_1_step2.json", [[0, 36, True], [1, 92, False]], (128, 2, 0), [128, 2, 126]),
    ("11_1_step3.json", [[1, 8, True], [2, 55, False]], (64, 2, 1), [64, 2, 62]),
    ("11_1_step4.json", [[2, 45, True]], (47, 1, 2), [64, 1, 63]),
]


@pytest.mark.parametrize(("name", "admitted", "real", "graph"), TRACE_11_1)
def test_11_1_megatron_rounds(name, admitted, real, graph):
    d = decide(name, "megatron")
    assert d["admitted"] == admitted
    assert after(d) == real and d["graph"] == graph and d["eager_reason"] is None
    partial = [a for a in admitted if not a[2]]
    # a partial chunk ends the round with that request at the head, hidden as the chunked request
    assert d["chunked_request_id"] == (partial[0][0] if partial else -1)
    if partial:
        assert d["queue_after"][0] == partial[0][0]
    assert d["warnings"] == 0 and d["deferred"] is None


def test_11_1_budget_round_one_admits_all_three():
    d = decide("11_1_step1.json", "budget")
    # gating off: (300, 3, 0) -> (512, 4, 252), reference 11.1
    assert d["admitted"] == [[0, 100, True], [1, 100, True], [2, 100, True]]
    assert after(d) == (300, 3, 0) and d["graph"] == [512, 4, 252] and d["queue_after"] == []


@pytest.mark.parametrize("name", [t[0] for t in TRACE_11_1])
def test_11_1_budget_admits_everything_left(name):
    """Without gating every round admits whatever is left in full (no KV or token pressure here)."""
    state = load_state(STATES / name)
    d = replay_round(state, "budget").to_json()
    assert d["admitted"] == [[q.id, q.prompt_tokens, True] for q in state.queue]
    b = state.batch
    assert after(d) == (b.active_tokens + sum(q.prompt_tokens for q in state.queue), len(state.queue), b.decode)
    assert d["graph"] == naive_graph(state, after(d)) is not None


def test_11_1_chunked_request_omitted_from_the_queue_is_inserted_at_the_head():
    listed = state_doc("11_1_step3.json")
    listed["queue"].insert(0, {"id": 1, "prompt_tokens": 8, "finished": 92, "cg_wait_iters": 0})
    omitted = load_state(STATES / "11_1_step3.json")
    assert [q.id for q in omitted.queue] == [1, 2] and omitted.chunked_request_id == 1
    assert [d.to_json() for d in replay_all(omitted)] == [d.to_json() for d in replay_all(parse_state(listed))]


# -- 11.2 / 11.3: non-chunked, hybrid (strict), list (B) ---------------------------------------------------

def test_11_2_megatron_defers_the_third_request():
    d = decide("11_2_round1.json", "megatron")
    assert d["admitted"] == [[1, 500, True], [2, 500, True]]
    assert d["queue_after"] == [3] and d["cg_wait_iters"] == {"1": 0, "2": 0, "3": 1}
    assert d["deferred"] == 3 and d["deferred_candidate"] == [1753, 3, 253]
    assert after(d) == (1253, 2, 253) and d["graph"] == [2048, 2, 254]
    state = load_state(STATES / "11_2_round1.json")
    assert naive_graph(state, (1753, 3, 253)) is None  # strict: the P-grid jumps 2 -> 4


def test_11_2_budget_admits_all_three_and_runs_eager():
    d = decide("11_2_round1.json", "budget")
    assert d["admitted"] == [[1, 500, True], [2, 500, True], [3, 500, True]] and d["queue_after"] == []
    assert after(d) == (1753, 3, 253) and d["graph"] is None and d["eager_reason"] == "shape"


def test_11_2_next_round_admits_the_deferred_request():
    for policy in ("megatron", "budget"):
        d = decide("11_2_round2.json", policy)
        assert d["admitted"] == [[3, 500, True]] and after(d) == (755, 1, 255) and d["graph"] == [1024, 1, 255]
    # a hit resets the wait under gating; budget never touches it
    assert decide("11_2_round2.json", "megatron")["cg_wait_iters"] == {"3": 0}
    assert decide("11_2_round2.json", "budget")["cg_wait_iters"] == {"3": 1}


def test_11_2_non_strict_admits_all_three_at_once():
    doc = state_doc("11_2_round1.json")
    doc["model"]["kind"] = "transformer"
    d = replay_round(parse_state(doc), "megatron").to_json()
    assert len(d["admitted"]) == 3 and after(d) == (1753, 3, 253) and d["graph"] == [2048, 4, 252]


def test_11_3_msl_validity_starvation():
    d = decide("11_3_starvation.json", "megatron")
    assert d["admitted"] == [] and d["queue_after"] == [7] and d["cg_wait_iters"] == {"7": 1}
    assert d["deferred_candidate"] == [2255, 1, 255]
    assert after(d) == (255, 0, 255) and d["graph"] == [256, 0, 256]  # a decode-only step
    b = decide("11_3_starvation.json", "budget")
    assert b["admitted"] == [[7, 2000, True]] and b["graph"] is None and b["eager_reason"] == "shape"
    doc = state_doc("11_3_starvation.json")
    doc["batch"] = {"active_tokens": 254, "prefill": 0, "decode": 254, "paused": 0}  # one decode finished
    d = replay_round(parse_state(doc), "megatron").to_json()
    assert d["admitted"] == [[7, 2000, True]] and d["graph"] == [4096, 2, 254]
    doc = state_doc("11_3_starvation.json")
    doc["queue"][0]["prompt_tokens"] = 1500
    d = replay_round(parse_state(doc), "megatron").to_json()
    assert d["admitted"] == [[7, 1500, True]] and d["graph"] == [2048, 1, 255]


def test_11_3_starvation_warning_fires_at_each_multiple_of_the_threshold():
    threshold = max(100, 2560)  # max(100, max_sequence_length)
    for before, warned in ((threshold - 2, 0), (threshold - 1, 1), (threshold, 0), (2 * threshold - 1, 1)):
        doc = state_doc("11_3_starvation.json")
        doc["queue"][0]["cg_wait_iters"] = before
        state = parse_state(doc)
        for policy in ("megatron", "defer"):
            d = replay_round(state, policy).to_json()
            assert d["cg_wait_iters"] == {"7": before + 1} and d["warnings"] == warned
        assert replay_round(state, "budget").to_json()["warnings"] == 0


def test_docs_starvation_warning_example():
    """docs/schedule.md walk-through 2: the round that logged the warning, and the way out."""
    state = load_state(STATES / "starvation_warning.json")
    by = {d.policy: d.to_json() for d in replay_all(state)}
    for policy in ("megatron", "defer"):
        assert by[policy]["warnings"] == 1 and by[policy]["cg_wait_iters"] == {"7": 2560}
        assert by[policy]["deferred_candidate"] == [2255, 1, 255]
    for policy in ("budget", "pad_guard", "wait_timeout"):  # wait_timeout: 2559 >= its 50-step timeout
        assert by[policy]["admitted"] == [[7, 2000, True]] and by[policy]["eager_reason"] == "shape"
    assert by["wait_timeout"]["cg_wait_iters"] == {"7": 0}
    doc = state_doc("starvation_warning.json")
    doc["batch"] = {"decode": 254, "active_tokens": 254}
    d = replay_round(parse_state(doc), "megatron").to_json()
    assert d["admitted"] == [[7, 2000, True]] and d["graph"] == [4096, 2, 254]


# -- 11.4: flash-attn guard with snapping ------------------------------------------------------------

def test_11_4_guard_after_snapping():
    d = decide("11_4_guard.json", "megatron")
    assert d["admitted"] == [[0, 63, False]] and after(d) == (63, 1, 0) and d["graph"] == [64, 1, 63]
    assert d["chunked_request_id"] == 0 and d["stop_reason"] == "partial_chunk"
    doc = state_doc("11_4_guard.json")  # the next round: the remaining 2 tokens, continuing
    doc["chunked_request"] = {"id": 0, "remaining": 2, "finished": 63}
    doc["queue"] = []
    d = replay_round(parse_state(doc), "megatron").to_json()
    assert d["admitted"] == [[0, 2, True]] and d["chunked_request_id"] == -1
    b = decide("11_4_guard.json", "budget")  # unsnapped the whole prompt fits: no guard needed
    assert b["admitted"] == [[0, 65, True]] and b["graph"] == naive_graph(load_state(STATES / "11_4_guard.json"),
                                                                            (65, 1, 0))


# -- 9.2: Megatron's engine scenarios ----------------------------------------------------------------

@pytest.mark.parametrize("policy", ["megatron", "budget"])
def test_9_2_chunked_prefill_skips_request_when_token_budget_exhausted(policy):
    d = decide("9_2_token_budget_exhausted.json", policy)
    assert d["admitted"] == [[1, 16, True]] and d["queue_after"] == [2]
    assert after(d) == (16, 1, 0) and d["chunked_request_id"] == -1 and d["stop_reason"] == "max_tokens"


@pytest.mark.parametrize("policy", ["megatron", "budget"])
def test_9_2_chunked_prefill_avoid_single_token_chunk(policy):
    assert decide("9_2_avoid_single_token_chunk_round1.json", policy)["admitted"] == [[0, 256, False]]
    d = decide("9_2_avoid_single_token_chunk_round2.json", policy)
    assert d["admitted"] == [[0, 255, False]]  # 256 would leave a single token
    doc = state_doc("9_2_avoid_single_token_chunk_round2.json")
    doc["chunked_request"] = {"id": 0, "remaining": 2, "finished": 511}
    doc["engine"]["free_blocks"] = 2
    assert replay_round(parse_state(doc), policy).to_json()["admitted"] == [[0, 2, True]]


@pytest.mark.parametrize("policy", ["megatron", "budget"])
def test_9_2_delay_scheduling_for_unavoidable_single_token_chunk(policy):
    d = decide("9_2_delay_single_token_chunk.json", policy)
    assert d["admitted"] == [[0, 255, True]] and d["queue_after"] == [1]
    assert d["stop_reason"] == "single_token_guard"
    doc = state_doc("9_2_delay_single_token_chunk.json")  # next round: A decodes, B fits
    doc["batch"] = {"decode": 1}
    doc["queue"] = doc["queue"][1:]
    assert replay_round(parse_state(doc), policy).to_json()["admitted"] == [[1, 2, True]]


@pytest.mark.parametrize("policy", ["megatron", "budget"])
def test_9_2_token_overflow_transient(policy):
    d = decide("9_2_token_overflow_transient.json", policy)
    assert d["admitted"] == [[0, 512, True]] and d["queue_after"] == [1] and d["stop_reason"] == "max_tokens"


# -- the other policies ------------------------------------------------------------------------------

def test_chunked_snap_miss_megatron_falls_back_eager_defer_waits():
    name = "linear_hybrid_chunked_miss.json"
    state = load_state(STATES / name)
    assert all(g.decode_req_count <= 240 for g in state.grid.graphs if g.prefill_req_count > 0)
    m = decide(name, "megatron")
    assert m["admitted"] == [[1, 600, True], [2, 100, True]] and m["graph"] is None
    assert m["eager_reason"] == "shape" and m["cg_wait_iters"] == {"1": 0, "2": 0}
    d = decide(name, "defer")
    assert d["admitted"] == [] and d["deferred"] == 1 and d["cg_wait_iters"] == {"1": 1, "2": 0}
    assert after(d) == (250, 0, 250) and d["graph"] == naive_graph(state, (250, 0, 250)) is not None
    assert decide(name, "wait_timeout")["admitted"] == []  # waits 0 < iters 3
    doc = state_doc(name)
    doc["queue"][0]["cg_wait_iters"] = 3  # the timeout: admit r1 eager; r2 then starts its own wait
    w = replay_round(parse_state(doc), "wait_timeout").to_json()
    assert w["admitted"] == [[1, 600, True]] and w["deferred"] == 2
    assert w["cg_wait_iters"] == {"1": 0, "2": 1} and w["graph"] is None and w["eager_reason"] == "shape"


def test_defer_and_wait_timeout_steps_replay_a_graph():
    """Gating that defers instead of falling back: every 11.1 round still admits work, and its step
    (prefills included) replays a graph."""
    for name, *_ in TRACE_11_1:
        state = load_state(STATES / name)
        for policy in ("defer", "wait_timeout"):
            d = replay_round(state, policy).to_json()
            assert d["admitted"] and d["graph"] == naive_graph(state, after(d)) is not None


def test_pad_guard_runs_a_heavily_padded_graph_eager():
    name = "pad_guard_ratio.json"
    b = decide(name, "budget")
    assert b["graph"] == [256, 1, 255] and after(b) == (129, 1, 0)
    p = decide(name, "pad_guard")
    assert p["admitted"] == b["admitted"] and p["graph"] is None and p["eager_reason"] == "pad_guard"
    doc = state_doc(name)
    doc["policy"]["pad_guard"]["max_ratio"] = 2.0  # 256 <= 2.0 * 129: the graph is fine
    assert replay_round(parse_state(doc), "pad_guard").to_json()["graph"] == [256, 1, 255]


def test_paused_requests_block_admission_but_not_the_continuing_chunk():
    doc = state_doc("11_1_step2.json")
    doc["batch"] = {"active_tokens": 3, "prefill": 0, "decode": 3, "paused": 2}
    for d in replay_all(parse_state(doc)):
        j = d.to_json()
        assert j["admitted"] and all(a[0] == 0 for a in j["admitted"])  # only the chunked request
        if j["policy"] in ("megatron", "budget"):
            assert j["admitted"] == [[0, 36, True]] and j["stop_reason"] == "paused_requests"


def test_kv_shortage_stops_at_the_head():
    doc = state_doc("11_2_round1.json")
    doc["engine"]["free_blocks"] = 3  # each 500-token prompt needs 2 blocks of 256
    for d in replay_all(parse_state(doc)):
        j = d.to_json()
        assert [a[0] for a in j["admitted"]] == [1] and j["stop_reason"] == "kv_blocks"


# -- invariants of every fixture under every policy -----------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in STATES.glob("*.json")))
def test_fixture_invariants(name):
    state = load_state(STATES / name)
    first = [d.to_json() for d in replay_all(state)]
    # the same starting state every time, in any order
    assert [d.to_json() for d in replay_all(state, POLICIES[::-1])] == first[::-1]
    for d in first:
        a = d["admitted"]
        T, P, D = after(d)
        b = state.batch
        assert T == b.active_tokens + sum(c for _, c, _ in a) and P == b.prefill + len(a) and D == b.decode
        assert [i for i, _, _ in a] == [q.id for q in state.queue][:len(a)]  # FIFO, head first
        assert all(final for _, _, final in a[:-1])  # only the last admission may be partial
        done = [i for i, _, final in a if final]
        assert d["queue_after"] == [q.id for q in state.queue if q.id not in done]
        assert set(d["cg_wait_iters"]) == {str(q.id) for q in state.queue}
        assert T <= state.engine.max_tokens
        if d["graph"] is not None:
            assert d["graph"] == naive_graph(state, (T, P, D))
        elif T > 0 and d["eager_reason"] != "pad_guard":
            assert naive_graph(state, (T, P, D)) is None


# -- independent oracle: the reference's pseudo-code on random states ------------------------------------

def ref_applicable(g, r, strict):
    if r[1] == 0:
        return g[1] == 0 and g[0] >= r[0] and g[2] >= r[2]
    if strict:
        return g[0] >= r[0] and g[1] >= r[1] and g[2] >= r[2]
    return g[0] >= r[0] and g[1] >= r[1] and g[1] + g[2] >= r[1] + r[2]


def ref_match(graphs, r, strict):
    cands = [tuple(g) for g in graphs if ref_applicable(g, r, strict)]
    return list(min(cands)) if cands else None


def ref_round(doc: dict, graphs: list, gating: bool, rule: str = "megatron") -> dict:
    """Reference 6.3 / 6.4 (after #4870; gating off = before) from the state document, by hand.

    ``rule`` is the chunked path's: ``megatron`` (0.19.2: only a new request is snapped, a miss takes
    the unsnapped chunk), ``6675`` (PR #6675's ``_select_cg_chunk_size`` for every chunk, the
    continuation included: snap, else wait while P or D is non-zero, else the unsnapped chunk) or
    ``cover`` (cgbench's: a continuation its unsnapped step's graph covers is left alone; otherwise
    snap, else admit unsnapped when a graph covers that step, else wait unless idle)."""
    e, b = doc["engine"], doc["batch"]
    strict = doc["model"]["kind"] == "hybrid"
    R, M, bs, msl = e["max_requests"], e["max_tokens"], e["block_size"], e["max_sequence_length"]
    A, P, D, paused = b["active_tokens"], b["prefill"], b["decode"], b["paused"]
    free, cid = e["free_blocks"], (doc["chunked_request"] or {"id": -1})["id"]
    queue = [dict(q) for q in doc["queue"]]
    waits = {q["id"]: q["cg_wait_iters"] for q in queue}
    admitted, warnings = [], 0

    def blocks(fin, n):
        return math.ceil((fin + n) / bs) - math.ceil(fin / bs)

    while queue:
        q = queue[0]
        rem, fin = q["prompt_tokens"], q["finished"]
        request_ok = P + D + paused < R and paused == 0
        kv_ok = free >= blocks(fin, rem)
        if not e["chunked_prefill"]:
            if not (request_ok and A + rem <= M and kv_ok):
                break
            if gating:
                if ref_match(graphs, (A + rem, P + 1, D), strict) is None:
                    waits[q["id"]] += 1
                    warnings += waits[q["id"]] % max(100, msl) == 0
                    break
                waits[q["id"]] = 0
            chunk = rem
        else:
            continuing = cid >= 0
            if not ((request_ok or continuing) and kv_ok and A < M):
                break
            chunk = min(rem, M - A)
            covered = ref_match(graphs, (A + chunk, P + 1, D), strict) is not None
            guarded = gating and (not continuing if rule == "megatron" else
                                  rule == "6675" or not (continuing and covered))
            if guarded:
                snapped = next((g[0] - A for g in graphs if 1 <= g[0] - A <= chunk
                                and ref_applicable(g, (g[0], P + 1, D), strict)), None)
                if snapped is None and rule != "megatron" and not (rule == "cover" and covered) and (P or D):
                    waits[q["id"]] += 1
                    warnings += waits[q["id"]] % max(100, msl) == 0
                    break
                chunk = snapped if snapped is not None else chunk
                waits[q["id"]] = 0
            if rem - chunk == 1:
                if chunk == 1:
                    break
                chunk -= 1
        free -= blocks(fin, chunk)
        A, P = A + chunk, P + 1
        admitted.append([q["id"], chunk, chunk == rem])
        if chunk < rem:
            cid = q["id"]
            break
        cid = -1
        queue.pop(0)
    return {"admitted": admitted, "queue_after": [q["id"] for q in queue],
            "cg_wait_iters": {str(k): v for k, v in waits.items()}, "batch_after": {
                "active_tokens": A, "prefill": P, "decode": D}, "chunked_request_id": cid, "warnings": warnings,
            "graph": ref_match(graphs, (A, P, D), strict) if A > 0 else None}


@st.composite
def random_states(draw):
    R = draw(st.sampled_from([2, 4, 8, 16]))
    spec = draw(st.sampled_from([0, 0, 1]))
    M = draw(st.sampled_from([R * (spec + 1), 64, 128, 512]))
    M = max(M, R * (spec + 1))
    msl = draw(st.sampled_from([32, 100, 300]))
    bs = draw(st.sampled_from([16, 64]))
    chunked = draw(st.booleans())
    kind = draw(st.sampled_from(["transformer", "hybrid"]))
    engine = {"max_requests": R, "max_tokens": M, "max_sequence_length": msl, "block_size": bs,
              "num_speculative_tokens": spec, "chunked_prefill": chunked}
    if draw(st.booleans()):
        cg = {"num_cuda_graphs": draw(st.sampled_from([None, 1, 4, 16, -1])), "all_prefills": draw(st.booleans()),
              "non_decode": draw(st.booleans()),
              "distribution": draw(st.sampled_from(["exponential", "linear", "hybrid"]))}
    else:  # a random explicit list: any valid shapes, any stored order
        q = spec + 1
        shapes = []
        for _ in range(draw(st.integers(0, 12))):
            p = draw(st.integers(0, R))
            d = draw(st.integers(0, R - p))
            lo, hi = p + d * q, min(M, p * msl + d * q)
            if 1 <= max(lo, 1) <= hi:
                shapes.append([draw(st.integers(max(lo, 1), hi)), p, d])
        cg = {"graphs": shapes, "all_prefills": draw(st.booleans())}
    D = draw(st.integers(0, R))
    paused = draw(st.sampled_from([0, 0, 0, R - D]))
    P = draw(st.sampled_from([0, 0, 0, 1, 2])) if D + paused < R else 0
    P = min(P, R - D - paused, M - D * (spec + 1))
    A = D * (spec + 1) + (draw(st.integers(P, max(P, M - D * (spec + 1)))) if P else 0)
    pool = R * -(-msl // bs)
    engine["free_blocks"] = draw(st.sampled_from([pool, pool // 2, 1, 0]))
    warn = max(100, msl)
    queue, chunked_req = [], None
    limit = msl if chunked else min(msl, M)
    if chunked and draw(st.booleans()) and msl >= 2:
        fin = draw(st.integers(1, msl - 1))
        chunked_req = {"id": 0, "remaining": draw(st.integers(1, msl - fin)), "finished": fin}
        queue.append({"id": 0, "prompt_tokens": chunked_req["remaining"], "finished": fin, "cg_wait_iters": 0})
    for i in range(len(queue), len(queue) + draw(st.integers(0, 5))):
        queue.append({"id": i, "prompt_tokens": draw(st.integers(1, limit)), "finished": 0,
                      "cg_wait_iters": draw(st.sampled_from([0, 1, warn - 1, 2 * warn - 1]))})
    return {"model": {"kind": kind}, "engine": engine, "cg": cg,
            "batch": {"active_tokens": A, "prefill": P, "decode": D, "paused": paused},
            "chunked_request": chunked_req, "queue": queue}


@settings(max_examples=examples(300, stretch=False), suppress_health_check=[HealthCheck.too_slow])
@given(random_states())
def test_megatron_budget_6675_and_cover_match_the_reference_pseudo_code(doc):
    try:
        state = parse_state(copy.deepcopy(doc))
    except ConfigError as e:  # some random limits are invalid (e.g. a graph cap below max_requests)
        assert str(e).startswith("state: ")
        return
    graphs = [list(g) for g in state.grid.graphs]
    # Megatron's three conditions (no check that the list holds a prefill or mixed graph)
    gating = doc["cg"].get("all_prefills", True) and doc["cg"].get("non_decode", True) and len(graphs) > 0
    # the cgbench-only cover keeps the fourth condition: a prefill or mixed graph in the list
    covers = gating and any(g[1] > 0 for g in graphs)
    for policy, gates, rule in (("megatron", gating, "megatron"), ("budget", False, "megatron"),
                                ("megatron_6675", gating, "6675"), ("cover", covers, "cover")):
        got = replay_round(state, policy).to_json()
        want = ref_round(doc, graphs, gates, rule)
        assert {k: got[k] for k in want} == want, policy


# -- a round inside a full engine run == the same round replayed from its snapshot --------------------------

@st.composite
def engine_runs(draw):
    max_requests = draw(st.sampled_from([2, 4, 8]))
    max_tokens = draw(st.sampled_from([max_requests, 64, 256]))
    msl = draw(st.sampled_from([64, 128]))
    block = draw(st.sampled_from([16, 32]))
    per_req = -(-msl // block)
    kv = draw(st.sampled_from([0, per_req + 1, per_req * 2]))
    cg = CGConfig(num_cuda_graphs=draw(st.sampled_from([None, 2, 16, -1])), all_prefills=draw(st.booleans()),
                  distribution=draw(st.sampled_from(["exponential", "linear", "hybrid"])),
                  non_decode=draw(st.sampled_from([True, True, False])),
                  kind=draw(st.sampled_from(["megatron", "megatron", "vllm"])))
    cfg = make_cfg(kind=draw(st.sampled_from(["transformer", "hybrid"])), policy=draw(st.sampled_from(POLICIES)),
                   chunked=draw(st.booleans()), cg=cg, max_requests=max_requests, max_tokens=max_tokens,
                   max_sequence_length=msl, block_size=block, kv_blocks=kv,
                   paused_blocks=draw(st.sampled_from([0, 0, 2])), stall_steps=120)
    cfg.policy.wait_timeout.iters = draw(st.sampled_from([1, 3]))
    cfg.policy.pad_guard.max_ratio = draw(st.sampled_from([1.2, 2.0]))
    reqs, t = [], 0.0
    for i in range(draw(st.integers(1, 12))):
        t += draw(st.sampled_from([0.0, 0.0, 0.002]))
        reqs.append(RequestSpec(i, t, draw(st.integers(1, msl)), draw(st.integers(1, 30))))
    return cfg, reqs, draw(st.randoms(use_true_random=False))


def run_and_snapshot(cfg, reqs):
    """Run the engine; for every round, its state file and the engine's own decisions."""
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs))
    rounds = []

    class Snapshots:
        def before(self, queue):
            self.snap = json.loads(json.dumps(state_from_engine(eng, cfg)))
            self.queue, self.before_ids = queue, list(queue)
            self.warned = eng.scheduler.counters.starvation_warnings
            self.step = len(eng.state.trace)

        def after(self, result):
            ctx = eng.ctx
            rounds.append((self.snap, {
                "admitted": [[a.request.id, a.chunk, a.final] for a in ctx.admitted],
                "queue_after": [r.id for r in self.queue],
                "cg_wait_iters": {str(r.id): r.cg_wait_iters for r in self.before_ids},
                "batch_after": {"active_tokens": ctx.active_tokens, "prefill": ctx.prefill_count,
                                "decode": ctx.decode_count},
                "chunked_request_id": ctx.chunked_request_id,
                "warnings": eng.scheduler.counters.starvation_warnings - self.warned,
                "deferred": result.deferred.id if result.deferred is not None else None,
                "stop_reason": result.stop_reason,
                "gating_active": eng.scheduler.gating_active,
            }, self.step if ctx.active_tokens > 0 else None))

    eng.round_observer = Snapshots()
    state = eng.run()
    for _, want, step in rounds:  # the graph the engine's step actually replayed
        rec = state.trace[step] if step is not None else None
        want["step_runs"] = rec is not None
        want["graph"] = list(rec.graph) if rec is not None and rec.graph is not None else None
        want["eager_reason"] = rec.eager_reason if rec is not None else None
        if rec is not None:
            assert list(rec.real) == list(want["batch_after"].values())
    return rounds


@pytest.mark.slow  # random engine runs, each replayed round by round
@settings(max_examples=examples(60, stretch=False), suppress_health_check=[HealthCheck.too_slow])
@given(engine_runs())
def test_replayed_round_equals_the_engine_round(run):
    cfg, reqs, rnd = run
    rounds = run_and_snapshot(cfg, reqs)
    assert rounds
    for snap, want, _ in rounds:  # every round of the run
        got = replay_round(parse_state(snap, "engine"), cfg.policy.name).to_json()
        assert {k: got[k] for k in want} == want
    snap, want, _ = rnd.choice(rounds)  # and a random one through the command line
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.json"
        path.write_text(json.dumps(snap))
        res = invoke(str(path), "--policy", cfg.policy.name, "--format", "json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert {k: got[k] for k in want} == want


def test_snapshot_round_trips_the_reference_trace():
    """11.1 run in the engine: each round's snapshot is the hand-written state file of that step."""
    cfg = make_cfg(kind="transformer", policy="megatron", chunked=True)
    rounds = run_and_snapshot(cfg, [RequestSpec(i, 0.0, 100, 4) for i in range(3)])
    for (snap, want, _), (name, admitted, _, _) in zip(rounds, TRACE_11_1, strict=False):
        assert want["admitted"] == admitted
        mine, theirs = parse_state(snap), load_state(STATES / name)
        assert mine.batch == theirs.batch and mine.queue == theirs.queue
        assert mine.chunked_request_id == theirs.chunked_request_id
        assert mine.grid.graphs == theirs.grid.graphs  # the explicit list is Megatron's list, in order


# -- the command line -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_json_one_policy():
    res = invoke(str(STATES / "11_2_round1.json"), "--policy", "megatron", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == decide("11_2_round1.json", "megatron")


def test_cli_json_all_policies_is_a_list():
    res = invoke(str(STATES / "11_1_step2.json"), "--format", "json", "--policy", "all")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert [d["policy"] for d in got] == list(POLICIES)
    assert got == [decide("11_1_step2.json", p) for p in POLICIES]


def test_cli_table_shows_every_policy_side_by_side():
    res = invoke(str(STATES / "11_2_round1.json"))
    assert res.exit_code == 0, res.output
    for policy in POLICIES:
        assert policy in res.stdout
    assert "(2048, 2, 254)" in res.stdout and "eager (shape)" in res.stdout  # megatron / budget
    assert "(1753, 3, 253)" in res.stdout and "r3, wait 1" in res.stdout
    one = invoke(str(STATES / "11_2_round1.json"), "--policy", "budget")
    assert one.exit_code == 0 and "budget" in one.stdout
    assert not any(p in one.stdout for p in ("(gating)", "pad_guard", "wait_timeout"))


@pytest.mark.parametrize(("args", "needle"), [
    (["--policy", "fastest"], "--policy"),
    (["--format", "yaml"], "--format"),
])
def test_cli_bad_options_exit_2(args, needle):
    res = invoke(str(STATES / "11_2_round1.json"), *args)
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_cli_bad_files_exit_2(tmp_path):
    bad = tmp_path / "state.json"
    bad.write_text('{"model": {"kind": "hybrid"},\n "engine": {}, "batch": {"decode": -1}, "queue": []}')
    res = invoke(str(bad))
    assert res.exit_code == 2 and f"{bad}: batch.decode: must be >= 0" in res.output.replace("\n", "")
    bad.write_text('{"model": {"kind": "hybrid"},\n "engine": {,}}')
    res = invoke(str(bad))
    assert res.exit_code == 2 and "line 2 column" in res.output and "not valid JSON" in res.output
    res = invoke(str(tmp_path / "missing.json"))
    assert res.exit_code == 2 and "no such file" in res.output


# -- validation ---------------------------------------------------------------------------------------------

def _set(path: str, value):
    def edit(doc):
        keys = path.split(".")
        node = doc
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return edit


_DELETE = object()


def _chunk_first(doc):
    doc["chunked_request"] = {"id": 1, "remaining": 8, "finished": 92}


# (base state, edit, the message names this field)
BAD = [
    ("11_2_round1.json", _set("batch", _DELETE), "batch: missing"),
    ("11_2_round1.json", _set("model.kind", _DELETE), "model.kind: missing"),
    ("11_2_round1.json", _set("model.kind", "mamba"), "model.kind"),
    ("11_2_round1.json", _set("batch.decode", -1), "batch.decode: must be >= 0"),
    ("11_2_round1.json", _set("batch.decode", "253"), "batch.decode: must be an integer"),
    ("11_2_round1.json", _set("batch.paused", True), "batch.paused: must be an integer"),
    ("11_2_round1.json", _set("batch.decodes", 3), "batch.decodes: unknown key (did you mean 'decode'?)"),
    ("11_2_round1.json", _set("engine.max_tokens", "16384"), "engine.max_tokens: must be an integer"),
    ("11_2_round1.json", _set("engine.max_tokens", 100), "engine.max_tokens"),
    ("11_2_round1.json", _set("engine.chunked_prefill", 0), "engine.chunked_prefill: must be true or false"),
    ("11_2_round1.json", _set("engine.free_blocks", 10**6), "engine.free_blocks"),
    ("11_2_round1.json", _set("cg.num_cuda_graphs", "16"), "cg.num_cuda_graphs"),
    ("11_2_round1.json", _set("cg.graphs", [[64, 1, 63], [100, 0, 200]]), "cg.graphs[1]"),
    ("11_2_round1.json", _set("cg.graphs", [[64, 1]]), "cg.graphs[0]"),
    ("11_2_round1.json", _set("cg.kind", "explicit2"), "cg.kind"),
    ("11_3_starvation.json", _set("cg", {"kind": "megatron", "graphs": [[64, 1, 63]]}), "cg.graphs"),
    ("11_2_round1.json", _set("policy", {"name": "budget"}), "policy.name"),
    ("11_2_round1.json", _set("policy", {"pad_guard": {"max_ratio": 0.5}}), "policy.pad_guard.max_ratio"),
    ("11_2_round1.json", _set("batch", {"active_tokens": 253, "decode": 253, "paused": 4}), "batch: prefill"),
    ("11_2_round1.json", _set("batch", {"active_tokens": 250, "decode": 253}), "batch.active_tokens"),
    ("11_2_round1.json", _set("batch", {"active_tokens": 252, "prefill": 1, "decode": 252}), "batch.active_tokens"),
    ("11_2_round1.json", _set("batch", {"active_tokens": 16385, "prefill": 1, "decode": 2}), "batch.active_tokens"),
    ("11_2_round1.json", _set("batch", {"prefill": 2, "decode": 2}), "batch.active_tokens: missing"),
    ("11_2_round1.json", _set("queue", {"id": 1}), "queue: must be a list"),
    ("11_2_round1.json", _set("queue.1.id", 1), "queue[1].id: duplicate request id 1"),
    ("11_2_round1.json", _set("queue.0.id", -2), "queue[0].id: must be >= 0"),
    ("11_2_round1.json", _set("queue.0.prompt_tokens", 0), "queue[0].prompt_tokens: must be >= 1"),
    ("11_2_round1.json", _set("queue.0.prompt_tokens", _DELETE), "queue[0].prompt_tokens: missing"),
    ("11_2_round1.json", _set("queue.2.prompt_tokens", 3000), "queue[2].prompt_tokens"),
    ("11_2_round1.json", _set("queue.1.finished", 10), "queue[1].finished: must be 0"),
    ("11_2_round1.json", _set("queue.0.cg_wait_iters", -1), "queue[0].cg_wait_iters: must be >= 0"),
    ("11_2_round1.json", _set("queue.0.wait", 1), "queue[0].wait: unknown key"),
    ("11_2_round1.json", _set("chunked_request", {"id": 1, "remaining": 500, "finished": 10}), "chunked_request"),
    ("11_1_step3.json", _set("chunked_request.id", 2), "queue[0].prompt_tokens: 100 disagrees"),
    ("11_1_step2.json", _set("chunked_request.id", 2), "chunked_request.id: request 2 is queue[2]"),
    ("11_1_step2.json", _set("queue.0.prompt_tokens", 35), "queue[0].prompt_tokens: 35 disagrees"),
    ("11_1_step2.json", _set("chunked_request.finished", 0), "chunked_request.finished: must be >= 1"),
    ("11_1_step2.json", _set("chunked_request.remaining", _DELETE), "chunked_request.remaining: missing"),
    ("11_1_step2.json", _set("description", 5), "description: must be a string"),
    ("11_1_step2.json", _set("expected", {}), "expected: unknown key"),
]


@pytest.mark.parametrize(("base", "edit", "field"), BAD, ids=[b[2] for b in BAD])
def test_bad_states_name_the_field(base, edit, field):
    doc = state_doc(base)
    edit(doc)
    with pytest.raises(ConfigError) as info:
        parse_state(doc, "state.json")
    assert str(info.value).startswith(f"state.json: {field}"), str(info.value)


def test_non_object_state():
    with pytest.raises(ConfigError, match=r"^s\.json: the state must be a JSON object"):
        parse_state([1, 2], "s.json")


def test_defaults_fill_a_minimal_state():
    doc = {"model": {"kind": "transformer"}, "engine": {}, "batch": {"decode": 3},
           "queue": [{"id": 5, "prompt_tokens": 10}]}
    state = parse_state(doc)
    assert state.batch.active_tokens == 3 and state.batch.prefill == state.batch.paused == 0
    assert state.free_blocks == state.engine.resolved_kv_blocks() and state.chunked_request_id == -1
    assert len(state.grid.graphs) == 101  # conf/cg/megatron at the default engine (reference 2.6 B)
    assert state.queue[0].finished == 0 and state.queue[0].cg_wait_iters == 0


def test_an_evicted_prompt_over_max_tokens_replays_as_a_blocked_head(tmp_path):
    """Megatron re-queues an evicted request with its generated tokens; without chunked prefill a
    prompt that grew past max_tokens is a legal state that blocks the queue (it is never admitted)."""
    state = json.loads((STATES / "11_2_round1.json").read_text())
    state["engine"]["max_tokens"] = 1024
    state["queue"] = [{"id": 7, "prompt_tokens": 1100}]
    path = tmp_path / "blocked.json"
    path.write_text(json.dumps(state))
    res = invoke(str(path), "--policy", "megatron", "--format", "json")
    assert res.exit_code == 0, res.output
    decision = json.loads(res.stdout)
    assert decision["admitted"] == [] and decision["stop_reason"] == "max_tokens", decision
