"""Expert parallelism through the ledger: every rank's requests merge into one ledger whose columns
hold global request ids, whatever widths the ranks' own columns took. Request counts cross the
column widths' boundaries (127/128 on real EP runs; 32,767/32,768 and 2**31 on synthetic ranks)."""

from __future__ import annotations

import json
import random
from dataclasses import astuple, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.engine.ep import EPEngine
from cgbench.engine.ledger import COMPLETED, Ledger
from cgbench.engine.request import Outcome, Request
from cgbench.workload.arrivals import RequestSpec
from tests.helpers import examples, make_cfg, run_engine

# totals on either side of the one-byte column's limit, and of a rank's share of it
BYTE_EDGE_TOTALS = st.sampled_from([127, 128, 129, 255, 256, 257])


@st.composite
def ep_cases(draw):
    n = draw(BYTE_EDGE_TOTALS)
    k = draw(st.integers(2, 4))
    rng = random.Random(draw(st.integers(0, 2**16)))
    spread = draw(st.sampled_from([0.0, 0.002]))  # all at once, or staggered arrivals
    reqs = [RequestSpec(i, i * spread, rng.randint(1, 24), rng.randint(1, 4)) for i in range(n)]
    return (k, draw(st.sampled_from(["nccl", "nvls", "te"])), draw(st.sampled_from(["least_loaded", "round_robin"])),
            draw(st.booleans()), reqs)


@pytest.mark.slow
@settings(max_examples=examples(12, stretch=False), deadline=None)
@given(ep_cases())
def test_an_ep_run_across_the_byte_boundary_reads_back_every_request(case):
    """An EP run of 127..257 requests (the total and the ranks' shares on either side of 128): the
    merged ledger lists every request once, in id order, equal to the ranks' own ledgers' records,
    and its slot column is the id column."""
    k, dispatcher, routing, chunked, reqs = case
    cfg = make_cfg(kind="hybrid", chunked=chunked, max_requests=16, max_tokens=512, max_sequence_length=64,
                   block_size=16)
    cfg = replace(cfg, engine=replace(cfg.engine, ep_size=k, moe_dispatcher=dispatcher, ep_routing=routing))
    eng, state = run_engine(cfg, reqs)
    assert isinstance(eng, EPEngine) and state.outcome == "completed"
    merged = list(state.requests)
    assert [r.id for r in merged] == list(range(len(reqs)))
    assert all(r.outcome == Outcome.COMPLETED and r.generated == r.output_len for r in merged)
    per_rank = sorted((astuple(r) for rank in eng.ranks for r in rank.state.requests), key=lambda t: t[0])
    assert [astuple(r) for r in merged] == per_rank
    assert state.requests.int_column("slot").tolist() == state.requests.int_column("id").tolist()
    assert state.requests.int_column("fate").count(COMPLETED) == len(reqs)
    assert sum(eng.ep_metrics()["rank_requests"]) == len(reqs)


def _synthetic_ranks(total: int, k: int, first_id: int, seed: int) -> tuple[list[Ledger], list[Request]]:
    """``k`` rank ledgers sharing ``total`` requests with global ids from ``first_id`` (each id to a
    random rank); every other request finished, the rest still live."""
    rng = random.Random(seed)
    ledgers = [Ledger() for _ in range(k)]
    reqs = []
    for i in range(total):
        rid = first_id + i
        r = Request(id=rid, prompt_len=1 + i % 5, output_len=rid, finish_step=rid)
        reqs.append(r)
        part = ledgers[rng.randrange(k)]
        part.arrive(r)
        if i % 2 == 0:
            r.outcome = Outcome.COMPLETED if i % 4 == 0 else Outcome.FAILED
            r.fail_reason = "" if i % 4 == 0 else ("kv_block_overflow" if i % 8 == 2 else "x")
            part.retire(r)
    return ledgers, reqs


@pytest.mark.slow
@pytest.mark.parametrize("total, first_id", [(127, 0), (128, 0), (32_767, 0), (32_768, 0), (32_769, 0),
                                             (40, 2**15 - 20), (40, 2**31 - 20), (40, 2**63 - 41)])
def test_merged_ledger_columns_widen_for_the_global_ids_they_hold(total, first_id):
    """A rank's columns are only as wide as its own values; the merged ones take whatever width
    the merged values need (the slot column is filled with global ids, the fate column with
    remapped reason codes)."""
    ledgers, reqs = _synthetic_ranks(total, 3, first_id, seed=total)
    merged = Ledger.merged(ledgers)
    assert len(merged) == total
    back = list(merged)
    assert [r.id for r in back] == [r.id for r in reqs]
    assert [(r.output_len, r.finish_step, r.outcome, r.fail_reason) for r in back] == \
        [(r.output_len, r.finish_step, r.outcome, r.fail_reason) for r in reqs]
    retired = [r for r in reqs if r.outcome in (Outcome.COMPLETED, Outcome.FAILED)]
    assert sorted(merged.int_column("slot").tolist()[:len(retired)]) == [r.id for r in retired]
    assert merged.int_column("slot").tolist() == merged.int_column("id").tolist()


def test_merged_fate_codes_widen_past_a_byte():
    """More distinct fail reasons than a byte counts: the remapped codes still fit."""
    parts = [Ledger(), Ledger()]
    for i in range(300):
        r = Request(id=i, prompt_len=1, output_len=1, outcome=Outcome.FAILED, fail_reason=f"reason {i}")
        parts[i % 2].arrive(r)
        parts[i % 2].retire(r)
    merged = Ledger.merged(parts)
    assert [r.fail_reason for r in merged] == [f"reason {i}" for i in range(300)]


@pytest.mark.slow
def test_the_ep_chat_command_of_issue_32_completes(tmp_path):
    """Regression: this command exited 1 with OverflowError in Ledger.merged (200 requests in all,
    at most 127 on a rank: the merged slot column took a rank's one-byte width)."""
    out = tmp_path / "ep.json"
    r = CliRunner().invoke(app, ["run", "model=hybrid", "workload=chat", "engine.ep_size=2",
                                 "workload.num_requests=200", "workload.arrival.rate=16", "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads(out.read_text())["metrics"]
    assert m["outcome"] == "completed" and m["requests"]["completed"] == 200
    assert sum(m["ep"]["rank_requests"]) == 200 and max(m["ep"]["rank_requests"]) <= 127


# request counts on either side of each column width (1, 2 and 4 bytes), and first ids near the
# widths' limits: what a long trace replayed on many ranks reaches
WIDTH_EDGES = st.sampled_from([127, 128, 129, 255, 256, 257, 32_767, 32_768, 32_769])
ID_EDGES = st.sampled_from([0, 0, 2**7 - 3, 2**15 - 3, 2**31 - 3, 2**63 - 2**16])


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(WIDTH_EDGES, st.integers(1, 8), ID_EDGES, st.integers(0, 2**16))
def test_any_merge_of_rank_ledgers_reads_back_every_request(total, k, first_id, seed):
    """Random rank ledgers (any number of ranks, any split, retired and live requests mixed) merge
    into one that reads back every request as it was, whichever widths the parts' columns took."""
    ledgers, reqs = _synthetic_ranks(total, k, first_id, seed)
    merged = Ledger.merged(ledgers)
    back = list(merged)
    def fields(r: Request) -> tuple:
        return r.id, r.prompt_len, r.output_len, r.finish_step, r.outcome, r.fail_reason

    assert [fields(r) for r in back] == [fields(r) for r in reqs]
    assert merged.int_column("slot").tolist() == merged.int_column("id").tolist()
