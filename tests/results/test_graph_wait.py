"""``long_graph_wait`` flags a wait that is long for its run and its request (a share of the run's
steps, of the request's own life, a time, or Megatron's threshold), each rule at its threshold; a
request held 204 iterations in a row, which Megatron's max(100, max_sequence_length) = 2,560 never
reaches, is flagged where that is long and not where it is not; and on a real run."""

from __future__ import annotations

import functools

import pytest

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results import graph_wait as gw
from cgbench.results.health import explain_wait_limit

COLUMNS = ["id", "arrival_step", "first_admit_step", "finish_step", "deferrals", "max_cg_wait_iters", "evictions"]


def _run(wait: int, *, steps: int = 100_000, step_ms: float = 1.0, life: int = 100_000, rid: int = 7,
         others: list[tuple[int, int, int]] = ()) -> tuple[dict, dict]:
    """Metrics and a deferrals record: request ``rid`` waited ``wait`` iterations in a ``life``-iteration
    life; ``others`` more (id, wait, life)."""
    rows = [[i, 10, 10 + w, 10 + lf - 1, w, w, 0] for i, w, lf in [(rid, wait, life), *others]]
    metrics = {"steps": steps, "graphed_time_s": steps * step_ms / 1000.0, "eager_time_s": 0.0,
               "max_cg_wait_iters": max(r[5] for r in rows), "max_cg_wait_request": rid}
    return metrics, {"columns": COLUMNS, "rows": sorted(rows)}


@functools.cache
def _cfg(*overrides: str):
    return load_config(list(overrides))


def _flag(wait: int, *overrides: str, **kw) -> dict | None:
    metrics, deferrals = _run(wait, **kw)
    return gw.long_graph_wait_flag(metrics, _cfg(*overrides), deferrals)


def test_204_iterations_megatron_never_warns_about():
    assert gw.starvation_threshold(_cfg()) == 2560  # the default engine's max_sequence_length
    # a long run of 1 ms steps, a long life: 204 iterations are nothing there
    assert _flag(204) is None
    # ... a tenth of a 2,040-step run
    assert _flag(204, steps=2040)["threshold"] == 204 and _flag(204, steps=2041) is None
    # ... half of the request's own 408-iteration life
    assert _flag(204, life=408)["threshold"] == 204 and _flag(204, life=409) is None
    # ... a second: 204 steps of 4.91 ms (the run's mean step time x the wait); at 4.9 ms, 0.9996 s
    flag = _flag(204, step_ms=4.91)
    assert flag["threshold"] == 204 and flag["seconds"] == pytest.approx(204 * 0.00491)
    assert _flag(204, step_ms=4.9) is None


def test_slo_ttft_sets_the_seconds():
    assert _flag(204, "slo.ttft_ms=200", step_ms=1.0)["threshold"] == 200  # 200 ms at 1 ms a step
    assert _flag(204, "slo.ttft_ms=2000", step_ms=4.91) is None  # 1 s, not long against a 2 s bound


def test_megatron_threshold_flags_alone():
    flag = _flag(128, "engine.max_sequence_length=128")
    assert flag is not None and flag["threshold"] == 128


def test_a_short_wait_is_never_long():
    floor = gw.LONG_WAIT_MIN_ITERS
    assert _flag(floor - 1, steps=floor, life=floor, step_ms=1000.0) is None
    assert _flag(floor, steps=floor, life=floor, step_ms=1000.0)["threshold"] == floor


def test_the_request_whose_own_life_makes_its_wait_long():
    # the longest wait (300 of a 100,000-iteration life) is not long; a shorter one (150 of 200) is
    metrics, deferrals = _run(300, others=[(3, 150, 200)])
    flag = gw.long_graph_wait_flag(metrics, _cfg(), deferrals)
    assert flag["request"] == 3 and flag["iterations"] == 150 and flag["threshold"] == 100
    assert "75% of its 200-iteration life" in flag["message"]
    # the saved schedule state shows the first wait of the flag's threshold, not of the longest wait
    assert explain_wait_limit(metrics, _cfg(), flag) == 100


def test_the_message_says_how_long_in_iterations_time_and_shares():
    flag = _flag(204, steps=2040, step_ms=2.0, life=300)
    assert flag["message"] == ("request 7 waited 204 consecutive iterations for a graph (about 0.41 s at the run's "
                               "mean step time of 2.00 ms; 68% of its 300-iteration life; 10.0% of the run's "
                               "2,040 steps): long for this run (from 150 iterations; Megatron's own warning "
                               "fires at 2,560)")


@pytest.mark.slow
def test_a_real_run_holding_a_request_for_hundreds_of_iterations_is_flagged():
    """defer on chat traffic with chunked prefill: a request waits 276 iterations in a row, two thirds
    of its life and about two seconds, far below Megatron's 2,560: the run used to say health ok."""
    overrides = ["workload=chat", "policy=defer", "engine.chunked_prefill=true", "workload.num_requests=1200"]
    cfg = load_config(overrides)
    doc = run_point(cfg, overrides)
    m = doc["metrics"]
    flag = next(w for w in doc["warnings"] if w["code"] == "long_graph_wait")
    assert m["starvation_warnings"] == 0 and m["max_cg_wait_iters"] < gw.starvation_threshold(cfg)
    assert flag["iterations"] == m["max_cg_wait_iters"] and flag["request"] == m["max_cg_wait_request"]
    row = next(r for r in doc["deferrals"]["rows"] if r[0] == flag["request"])
    life = row[3] - row[1] + 1
    assert flag["iterations"] >= gw.LONG_WAIT_LIFE_SHARE * life  # the wait is most of its life
    assert flag["seconds"] >= gw.LONG_WAIT_S
