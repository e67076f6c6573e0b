"""``--config-dir`` on every command that composes a config (one option definition,
``cgbench.cli.options.ConfigDirs``), and a suggestion for the two mistakes Hydra reports raw: a
mistyped group option (``policy=defr``) and a typo inside a user's own YAML file (file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.suggest import closest, with_suggestion
from tests.helpers import one_error_line

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
# every command that composes a config from overrides (sweep's option lives with its executor)
COMPOSING = ("run", "grid", "cost", "calibrate", "advise")
TYPO_MODEL = "defaults:\n  - tiny_hybrid\n  - _self_\nname: mine\n\nhiden_size: 96\n"



@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "wide.yaml").write_text(
        "defaults:\n  - tiny_hybrid\n  - _self_\nname: wide\nhidden_size: 96\n")
    (tmp_path / "conf" / "model" / "typo.yaml").write_text(TYPO_MODEL)
    return tmp_path / "conf"


@pytest.mark.parametrize("command", COMPOSING)
def test_every_composing_command_has_config_dir(command):
    r = runner.invoke(app, [command, "--help"])
    assert r.exit_code == 0 and "--config-dir" in r.stdout, r.stdout


@pytest.mark.parametrize("command", COMPOSING)
def test_a_missing_config_dir_is_one_line_naming_the_option(command, tmp_path):
    r = runner.invoke(app, [command, "--config-dir", str(tmp_path / "nope"), *(
        ["--shape", "1,0,1"] if command == "cost" else ["--budget-graphs", "4"] if command == "advise" else [])])
    assert f"--config-dir: {tmp_path / 'nope'}: no such folder" in one_error_line(r)


@pytest.mark.slow
def test_cost_prices_a_model_from_a_config_dir(tree):
    r = runner.invoke(app, ["cost", "--config-dir", str(tree), "model=wide", "--shape", "1,0,1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"] == "wide"


@pytest.mark.slow
def test_advise_reads_the_config_dir_in_its_candidate_runs(tree, tmp_path):
    import os

    before = os.environ.get("CGBENCH_CONFIG_DIR")
    out = tmp_path / "adv"
    r = runner.invoke(app, ["advise", "--config-dir", str(tree), "model=wide", "workload.num_requests=16",
                            "--budget-graphs", "8", "-n", "2", "--out", str(out), "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    assert doc["candidates"] and all(c["metrics"] for c in doc["candidates"])
    assert os.environ.get("CGBENCH_CONFIG_DIR") == before  # extended for the command only


@pytest.mark.slow
def test_a_mistyped_group_option_gets_the_nearest(tmp_path):
    # a policy name is the policy registry's to check (built-ins and installed plug-ins)
    line = one_error_line(runner.invoke(app, ["run", "policy=defr", f"out_dir={tmp_path}"]))
    assert line.startswith("error: policy: 'defr' is not one of budget, cover, defer, megatron"), line
    assert line.endswith("did you mean defer?"), line
    line = one_error_line(runner.invoke(app, ["sweep", "model=hybrd,transformer", "--dry-run"]))
    assert "did you mean model=hybrid?" in line


@pytest.mark.slow
def test_a_typo_in_a_users_yaml_names_file_line_and_the_key_meant(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["run", "--config-dir", str(tree), "model=typo", f"out_dir={tmp_path / 'r'}"],
                 ["grid", "--config-dir", str(tree), "model=typo"],
                 ["cost", "--config-dir", str(tree), "model=typo", "--shape", "1,0,1"]):
        line = one_error_line(runner.invoke(app, argv))
        assert line == ("error: conf/model/typo.yaml:6: hiden_size: not a key of model (ModelConfig); "
                        "did you mean hidden_size?"), line
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(tree))  # sweep: through the environment
    line = one_error_line(runner.invoke(app, ["sweep", "model=typo", "--dry-run"]))
    assert "conf/model/typo.yaml:6: hiden_size" in line and "did you mean hidden_size?" in line
    assert not (tmp_path / "r").exists()


def test_other_messages_pass_unchanged():
    for message in ("engine.max_requests: must be >= 1, got 0",
                    "workload.arrival.rte: unknown key; did you mean workload.arrival.rate?",
                    "In 'config': Could not find 'model/gpt5' Available options in 'model': hybrid, transformer"):
        assert with_suggestion(message) == message
    assert closest("defr", ["budget", "defer"]) == "defer" and closest("q", ["budget"]) is None


def test_a_failing_suggestion_never_loses_the_error_line(tmp_path, monkeypatch):
    import cgbench.config.suggest as suggest

    def broken(message, config_dirs=()):
        raise RuntimeError("no suggestion today")

    monkeypatch.setattr(suggest, "with_suggestion", broken)
    line = one_error_line(runner.invoke(app, ["run", "model=hybrd", f"out_dir={tmp_path}"]))
    assert "Could not find 'model/hybrd'" in line and "did you mean" not in line
