"""Why gating is on or off (cgbench.engine.gating): the one condition with its reasons, in the result
document and every table that shows it; and the claim the sweep's refusal rests on: without gating
the policies that act on no forward-time guard run the very same steps."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.megatron_args import translate
from cgbench.config.schema import POLICIES
from cgbench.pipeline import gating_of, run_point, simulate

runner = CliRunner()


def _status(*overrides: str):
    return gating_of(load_config(list(overrides)))


def test_each_failing_condition_is_named_with_its_fix():
    assert _status().active and "policy=megatron defers" in _status().reason
    s = _status("cg=megatron_no_all_prefills")
    assert not s.active and s.reason == "needs --inference-cuda-graph-all-prefills / cg.all_prefills=true"
    assert s.config_causes == (s.reason,) and s.policy_blind
    s = _status("policy=budget")
    assert s.reason.startswith("policy=budget does not gate admission") and s.config_causes == ()
    s = _status("cg=none", "policy=defer")
    assert s.config_causes == ("the grid captures no graphs (cg=none, or cg.num_cuda_graphs=null)",)
    s = _status("cg.non_decode=false")
    assert "cg.non_decode=false (--decode-only-cuda-graphs)" in s.reason
    decode_list = ["cg=explicit", "cg.all_prefills=true", "cg.non_decode=true", "cg.graphs=[[8,0,8],[16,0,16]]"]
    s = _status("policy=defer", *decode_list)
    assert "no prefill or mixed graph, and policy=defer gates only when it has one" in s.reason
    assert _status("policy=megatron", *decode_list).active  # Megatron's three conditions only (§6.1)
    assert not _status("policy=pad_guard").policy_blind  # its guard acts at forward time, gating or not
    s = _status("model=qwen3_30b_a3b", "engine.ep_size=2", "engine.tp_size=1")
    assert not s.active and "engine.moe_dispatcher=nccl under expert parallelism" in s.reason


def test_the_flags_a_reason_names_translate_back_to_what_it_asks_for():
    flag = _status("cg=megatron_no_all_prefills").reason.split()[1]
    assert "cg.all_prefills=true" in translate(f"--cuda-graph-impl local {flag}").overrides
    flag = _status("cg.non_decode=false").reason.split("(")[1].split(")")[0]
    assert "cg.non_decode=false" in translate(f"--cuda-graph-impl local {flag}").overrides


def test_the_condition_is_the_engines_in_every_run():
    for overrides in ([], ["cg=megatron_no_all_prefills"], ["policy=budget"], ["cg=none"], ["engine.dp_size=2"]):
        cfg = load_config(["workload.num_requests=12", *overrides])
        doc = run_point(cfg, [])
        assert doc["gating"]["active"] is doc["metrics"]["gating_active"], overrides
        assert doc["gating"]["reason"] == gating_of(cfg).reason


def test_the_run_table_says_why_gating_is_off(tmp_path):
    r = runner.invoke(app, ["run", "cg=megatron_no_all_prefills", "workload.num_requests=8", "--out",
                            str(tmp_path / "r.json"), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert "| graphs captured / gating active | 62 / no — needs --inference-cuda-graph-all-prefills / " \
           "cg.all_prefills=true |" in r.stdout
    assert json.loads((tmp_path / "r.json").read_text())["gating"]["active"] is False


@pytest.mark.parametrize("chunked", [False, True])
def test_without_gating_every_unguarded_policy_runs_the_same_steps(chunked):
    base = ["model=hybrid", "cg=megatron_no_all_prefills", "workload.num_requests=48",
            f"engine.chunked_prefill={str(chunked).lower()}", "engine.kv_blocks=300"]
    runs = {}
    for name in POLICIES:
        cfg = load_config([*base, f"policy={name}"])
        if gating_of(cfg).policy_blind:
            runs[name] = simulate(cfg)
    assert {"budget", "megatron", "defer", "wait_timeout", "megatron_6675", "cover"} <= set(runs)
    first = next(iter(runs.values()))
    assert first["eager_steps"] > 0  # graph misses happen: gating would have had something to decide
    for name, metrics in runs.items():
        assert metrics == first, name
    gated = simulate(load_config([*base[:1], "cg=megatron", *base[2:], "policy=defer"]))
    assert gated != first  # the same workload with gating on differs: the equality above is not vacuous


def test_explain_says_why_a_run_without_gating_deferred_nothing(tmp_path):
    run = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "model=hybrid", "cg=megatron_no_all_prefills", "workload.num_requests=16",
                            "--out", str(run)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["explain", str(run), "--request", "3"])
    assert r.exit_code == 2
    assert "never deferred by gating in this run (gating was off: needs --inference-cuda-graph-all-prefills / " \
           "cg.all_prefills=true)" in r.stderr
    r = runner.invoke(app, ["explain", str(run), "--step", "2"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1] == "gating active: no — needs --inference-cuda-graph-all-prefills / " \
                                       "cg.all_prefills=true"
