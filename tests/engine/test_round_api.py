"""The engine's public round API: ``Engine.run`` is a loop over it, and a caller that drives an engine
through it (as the EP engine drives its ranks) gets the same run; the EP engine touches no private
name of the engines it drives."""

from __future__ import annotations

import ast
import inspect
from dataclasses import astuple

import cgbench.engine.ep as ep_module
from cgbench.engine.contract import StepRecord
from cgbench.pipeline import build_engine
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import make_cfg, run_engine

REQS = [RequestSpec(i, 0.003 * i, 20 + 17 * i % 90, 3 + 11 * i % 40) for i in range(24)]


def _by_hand(eng):
    """The loop of ``Engine.run`` written by a caller: the arrivals, begin_round, then idle handling, else the
    step split into step_work / price / postprocess."""
    st = eng.state
    while True:
        for spec in eng.stream.pop_due(st.now_s):
            eng.arrive(spec)
        result = eng.begin_round()
        if eng.idle:
            nxt = eng.stream.next_arrival_s()
            if nxt is not None:
                eng.wait_until(nxt)
                continue
            if not eng.drained:
                st.outcome, st.diagnosis = "stalled", eng.stall_diagnosis(result)
            break
        ctx = eng.ctx
        work = eng.step_work(*eng.graphs.resolve(ctx.active_tokens, ctx.prefill_count, ctx.decode_count))
        eng.postprocess(work, eng.price(work), result)
    return eng.finish()


def test_driving_the_round_api_by_hand_is_engine_run():
    cfg = make_cfg(kind="hybrid", chunked=True, max_requests=8, max_tokens=256, max_sequence_length=256,
                   block_size=16, oracle=True)
    ref_eng, ref = run_engine(cfg, REQS)
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(REQS))
    mine = _by_hand(eng)
    assert ref.outcome == mine.outcome == "completed"
    assert mine.now_s == ref.now_s and mine.stats == ref.stats
    assert [astuple(r) for r in mine.requests] == [astuple(r) for r in ref.requests]
    assert mine.trace == ref.trace and all(isinstance(t, StepRecord) and t.rank is None for t in mine.trace)
    assert eng.counters == ref_eng.counters and eng.step == ref_eng.step


def test_the_ep_engine_uses_no_private_name_of_another_object():
    """Every ``x._name`` in ep.py is on ``self``: the ranks are driven through their public API."""
    tree = ast.parse(inspect.getsource(ep_module))
    private = [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
               and not (isinstance(node.value, ast.Name) and node.value.id == "self")]
    assert private == []


def test_the_fast_engine_keeps_its_instance_attributes_under_the_shared_key_limit():
    """Plain Python: CPython 3.11 shares an instance dict's keys only up to 29 attributes, and past that
    every ``self.x`` of the step loop is slower (~2% more instructions on the chat preset). A new engine
    attribute must replace one or live elsewhere (compiled classes have no instance dict)."""
    eng = build_engine(make_cfg(kind="hybrid"), stream=ArrivalStream(REQS))
    attributes = getattr(eng, "__dict__", None)
    if attributes is not None:
        assert len(attributes) <= 29, sorted(attributes)
