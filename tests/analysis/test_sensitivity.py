"""``cgbench run --sensitivity``: re-pricing recorded steps must give what a full re-run at that price
gives; ranges contain the point; the break-even separates the two winners."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.analysis.sensitivity import (
    DECISION_METRICS,
    Side,
    at_value,
    check_sensitivity,
    record,
    repricing_refusal,
    sensitivity,
)
from cgbench.backends.sim.uncertainty import UNCERTAIN, UncertainParameter, by_key
from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.schema import ConfigError
from cgbench.pipeline import run_point, simulate
from cgbench.results.names import number_at
from tests.helpers import examples

pytestmark = pytest.mark.slow

SMALL = ["model=hybrid", "workload.num_requests=48", "policy=defer", "engine.chunked_prefill=true"]
CHAT = ["model=hybrid", "workload=chat", "workload.num_requests=40", "policy=defer"]


def decision(metrics: dict) -> dict[str, float]:
    return {k: number_at(metrics, k) for k in DECISION_METRICS}


@pytest.mark.parametrize("extra", [[], ["workload.arrival.process=closed_loop", "workload.arrival.concurrency=8"],
                                   ["model=transformer", "cg=vllm", "policy=budget"]])
@pytest.mark.parametrize("key,value", [("hardware.host_op_us", 3.1), ("hardware.flops_efficiency", 0.41),
                                       ("hardware.bandwidth_efficiency", 0.93), ("hardware.kernel_launch_us", 7.0),
                                       ("hardware.attention_efficiency", 0.3), ("hardware.scan_efficiency", 0.2),
                                       ("model.padded_slot_cost", "full")])
def test_repriced_equals_a_full_rerun(extra, key, value):
    """The oracle: the recorded run re-priced at a new value equals a fresh simulation at that value."""
    cfg = load_config([*SMALL, *extra])
    assert repricing_refusal(cfg) is None
    side = record("a", cfg)
    moved = by_key()[key].applied(cfg, value)
    assert side.evaluate(at_value(by_key()[key], value)) == decision(simulate(moved))
    assert side.evaluate() == decision(simulate(cfg))


def test_timed_arrivals_are_rerun_and_say_why():
    cfg = load_config(CHAT)
    assert "poisson" in repricing_refusal(cfg)
    block = sensitivity(cfg, run_point(cfg)["metrics"], overrides=CHAT, params=(by_key()["hardware.host_op_us"],))
    assert block["method"] == "rerun" and "poisson" in block["why_rerun"]
    rerun = Side("a", cfg)
    moved = by_key()["hardware.host_op_us"].applied(cfg, 5.0)
    assert rerun.evaluate(at_value(by_key()["hardware.host_op_us"], 5.0)) == decision(simulate(moved))


@pytest.mark.e2e
@settings(max_examples=examples(25, stretch=False), deadline=None)
@given(point=st.floats(0.01, 50.0), key=st.sampled_from([p.key for p in UNCERTAIN if not p.choices]))
def test_every_range_contains_its_point(point, key):
    p = by_key()[key]
    cfg = load_config([])
    value = min(point, 1.0) if "efficiency" in key else point
    cfg = p.applied(cfg, value)
    lo, hi = p.bounds(cfg)
    assert lo <= p.value(cfg) <= hi
    if p.at_most is not None:
        assert hi <= max(p.at_most, p.value(cfg))


def test_a_choice_is_tried_at_each_value_and_the_null_host_cost_is_the_profiles():
    cfg = load_config(["model=hybrid"])
    slot = by_key()["model.padded_slot_cost"]
    assert slot.values(cfg) == ["shared", "full"] and slot.value(cfg) == "shared"
    assert slot.applied(cfg, "full").model.padded_slot_cost == "full"
    host = by_key()["hardware.host_op_us"]
    assert cfg.hardware.host_op_us is None and host.value(cfg) == 4.05  # the megatron profile's
    assert host.applied(cfg, 5.0).hardware.host_op_us == 5.0


def test_break_even_separates_the_winners():
    """At the reported host cost the winner changes: just below it one side wins, just above the other
    (each checked by a full re-run, not by the re-pricing that found it)."""
    cfg = load_config(SMALL)
    block = sensitivity(cfg, run_point(cfg)["metrics"], overrides=SMALL)
    assert block["method"] == "repriced"
    found = [(c, e) for c in block["comparisons"] for e in c["break_even"] if e["host_op_us"] is not None]
    assert found, "this small hybrid run has a host cost at which graphs stop paying"
    comp, even = found[0]
    b_cfg = load_config(comp["overrides"])  # what the comparison says it ran
    p = by_key()["hardware.host_op_us"]
    higher = DECISION_METRICS[even["metric"]]
    for factor, expected in ((0.97, even["below"]), (1.03, even["above"])):
        v = even["host_op_us"] * factor
        a = number_at(simulate(p.applied(cfg, v)), even["metric"])
        b = number_at(simulate(p.applied(b_cfg, v)), even["metric"])
        assert ("a" if (a > b) == higher else "b") == expected
    assert even["eager_graphed_ratio"] > 1.0


def test_a_parameter_the_model_does_not_read_is_marked_so():
    cfg = load_config(SMALL)
    unread = UncertainParameter("hardware.memory_gb", "test", scale=(0.5, 2.0))
    block = sensitivity(cfg, run_point(cfg)["metrics"], overrides=SMALL, params=(unread,))
    for comp in block["comparisons"]:
        assert comp["parameters"][0]["effect"].startswith("none")
        assert comp["flips"] == []


def test_identical_schedules_are_said_to_be_identical():
    plain = ["model=transformer", "workload.num_requests=32"]  # megatron vs budget coincide here
    cfg = load_config(plain)
    block = sensitivity(cfg, run_point(cfg)["metrics"], overrides=plain, params=(by_key()["hardware.host_op_us"],))
    budget = block["comparisons"][0]
    assert budget["baseline"] == "gating_off" and budget["overrides"] == [*plain, "policy=budget"]
    assert budget["same_steps"]  # the condition the test is about holds here, every time
    assert set(budget["point_winner"].values()) == {"tie"}
    assert all(not p.get("metrics") or not any(r["flips"] for r in p["metrics"].values())
               for p in budget["parameters"])
    # and a pair that schedules differently is not called identical
    other = load_config(SMALL)
    assert not sensitivity(other, run_point(other)["metrics"], overrides=SMALL,
                           params=(by_key()["hardware.host_op_us"],))["comparisons"][0]["same_steps"]


def test_refusals_are_bad_input():
    with pytest.raises(ConfigError, match="simulator"):
        check_sensitivity(load_config(["backend=torch"]))


def test_cli_sensitivity_writes_a_schema_valid_block(tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", *SMALL, "--sensitivity", "-o", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())  # the conftest validates every written result against the schema
    assert doc["sensitivity"]["method"] == "repriced"
    assert doc["metrics"] == run_point(load_config(SMALL), SMALL)["metrics"]  # the run itself is unchanged


def test_cli_sensitivity_refusal_is_one_line(tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", "backend=torch", "model=tiny_transformer", "engine=small",
                                   "workload=small", "--sensitivity", "-o", str(out)])
    assert res.exit_code == 2
    assert "--sensitivity: re-pricing needs the simulator" in res.output and not out.exists()


@pytest.mark.e2e
def test_sweep_sensitivity_adds_the_block_and_leaves_the_metrics(tmp_path):
    args = ["sweep", "model=hybrid", "policy=defer,megatron", "workload.num_requests=24"]
    plain = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "plain")])
    priced = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "priced"), "--sensitivity"])
    assert plain.exit_code == 0 and priced.exit_code == 0, priced.output
    assert "Sensitivity per point" in priced.output
    files = sorted(p.name for p in (tmp_path / "plain").glob("model-*.json"))
    assert len(files) == 2
    for name in files:
        a = json.loads((tmp_path / "plain" / name).read_text())
        b = json.loads((tmp_path / "priced" / name).read_text())
        assert "sensitivity" not in a and b["sensitivity"]["method"] == "repriced"
        assert a["metrics"] == b["metrics"]


@pytest.mark.e2e
def test_sweep_sensitivity_refuses_a_point_it_cannot_price(tmp_path):
    res = CliRunner().invoke(app, ["sweep", "backend=sim,torch", "model=tiny_transformer", "engine=small",
                                   "workload=small", "--sensitivity", "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "re-pricing needs the simulator" in res.output
    assert not (tmp_path / "s").exists()


@pytest.mark.e2e
def test_advise_sensitivity_prices_the_recommendation_against_the_default_grid(tmp_path):
    out = tmp_path / "advise"
    res = CliRunner().invoke(app, ["advise", "model=hybrid", "policy=budget", "workload.num_requests=48",
                                   "--budget-graphs", "6", "--candidates", "4", "--sensitivity", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "advise.json").read_text())  # schema-validated by the conftest
    block = doc["sensitivity"]
    assert [c["baseline"] for c in block["comparisons"]] == ["default_grid", "megatron_default"]
    assert block["comparisons"][0]["b"] == f"the default grid ({doc['default']['name']}): the given config"
    megatron = next(b for b in doc["baselines"] if b["baseline"] == "megatron_default")
    assert block["comparisons"][1]["point"]["b"]["output_throughput_tok_s"] == megatron["metrics"][
        "output_throughput_tok_s"]  # the baseline the search simulated, priced again
    point = block["comparisons"][0]["point"]
    assert point["a"]["output_throughput_tok_s"] == doc["recommended"]["metrics"]["output_throughput_tok_s"]
    assert point["b"]["output_throughput_tok_s"] == doc["default"]["metrics"]["output_throughput_tok_s"]
    assert "the recommendation versus" in res.output


@pytest.mark.parametrize("overrides,params", [
    (SMALL, UNCERTAIN),
    (["model=hybrid", "workload=chat", "workload.num_requests=24", "policy=defer"], (by_key()["hardware.host_op_us"],)),
], ids=["repriced", "rerun"])
def test_progress_counts_every_evaluation_and_ends_at_its_plan(overrides, params, monkeypatch):
    """``progress(done, planned)``: one call per run or re-pricing (counted independently here, by
    wrapping them), done rising by them, and the plan, exact, met at the end."""
    import cgbench.analysis.sensitivity as sens

    cfg = load_config(overrides)
    metrics = run_point(cfg)["metrics"]
    evaluations = []
    real_evaluate, real_record = Side.evaluate, sens.record
    monkeypatch.setattr(Side, "evaluate",
                        lambda self, price=None: evaluations.append(1) or real_evaluate(self, price))
    monkeypatch.setattr(sens, "record", lambda *a, **k: evaluations.append(1) or real_record(*a, **k))
    calls: list[tuple[int, int]] = []
    block = sensitivity(cfg, metrics, overrides=overrides, params=params, progress=lambda d, t: calls.append((d, t)))
    assert [d for d, _ in calls] == sorted({d for d, _ in calls}) and all(d <= t for d, t in calls)
    assert calls[-1][0] == calls[-1][1] == len(evaluations)
    if any(b["host_op_us"] is not None for c in block["comparisons"] for b in c["break_even"]):
        assert max(t for _, t in calls) > calls[0][1]  # the plan grew for a bisection
