"""Plug-ins through entry points, in process: the example of ``examples/plugins/defer_then_guard``
(a policy meeting ``AdmissionPolicy``, a grid family) seen by run, sweep, schedule and advise, loaded
only when named, and a broken plug-in refused in one line naming it. The installed wheel:
``tests/cli/test_plugin_wheel.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.plugin_schema import plugin_help
from cgbench.config.registry import plugins
from cgbench.config.registry.policies import options_of
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.engine.core import Engine
from cgbench.engine.replay import state_from_engine
from cgbench.pipeline import build_engine, run_point
from cgbench.results.state_file import parse_state
from cgbench.workload.stream import generate_requests
from tests import plugin_fixtures
from tests.helpers import one_error_line
from tests.plugin_fixtures import example_plugin  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "tests" / "states" / "11_2_round1.json"
runner = CliRunner()
pytestmark = pytest.mark.usefixtures("example_plugin")
SMALL = ["workload=chat", "workload.num_requests=120", "engine.chunked_prefill=true"]
# the plug-in with no padding guard and 50 deferrals is wait_timeout's rule: the oracle below
AS_WAIT_TIMEOUT = ["policy=defer_then_guard", "policy.defer_then_guard.max_defers=50",
                   "policy.defer_then_guard.max_ratio=1e9"]



@pytest.mark.slow
def test_the_plugin_policy_runs_through_its_protocol_and_agrees_with_the_built_in_it_mirrors():
    cfg = load_config(AS_WAIT_TIMEOUT + SMALL)
    engine = build_engine(cfg)
    assert engine.policy.plugin is not None and type(engine) is Engine  # the plug-in's object, step by step
    mirrored, builtin = run_point(cfg), run_point(load_config(["policy=wait_timeout", *SMALL]))
    assert mirrored["metrics"] == builtin["metrics"]
    assert mirrored["metrics"]["deferral_events"] > 0
    assert mirrored["config"]["policy"]["defer_then_guard"] == {"max_defers": 50, "max_ratio": 1e9}
    # its own options change what it decides: no deferral at all with max_defers=0
    eager = run_point(load_config(["policy=defer_then_guard", "policy.defer_then_guard.max_defers=0", *SMALL]))
    assert eager["metrics"]["deferral_events"] == 0


@pytest.mark.e2e
def test_run_and_sweep_see_the_plugin(tmp_path):
    r = runner.invoke(app, ["run", *AS_WAIT_TIMEOUT, "workload.num_requests=8", "--format", "json",
                            "--out", str(tmp_path / "run.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "run.json").read_text())["config"]["policy"]["name"] == "defer_then_guard"
    r = runner.invoke(app, ["sweep", "policy=wait_timeout,defer_then_guard", "policy.defer_then_guard.max_defers=50",
                            "workload.num_requests=8", "--out", str(tmp_path / "sw")])
    # a key of the plug-in's section is refused for the built-in point that does not read it
    assert r.exit_code == 2 and "policy.defer_then_guard.max_defers: not read with policy=wait_timeout" in r.stderr
    r = runner.invoke(app, ["sweep", "policy=wait_timeout,defer_then_guard", "workload.num_requests=8",
                            "--out", str(tmp_path / "sw")])
    assert r.exit_code == 0, r.output
    index = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [p["status"] for p in index["points"]] == ["done", "done"], index["points"]


def test_the_plugins_a_sweep_names_are_found_in_every_spelling():
    from cgbench.config.plugin_schema import grid_plugins_named, plugins_named

    for spelling in ("defer_then_guard", "megatron,defer_then_guard", "choice(budget,defer_then_guard)"):
        assert plugins_named([f"policy={spelling}"]) == ("defer_then_guard",)
    assert plugins_named(["policy.defer_then_guard.max_defers=1,2"]) == ("defer_then_guard",)
    assert plugins_named(["policy=megatron", "cg=vllm"]) == ()
    assert grid_plugins_named(["cg=vllm,pow2_decode"]) == ("pow2_decode",)


def test_composing_a_plugin_config_leaves_no_option_behind():
    from cgbench.config.compose import expand_sweep, group_options

    load_config(["policy=defer_then_guard", "cg=pow2_decode"])
    for group in ("policy", "cg"):  # glob(*) lists the shipped options only, whatever ran before
        assert sorted(p[0].split("=")[1] for p in expand_sweep([f"{group}=glob(*)"])) == group_options(group)


@pytest.mark.slow
def test_the_composed_config_shows_the_plugins_section():
    r = runner.invoke(app, ["run", "policy=defer_then_guard", "policy.defer_then_guard.max_defers=4", "--cfg", "job"])
    assert r.exit_code == 0, r.output
    assert "name: defer_then_guard\n  pad_guard:" in r.stdout
    assert "  defer_then_guard:\n    max_defers: 4\n    max_ratio: 1.5\n" in r.stdout


def test_a_plugin_grid_kind_builds_and_is_estimated():
    cfg = load_config(["cg=pow2_decode", "engine.max_requests=64", "engine.max_tokens=4096"])
    doc = run_point(cfg)
    assert doc["metrics"]["num_graphs"] == 7  # 64, 32, ..., 1
    assert load_config(["cg.kind=pow2_decode"]).cg.kind == "pow2_decode"


def test_a_plugin_arrival_process_draws_and_its_unread_keys_derive():
    cfg = load_config(["workload.arrival.process=ramp", "workload.arrival.rate=50", "workload.num_requests=40"])
    times = [r.arrival_s for r in generate_requests(cfg.workload, cfg.seed)]
    assert times == [math.sqrt(2.0 * i / 50) for i in range(40)]
    assert run_point(cfg)["metrics"]["requests"]["completed"] == 40
    with pytest.raises(ConfigError, match=r"workload.arrival.burstiness: not read with workload.arrival.process=ramp "
                                          r"\(read with gamma\)"):
        load_config(["workload.arrival.process=ramp", "workload.arrival.rate=50", "workload.arrival.burstiness=2"])
    with pytest.raises(ConfigError, match="workload.arrival.rate: must be > 0 for process=ramp"):
        load_config(["workload.arrival.process=ramp"])  # it reads rate: an open-loop process


@pytest.mark.slow
def test_schedule_lists_and_uses_the_plugin_with_the_states_options(tmp_path, monkeypatch):
    for broken in ("broken", "not_a_spec", "raising", "not_a_policy"):  # --policy all builds every policy
        monkeypatch.delitem(plugin_fixtures.ENTRY_POINTS["policies"], broken)
    r = runner.invoke(app, ["schedule", str(STATE), "--format", "json"])
    assert r.exit_code == 0, r.output
    decisions = {d["policy"]: d for d in json.loads(r.stdout)}
    assert list(decisions)[-1] == "defer_then_guard" and decisions["defer_then_guard"]["deferred"] == 3
    doc = json.loads(STATE.read_text())
    doc["policy"] = {"defer_then_guard": {"max_defers": 0}}
    state = tmp_path / "state.json"
    state.write_text(json.dumps(doc))
    r = runner.invoke(app, ["schedule", str(state), "--policy", "defer_then_guard", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["deferred"] is None  # admitted at once under the state's own option


def test_a_saved_state_keeps_the_plugins_options():
    cfg = load_config(["policy=defer_then_guard", "policy.defer_then_guard.max_defers=3", *SMALL])
    doc = json.loads(json.dumps(state_from_engine(build_engine(cfg), cfg)))
    assert doc["policy"] == {"pad_guard": {"max_ratio": 2.0}, "wait_timeout": {"iters": 50},
                             "defer_then_guard": {"max_defers": 3, "max_ratio": 1.5}}
    restored = parse_state(doc).policy
    assert options_of(restored, "defer_then_guard") == options_of(cfg.policy, "defer_then_guard")


@pytest.mark.e2e
def test_advise_sees_the_plugin(tmp_path):
    r = runner.invoke(app, ["advise", "policy=defer_then_guard", "workload.num_requests=8", "--budget-graphs", "8",
                            "-n", "2", "--out", str(tmp_path / "adv"), "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads((tmp_path / "adv" / "advise.json").read_text())
    assert "policy=defer_then_guard" in json.dumps(doc)


def test_plugins_load_only_when_named_and_built_in_configs_do_not_change():
    cfg = load_config(["policy=pad_guard", "cg=vllm"])
    assert type(cfg) is BenchConfig and plugins.loaded_count() == 0
    assert run_point(load_config(["workload.num_requests=8"]))["config"] == run_point(
        load_config(["workload.num_requests=8"]))["config"]
    lines = plugin_help()  # listing options loads them, and says which are broken
    assert any(line.startswith("policy=defer_then_guard (plug-in") and "policy.defer_then_guard.max_defers=8" in line
               for line in lines), lines
    assert any(line.startswith("policy=broken (plug-in, broken:") for line in lines)
    assert any(line.startswith("cg=pow2_decode (plug-in grid kind, megatron family") for line in lines)
    assert any(line.startswith("workload.arrival.process=ramp (plug-in arrival source") for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "needles"), [
    (["run", "policy=broken"], ("plug-in 'broken'", "cgbench_no_such_module", "failed to load")),
    (["run", "policy=not_a_spec"], ("plug-in 'not_a_spec'",)),
    (["run", "policy=raising"], ("plug-in 'raising'", "build failed: ZeroDivisionError")),
    (["run", "policy=not_a_policy"], ("plug-in 'not_a_policy'", "without name, gates, gates_chunks")),
    (["run", "policy=defer_then_guard", "policy.defer_then_guard.max_defers=-1"],
     ("policy.defer_then_guard.max_defers: must be >= 0",)),
    (["run", "policy=defer_then_guard", "policy.defer_then_guard.max_defrs=1"],
     ("did you mean policy.defer_then_guard.max_defers",)),
    (["run", "cg.kind=pow2_decod"], ("did you mean pow2_decode",)),
    (["schedule", str(STATE), "--policy", "broken"], ("plug-in 'broken'",)),
    (["run", "workload.prompt_len.dist=ramp"], ("plug-in 'ramp'", "not a length source (workload.prompt_len.dist)")),
    (["run", "workload.arrival.process=rmp"], ("did you mean ramp",)),
    (["run", "policy=defer_then_gurd"], ("policy: 'defer_then_gurd' is not one of", "did you mean defer_then_guard")),
])
def test_a_broken_plugin_or_a_bad_option_is_one_line_exit_2(tmp_path, args, needles):
    line = one_error_line(runner.invoke(app, [*args, "--out", str(tmp_path / "x.json")] if args[0] == "run"
                                         else args))
    for needle in needles:
        assert needle in line, line
