"""A sweep says where gating is off and refuses a policy axis whose points are provably the same run
(cgbench.analysis.sweep.gating): before anything runs, in its output and in sweep.json."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cgbench.analysis.sweep.plan import plan_sweep
from cgbench.cli.app import app
from cgbench.config.schema import ConfigError

runner = CliRunner()
SMALL = ["workload.num_requests=8"]


def test_five_policies_with_megatrons_default_flags_are_refused_naming_cause_and_fix(tmp_path):
    with pytest.raises(ConfigError) as e:
        plan_sweep(["policy=budget,megatron,defer,wait_timeout,cover", "cg=megatron_no_all_prefills", *SMALL],
                   out_dir=tmp_path / "s")
    text = str(e.value)
    assert text.startswith("policy: the budget,megatron,defer,wait_timeout,cover points run the same steps")
    assert "needs --inference-cuda-graph-all-prefills / cg.all_prefills=true" in text
    assert "switch gating on" in text and "drop the policy axis" in text
    r = runner.invoke(app, ["sweep", "policy=budget,megatron", "cg.all_prefills=false", *SMALL,
                            "--out", str(tmp_path / "cli")])
    assert r.exit_code == 2 and r.stderr.startswith("error: policy: the budget,megatron points run the same steps")
    assert not (tmp_path / "cli").exists()


def test_a_policy_axis_with_a_guard_or_a_gated_row_is_warned_about_not_refused(tmp_path):
    plan = plan_sweep(["policy=budget,megatron,pad_guard", "cg=megatron_no_all_prefills,megatron", *SMALL],
                      out_dir=tmp_path / "s")
    assert plan.warnings == [
        "gating active: no in 3 of 6 points (1, 3, 5): needs --inference-cuda-graph-all-prefills / "
        "cg.all_prefills=true",
        "points 1, 3 differ only in their policy and run the same steps: gating is off in them (needs "
        "--inference-cuda-graph-all-prefills / cg.all_prefills=true)"]
    assert [p.params for p in plan.points][0] == {"policy": "budget", "cg": "megatron_no_all_prefills"}
    # a policy that never gates is the user's choice: not a warning of its own
    assert plan_sweep(["policy=budget,megatron", *SMALL], out_dir=tmp_path / "t").warnings == []


def test_the_warnings_are_printed_and_kept_in_the_index(tmp_path):
    out = tmp_path / "s"
    r = runner.invoke(app, ["sweep", "policy=budget,megatron", "cg=megatron_no_all_prefills,megatron", *SMALL,
                            "--out", str(out), "--format", "csv"])
    assert r.exit_code == 0, r.output
    line = "warning: points 1, 3 differ only in their policy and run the same steps"
    assert r.stderr.count(line) == 2  # before the run and under the summary
    index = json.loads((out / "sweep.json").read_text())
    assert index["warnings"][0].startswith("gating active: no in 2 of 4 points (1, 3)")
    a, b = (json.loads((out / index["points"][i]["file"]).read_text())["metrics"] for i in (0, 2))
    assert a == b  # what the warning says


def test_the_sweep_report_carries_the_warnings(tmp_path):
    from cgbench.analysis.report import sweep_report

    out = tmp_path / "s"
    r = runner.invoke(app, ["sweep", "policy=budget,megatron", "cg=megatron_no_all_prefills,megatron", *SMALL,
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    notes = next(s for s in sweep_report(out).sections if s.heading == "Headline").notes
    assert "warning: gating active: no in 2 of 4 points (1, 3): needs --inference-cuda-graph-all-prefills / " \
           "cg.all_prefills=true" in notes
