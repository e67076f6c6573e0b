"""The request ledger: every field of a retired request comes back exactly, in arrival order; columns
widen instead of overflowing; a retired request that changes afterwards is caught; an engine run
lets go of its finished requests."""

from __future__ import annotations

import gc
from dataclasses import astuple, fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.engine.invariants import LedgerError
from cgbench.engine.ledger import COMPLETED, FLOAT_COLUMNS, INT_COLUMNS, UNFINISHED, Ledger
from cgbench.engine.request import Outcome, Request
from cgbench.workload.arrivals import RequestSpec
from tests.helpers import examples, make_cfg, run_engine

# values at and around every column width's limits, and the engine's -1 "not yet"
EDGE_INTS = st.sampled_from([-1, 0, 1, 127, 128, -129, 2**15 - 1, 2**15, 2**31 - 1, 2**31, -(2**31) - 1,
                             2**62, 2**63 - 1, -(2**63)])
ANY_INT = st.one_of(st.integers(-1, 300), EDGE_INTS)
ANY_FLOAT = st.one_of(st.floats(allow_nan=False), st.sampled_from([-1.0, 0.0, 1e-9, 0.1 + 0.2]))
REASONS = ["prompt_exceeds_max_sequence_length", "kv_block_overflow", "", "evicted_prompt_exceeds_max_tokens"]


def test_every_request_field_has_a_column():
    names = {f.name for f in fields(Request)}
    assert names == (set(INT_COLUMNS) - {"slot", "fate"}) | set(FLOAT_COLUMNS) | {"outcome", "fail_reason"}


@st.composite
def requests(draw, rid: int) -> Request:
    r = Request(id=rid, prompt_len=0, output_len=0)
    for f in fields(Request):
        if f.name in ("id", "outcome", "fail_reason"):
            continue
        setattr(r, f.name, draw(ANY_FLOAT if f.name in FLOAT_COLUMNS else ANY_INT))
    r.outcome = draw(st.sampled_from(list(Outcome)))
    if r.outcome == Outcome.FAILED:
        r.fail_reason = draw(st.sampled_from(REASONS))
    return r


@st.composite
def ledgers(draw, first_id: int = 0, step: int = 1):
    """A ledger fed random requests; the terminal ones retired in a random order. Returns (ledger, the
    requests in arrival order, copies of them at retirement, the retired ones in retirement order)."""
    n = draw(st.integers(0, 30))
    reqs = [draw(requests(first_id + i * step)) for i in range(n)]
    ledger = Ledger(verify=draw(st.booleans()))
    snapshot = {}
    for r in reqs:
        ledger.arrive(r)
    terminal = [r for r in reqs if r.outcome in (Outcome.COMPLETED, Outcome.FAILED)]
    order = draw(st.permutations(terminal))
    for r in order:
        snapshot[r.id] = replace(r)
        ledger.retire(r)
    return ledger, reqs, snapshot, order


@pytest.mark.slow  # a property over random ledgers: make test runs it
@settings(max_examples=examples(150, stretch=False))
@given(ledgers())
def test_reading_gives_back_every_field_in_arrival_order(case):
    ledger, reqs, snapshot, _ = case
    back = list(ledger)
    assert len(ledger) == len(reqs) == len(back)
    assert [astuple(r) for r in back] == [astuple(snapshot.get(r.id, r)) for r in reqs]
    live = [r for r in reqs if r.id not in snapshot]
    assert all(b is r for b, r in zip(back, reqs, strict=True) if r in live)  # live ones are the objects
    if reqs:
        assert astuple(ledger[-1]) == astuple(back[-1]) and astuple(ledger[0]) == astuple(back[0])
    with pytest.raises(IndexError):
        ledger[len(reqs)]


@pytest.mark.slow  # a property over random ledgers: make test runs it
@settings(max_examples=examples(150, stretch=False))
@given(ledgers())
def test_columns_list_the_retired_then_the_live_requests(case):
    ledger, reqs, snapshot, order = case
    live = [r for r in reqs if r.id not in snapshot]
    rows = [snapshot[r.id] for r in order] + live
    for name in INT_COLUMNS[2:]:
        assert ledger.int_column(name).tolist() == [getattr(r, name) for r in rows], name
    for name in FLOAT_COLUMNS:
        assert ledger.float_column(name).tolist() == [getattr(r, name) for r in rows], name
    reasons = ledger.fail_reasons
    fates = ledger.int_column("fate").tolist()
    expect = [COMPLETED if r.outcome == Outcome.COMPLETED else 1 + reasons.index(r.fail_reason)
              for r in rows[:len(order)]] + [UNFINISHED] * len(live)
    assert fates == expect
    slots = ledger.int_column("slot").tolist()
    assert sorted(slots) == list(range(len(reqs)))  # the arrival order
    assert [reqs[s].id for s in slots] == [r.id for r in rows]


def test_columns_widen_instead_of_overflowing():
    ledger = Ledger()
    values = [5, 2**7, 2**15, 2**31, 2**63 - 1, -(2**63)]
    for i, v in enumerate(values):
        r = Request(id=i, prompt_len=3, output_len=v, finish_step=v, outcome=Outcome.COMPLETED)
        ledger.arrive(r)
        ledger.retire(r)
    assert ledger.int_column("output_len").typecode == "q"
    assert ledger.int_column("prompt_len").typecode == "b"  # a column only widens for its own values
    assert [r.output_len for r in ledger] == values == [r.finish_step for r in ledger]
    too_big = Request(id=9, prompt_len=1, output_len=2**63, outcome=Outcome.COMPLETED)
    ledger.arrive(too_big)
    ledger.retire(too_big)  # packed with its batch, at the latest when the ledger is read
    with pytest.raises(OverflowError, match="output_len"):
        ledger.int_column("output_len")


def test_verify_catches_a_retired_request_that_changes():
    ledger = Ledger(verify=True)
    r = Request(id=0, prompt_len=4, output_len=2, outcome=Outcome.COMPLETED)
    ledger.arrive(r)
    ledger.retire(r)
    assert [x.generated for x in ledger] == [0]
    r.generated = 1  # a bug: something still holds the object and changes it
    with pytest.raises(LedgerError, match="request 0 changed after it was retired"):
        list(ledger)
    with pytest.raises(LedgerError):
        ledger.int_column("generated")


def test_retiring_twice_or_too_early_and_terminal_live_requests_are_errors():
    ledger = Ledger(verify=True)
    a, b = Request(id=0, prompt_len=1, output_len=1), Request(id=1, prompt_len=1, output_len=1)
    ledger.arrive(a)
    ledger.arrive(b)
    with pytest.raises(LedgerError, match="retired while waiting"):
        ledger.retire(a)
    a.outcome = Outcome.FAILED
    with pytest.raises(LedgerError, match="never retired"):
        list(ledger)
    ledger.retire(a)
    with pytest.raises(LedgerError, match="not live"):
        ledger.retire(a)


@pytest.mark.slow  # a property over random ledgers: make test runs it
@settings(max_examples=examples(100, stretch=False))
@given(ledgers(first_id=0, step=2), ledgers(first_id=1, step=2))
def test_merged_ledgers_read_in_id_order(one, two):
    (l1, r1, s1, _), (l2, r2, s2, _) = one, two
    merged = Ledger.merged([l1, l2])
    everything = sorted(r1 + r2, key=lambda r: r.id)
    snapshot = {**s1, **s2}
    assert [astuple(r) for r in merged] == [astuple(snapshot.get(r.id, r)) for r in everything]
    # its columns agree with its own reading, fail reasons remapped onto one list
    by_id = {r.id: r for r in merged}
    ids = merged.int_column("id").tolist()
    assert sorted(ids) == [r.id for r in everything]
    reasons = merged.fail_reasons
    for code, rid in zip(merged.int_column("fate").tolist(), ids, strict=True):
        r = by_id[rid]
        want = (UNFINISHED if r.outcome not in (Outcome.COMPLETED, Outcome.FAILED) else
                COMPLETED if r.outcome == Outcome.COMPLETED else 1 + reasons.index(r.fail_reason))
        assert code == want
    for name in ("generated", "finish_step"):
        assert merged.int_column(name).tolist() == [getattr(by_id[i], name) for i in ids]
    assert merged.float_column("finish_s").tolist() == [by_id[i].finish_s for i in ids]


def _live_request_objects() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Request)


@pytest.mark.slow
def test_an_engine_run_lets_go_of_its_finished_requests():
    cfg = make_cfg(policy="megatron", max_requests=4, max_tokens=256, max_sequence_length=128)
    cfg = replace(cfg, engine=replace(cfg.engine, check_invariants=False))  # verify mode keeps them
    reqs = [RequestSpec(i, i * 0.001, 20 + i % 7, 5 + i % 11) for i in range(400)]
    reqs.append(RequestSpec(400, 0.5, 500, 4))  # fails on arrival: longer than max_sequence_length
    before = _live_request_objects()
    eng, state = run_engine(cfg, reqs)
    assert state.outcome == "completed"
    assert _live_request_objects() - before <= cfg.engine.max_requests  # the last step's rows, at most
    done = list(state.requests)
    assert [r.id for r in done] == list(range(401))
    assert all(r.outcome == Outcome.COMPLETED and r.generated == r.output_len for r in done[:400])
    assert done[400].fail_reason == "prompt_exceeds_max_sequence_length"
