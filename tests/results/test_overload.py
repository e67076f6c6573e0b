"""The offered load (the ``load`` block) and the ``overload`` flag: a worked example, an independent
oracle over real runs, each rule at its threshold, a synthetic overload (Poisson at five times the
engine's capacity) against a control at half of it, and both shipped traces (healthy windows, and the
overloads the issue reported: Nemotron-H 56B on Mooncake, Azure replayed five times faster)."""

from __future__ import annotations

import math

import pytest

from cgbench.config.compose import load_config
from cgbench.engine.ledger import Ledger
from cgbench.engine.request import Outcome, Request
from cgbench.pipeline import build_engine, run_point
from cgbench.results import health
from cgbench.results.load_metrics import BACKLOG_TAIL, load_metrics


def _request(rid, arrival, admit, finish, *, output=10, generated=None, outcome=Outcome.COMPLETED):
    admitted = admit is not None
    return Request(id=rid, prompt_len=100, output_len=output, arrival_s=arrival, arrival_step=rid,
                   generated=output if generated is None else generated, first_admit_step=rid if admitted else -1,
                   first_admit_s=admit if admitted else -1.0, finish_step=rid + 5 if finish is not None else -1,
                   finish_s=finish if finish is not None else -1.0, outcome=outcome,
                   fail_reason="prompt_exceeds_max_sequence_length" if outcome == Outcome.FAILED else "")


def _ledger(reqs):
    ledger = Ledger()
    for r in reqs:
        ledger.arrive(r)
    for r in reqs:
        if r.outcome in (Outcome.COMPLETED, Outcome.FAILED):
            ledger.retire(r)
    return ledger


def test_a_worked_example():
    # 11 requests, one a second from t = 0 to 10, 10 output tokens asked each; request 5 fails at arrival
    # (never admitted, nothing emitted); the last one (the tail: ceil(0.1 * 11) = 2 requests) is admitted
    # 4 s after arriving, the one before 2 s after; the last token at t = 20
    reqs = [_request(i, float(i), float(i) + (4.0 if i == 10 else 2.0 if i == 9 else 0.0), 20.0 if i == 10 else i + 1.0)
            for i in range(11) if i != 5]
    reqs.insert(5, _request(5, 5.0, None, None, generated=0, outcome=Outcome.FAILED))
    load = load_metrics(_ledger(reqs), makespan_s=20.0)
    assert load == {
        "arrival_span_s": 10.0,
        "offered_req_s": 1.0,  # 10 gaps in 10 s
        "offered_output_tok_s": 10.0,  # 1 req/s x 110 tokens / 11 requests
        "served_output_tok_s": 5.0,  # 100 tokens emitted from t = 0 to 20
        "served_fraction": 0.5,
        "drain_s": 10.0,
        "backlog_s": 2.0,  # the nearest-rank median of the waits 2 and 4
    }


def test_a_request_never_admitted_waits_until_the_run_ended():
    reqs = [_request(0, 0.0, 0.0, 1.0), _request(1, 1.0, None, None, generated=0, outcome=Outcome.WAITING)]
    load = load_metrics(_ledger(reqs), makespan_s=9.0)
    assert load["backlog_s"] == 8.0 and load["served_output_tok_s"] == round(10 / 9.0, 3)


def test_no_span_no_offered_load():
    assert load_metrics(_ledger([_request(0, 0.0, 0.0, 1.0)]), makespan_s=1.0) is None
    assert load_metrics(_ledger([_request(i, 0.0, 0.0, 1.0) for i in range(3)]), makespan_s=1.0) is None


def _oracle(requests: list[Request], makespan_s: float) -> dict:
    """The same quantities from the request objects, in plain Python."""
    by_arrival = sorted(requests, key=lambda r: r.arrival_s)  # the engine's arrival order
    n = len(requests)
    first, last = by_arrival[0].arrival_s, by_arrival[-1].arrival_s
    span = last - first
    rate = (n - 1) / span
    offered = rate * sum(r.output_len for r in requests) / n
    served = sum(r.generated for r in requests) / (makespan_s - first)
    tail = by_arrival[n - max(1, math.ceil(BACKLOG_TAIL * n)):]
    waits = sorted([r.first_admit_s - r.arrival_s for r in tail if r.first_admit_step >= 0]
                   + [makespan_s - r.arrival_s for r in tail if r.first_admit_step < 0 and r.outcome != Outcome.FAILED])
    backlog = waits[math.ceil(len(waits) / 2) - 1] if waits else 0.0
    return {"arrival_span_s": round(span, 6), "offered_req_s": round(rate, 6),
            "offered_output_tok_s": round(offered, 3), "served_output_tok_s": round(served, 3),
            "served_fraction": round(served / offered, 6),
            "drain_s": round(max(0.0, makespan_s - last), 6), "backlog_s": round(backlog, 6)}


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ["workload.num_requests=300", "workload.arrival.process=poisson", "workload.arrival.rate=80"],
    ["workload.num_requests=300", "workload.arrival.process=gamma", "workload.arrival.rate=8",
     "workload.arrival.burstiness=0.3", "engine.kv_blocks=300"],
    ["workload=azure_conv", "workload.window={first: 0, last: 199}"],
])
def test_the_block_equals_an_independent_oracle_on_real_runs(overrides):
    cfg = load_config(overrides)
    state = build_engine(cfg).run()
    assert load_metrics(state.requests, state.now_s) == _oracle(list(state.requests), state.now_s)


def _load(**values) -> dict:
    base = {"arrival_span_s": 100.0, "offered_req_s": 10.0, "offered_output_tok_s": 1000.0,
            "served_output_tok_s": 1000.0, "served_fraction": 1.0, "drain_s": 1.0, "backlog_s": 0.0}
    return {"load": {**base, **values}}


def _flags(metrics: dict, *overrides: str) -> list[str]:
    return [f["code"] for f in health.overload_flag(metrics, load_config(list(overrides)))]


def test_each_rule_at_its_threshold():
    span = 1000.0
    share, backlog = health.OVERLOAD_SERVED_SHARE, health.OVERLOAD_BACKLOG_SHARE * span  # 50 s, over the 5 s floor
    below = math.nextafter(share, 0)
    assert _flags(_load(arrival_span_s=span, served_fraction=below, backlog_s=backlog)) == ["overload"]
    assert _flags(_load(arrival_span_s=span, served_fraction=share, backlog_s=backlog)) == []
    assert _flags(_load(arrival_span_s=span, served_fraction=below, backlog_s=math.nextafter(backlog, 0))) == []
    # a short window: 5 % of its span is 0.5 s; the backlog must also reach the floor in seconds
    floor = health.OVERLOAD_MIN_BACKLOG_S
    assert _flags(_load(arrival_span_s=10.0, served_fraction=0.5, backlog_s=math.nextafter(floor, 0))) == []
    assert _flags(_load(arrival_span_s=10.0, served_fraction=0.5, backlog_s=floor)) == ["overload"]
    # the drain rule: beyond a quarter of the span and a minute, whatever the admission waits
    drain = health.OVERLOAD_DRAIN * span
    assert _flags(_load(arrival_span_s=span, drain_s=math.nextafter(drain, math.inf))) == ["overload"]
    assert _flags(_load(arrival_span_s=span, drain_s=drain)) == []
    # over a quarter of the span, not over a minute
    assert _flags(_load(arrival_span_s=100.0, drain_s=health.OVERLOAD_MIN_DRAIN_S)) == []
    assert _flags({}) == []  # no load block: a closed loop or all at once


def test_the_message_names_the_rates_and_the_key_to_change():
    metrics = _load(served_fraction=0.5, served_output_tok_s=500.0, backlog_s=30.0, drain_s=40.0)
    (flag,) = health.overload_flag(metrics, load_config(["workload.arrival.process=poisson",
                                                         "workload.arrival.rate=10"]))
    assert flag["served_fraction"] == 0.5 and flag["backlog_s"] == 30.0 and flag["drain_s"] == 40.0
    assert flag["message"].startswith("the workload offers 10.00 req/s (1,000 output tok/s over 100.00 s); the "
                                      "engine served 500 tok/s (50%)")
    assert "lower workload.arrival.rate" in flag["message"]
    (trace,) = health.overload_flag(metrics, load_config(["workload=azure_conv"]))
    assert trace["message"].startswith("the trace offers") and "raise workload.time_scale" in trace["message"]


def _codes(overrides: list[str]) -> tuple[list[str], dict]:
    doc = run_point(load_config(overrides), overrides)
    return [w["code"] for w in doc["warnings"]], doc["metrics"]


@pytest.mark.slow
def test_poisson_at_five_times_capacity_is_flagged_and_half_of_it_is_not():
    # capacity: what the engine serves of a saturating batch (every request at once)
    base = ["workload.num_requests=400"]
    capacity = run_point(load_config(base), base)["metrics"]["request_throughput_req_s"]
    codes, m = _codes([*base, "workload.arrival.process=poisson", f"workload.arrival.rate={5 * capacity}"])
    assert "overload" in codes and m["load"]["served_fraction"] < 0.3
    codes, m = _codes([*base, "workload.arrival.process=poisson", f"workload.arrival.rate={capacity / 2}"])
    assert "overload" not in codes
    # the control is served short of its offered rate too (its last requests' own lives over a ~35 s
    # span) but admits its last arrivals at once: no backlog, no flag
    assert m["load"]["served_fraction"] < health.OVERLOAD_SERVED_SHARE and m["load"]["backlog_s"] < 0.1
    for closed in (base, [*base, "workload.arrival.process=closed_loop", "workload.arrival.concurrency=64"]):
        codes, m = _codes(closed)  # all at once, closed loop: no offered load, the flag does not apply
        assert "load" not in m and "overload" not in codes


@pytest.mark.slow
@pytest.mark.parametrize("overrides, overloaded", [
    (["workload=azure_conv", "workload.window={end_s: 600}"], False),
    (["workload=mooncake_conv", "workload.window={end_s: 600}"], False),
    (["workload=azure_conv", "workload.window={start_s: 1200, end_s: 1260}"], False),  # served < 95 %: its tail
    (["workload=mooncake_conv", "workload.window={start_s: 1132, end_s: 1142}"], False),  # a 1 s admission wait
    (["workload=mooncake_conv", "workload.window={end_s: 600}", "model=nemotron_h_56b"], True),
    (["workload=azure_conv", "workload.window={end_s: 600}", "workload.time_scale=0.2"], True),
])
def test_the_shipped_traces(overrides, overloaded):
    codes, m = _codes(overrides)
    assert ("overload" in codes) == overloaded, m["load"]
    assert m["load"]["offered_req_s"] > 0


@pytest.mark.slow
def test_the_run_table_shows_the_load_and_says_goodput_needs_an_slo():
    from cgbench.cli.render import run_rows

    overrides = ["workload.num_requests=60", "workload.arrival.process=poisson", "workload.arrival.rate=20"]
    doc = run_point(load_config(overrides), overrides)
    rows = dict(run_rows(doc))
    load = doc["metrics"]["load"]
    assert rows["offered / served output (tok/s)"].startswith(
        f"{load['offered_output_tok_s']:,.0f} / {load['served_output_tok_s']:,.0f} (")
    assert rows["goodput (req/s)"] == "n/a (no SLO set)"
    closed = run_point(load_config(["workload.num_requests=60"]), [])  # all at once: no offered load
    assert "offered / served output (tok/s)" not in dict(run_rows(closed))
