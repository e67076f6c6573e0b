"""`cgbench compare` of runs under different Megatron rule sets (engine.megatron_rules): always a
config change (a `changed` check and a warning), never a silent metric drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.analysis.compare import CHANGED, compare_paths, load_rules

runner = CliRunner()
POINT = ["engine=kv_tight", "engine.paused_blocks=100", "workload=small"]


def _app():
    from cgbench.cli.app import app

    return app


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("rules")
    paths = {}
    for rules in ("0.19.2", "main"):
        paths[rules] = out / f"{rules}.json"
        res = runner.invoke(_app(), ["run", *POINT, f"engine.megatron_rules={rules}", "-o", str(paths[rules])])
        assert res.exit_code == 0, res.output
    return paths


@pytest.mark.slow
def test_a_rule_set_change_is_a_changed_config_check_and_a_warning(runs):
    comp = compare_paths(runs["0.19.2"], runs["main"], load_rules(None))
    config = [d for d in comp.deltas if d.metric == "config.engine.megatron_rules"]
    assert len(config) == 1 and config[0].status == CHANGED
    assert (config[0].base, config[0].new) == ("0.19.2", "main")
    assert any("engine.megatron_rules 0.19.2 -> main" in w for w in comp.warnings)
    res = runner.invoke(_app(), ["compare", str(runs["0.19.2"]), str(runs["main"])])
    assert res.exit_code == 1  # `changed` fails the gate by default
    assert "config.engine.megatron_rules" in res.output and "warning: config change" in res.output


@pytest.mark.slow
def test_the_same_rule_set_reports_no_config_change(runs):
    comp = compare_paths(runs["main"], runs["main"], load_rules(None))
    assert not [d for d in comp.deltas if d.metric.startswith("config.")] and not comp.warnings


def test_a_result_from_before_the_key_counts_as_0192(runs):
    from cgbench.analysis.compare import config_changes

    old = json.loads(runs["0.19.2"].read_text())
    del old["config"]["engine"]["megatron_rules"]
    assert config_changes(old, json.loads(runs["0.19.2"].read_text()), "p") == []
    changed = config_changes(old, json.loads(runs["main"].read_text()), "p")
    assert [(d.base, d.new, d.status) for d in changed] == [("0.19.2", "main", CHANGED)]


def test_the_run_header_names_the_rule_set(runs):
    from cgbench.cli.render import run_title

    # the rule set, then the host cost that priced the run (tests/cli/test_host_cost_label.py)
    assert " rules: megatron-core 0.19.2 host: " in run_title(json.loads(runs["0.19.2"].read_text()))
    assert " rules: Megatron main d98e8a64 host: " in run_title(json.loads(runs["main"].read_text()))
    out = runs["main"].parent / "x.json"
    res = runner.invoke(_app(), ["run", *POINT, "engine.megatron_rules=main", "-o", str(out)])
    assert " rules: Megatron main d98e8a64 host: " in res.output.splitlines()[0]
