"""The conventions users of Hydra apps and Python CLIs rely on: Hydra's experiment pattern
(``+experiment=x`` from a ``--config-dir`` folder, ``# @package _global_``) and ``--info``; completion
of config groups, options and keys; ``--format json`` on every command that prints a result; one
spelling of the export-format option; links in help and errors that work from a wheel (``cgbench
docs TOPIC``); the licence metadata."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.cli.docs import topics
from cgbench.config.completion import override_completions
from cgbench.config.compose import load_config

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

EXPERIMENT = """# @package _global_
defaults:
  - override /model: hybrid
  - override /cg: dense
  - override /workload: small
engine:
  max_requests: 64
seed: 3
"""


@pytest.fixture
def experiments(tmp_path) -> Path:
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "hybrid_dense.yaml").write_text(EXPERIMENT)
    return tmp_path


def test_an_experiment_is_the_config_its_overrides_spell_out(experiments):
    mine = load_config(["+experiment=hybrid_dense"], config_dirs=[experiments])
    typed = load_config(["model=hybrid", "cg=dense", "workload=small", "engine.max_requests=64", "seed=3"])
    assert mine == typed
    # the command line wins over the experiment, as in Hydra
    assert load_config(["+experiment=hybrid_dense", "workload=chat"], config_dirs=[experiments]).workload.name == "chat"


@pytest.mark.slow
def test_a_run_of_an_experiment_is_labelled_by_what_ran(experiments, tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "--config-dir", str(experiments), "+experiment=hybrid_dense", "--out", str(out)])
    assert r.exit_code == 0, r.output
    labels = json.loads(out.read_text())["labels"]
    assert (labels["model"], labels["cg"], labels["workload"], labels["experiment"]) == (
        "hybrid", "dense", "small", "hybrid_dense")


@pytest.mark.parametrize(("args", "words"), [
    (["experiment=hybrid_dense"], "an experiment is added to the defaults list: +experiment=hybrid_dense"),
    (["+experiment=nope"], "Could not find 'experiment/nope'"),
])
def test_a_bad_experiment_is_one_line(experiments, args, words):
    r = runner.invoke(app, ["run", "--config-dir", str(experiments), *args, "--cfg", "job"])
    assert r.exit_code == 2 and words in r.stderr and "Traceback" not in r.output, r.output


def test_info_names_the_search_path_and_where_each_option_came_from(experiments):
    r = runner.invoke(app, ["run", "--info", "--format", "json", "--config-dir", str(experiments),
                            "+experiment=hybrid_dense", "policy=budget"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [e["provider"] for e in doc["search_path"]] == ["cgbench (shipped)", "--config-dir"]
    rows = {row["group"]: row for row in doc["defaults"]}
    assert rows["model"]["from"] == rows["cg"]["from"] == "+experiment=hybrid_dense"
    assert rows["policy"]["from"] == "command line" and rows["engine"]["from"].startswith("default")
    assert rows["experiment"]["file"] == str(experiments / "experiment" / "hybrid_dense.yaml")
    assert Path(rows["cg"]["file"]).name == "dense.yaml"
    table = runner.invoke(app, ["run", "--info"])
    assert table.exit_code == 0 and "config search path" in table.stdout and "defaults list" in table.stdout


def test_completion_offers_a_groups_options_a_records_keys_and_experiments(experiments):
    assert override_completions("cg=de") == ["cg=decode_only", "cg=dense"]
    assert "model=hybrid" in override_completions("model=")
    assert override_completions("engine.max_") == ["engine.max_requests=", "engine.max_sequence_length=",
                                                   "engine.max_tokens="]
    assert override_completions("mo") == ["model.", "model="]
    assert override_completions("+experiment=", [experiments]) == ["+experiment=hybrid_dense"]
    assert "metrics." in override_completions("") and "seed=" in override_completions("")


@pytest.mark.slow
def test_the_shell_gets_them_through_typers_completion(experiments):
    """What ``cgbench --install-completion`` wires up: bash asks the program with _CGBENCH_COMPLETE."""
    exe = Path(sys.executable).with_name("cgbench")
    for words, cword, expect in (("cgbench run cg=de", 2, ["cg=decode_only", "cg=dense"]),
                                 (f"cgbench sweep --config-dir {experiments} +experiment=", 4,
                                  ["+experiment=hybrid_dense"])):
        r = subprocess.run([str(exe)], capture_output=True, text=True,
                           env={"PATH": str(exe.parent), "_CGBENCH_COMPLETE": "complete_bash", "COMP_WORDS": words,
                                "COMP_CWORD": str(cword)})
        assert r.stdout.split() == expect, (r.stdout, r.stderr)


def _help_and_error_texts() -> str:
    texts = []
    for path in (ROOT / "cgbench").rglob("*.py"):
        texts.append(path.read_text())
    return "\n".join(texts)


def test_every_guide_named_in_help_and_errors_exists():
    named = set(re.findall(r"cgbench docs ([a-z][a-z-]*[a-z])", _help_and_error_texts())) - {"lists"}  # (a phrase)
    assert named and named <= set(topics()), named - set(topics())
    # no help text or error sends a wheel user to a file of the repository
    for path in (ROOT / "cgbench" / "cli").glob("*.py"):
        for line in path.read_text().splitlines():
            if '"' in line and not line.lstrip().startswith("#"):
                assert not re.search(r"docs/[a-z-]+\.md", line), f"{path.name}: {line.strip()}"


def test_cgbench_docs_prints_and_lists_the_guides():
    r = runner.invoke(app, ["docs", "sweeps"])
    assert r.exit_code == 0 and r.stdout == (ROOT / "docs" / "sweeps.md").read_text()
    listed = json.loads(runner.invoke(app, ["docs", "--format", "json"]).stdout)
    assert {t["topic"] for t in listed} == {p.stem for p in (ROOT / "docs").glob("*.md")}
    r = runner.invoke(app, ["docs", "sweep"])
    assert r.exit_code == 2 and "did you mean sweeps?" in r.stderr


@pytest.mark.slow
def test_format_json_on_commands_that_print_a_result(tmp_path):
    sweep = tmp_path / "s"
    r = runner.invoke(app, ["sweep", "workload=small", "policy=budget,defer", "--out", str(sweep), "--dry-run",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    dry = json.loads(r.stdout)
    assert [p["overrides"] for p in dry["points"]] == [["workload=small", "policy=budget"],
                                                      ["workload=small", "policy=defer"]]
    assert not sweep.exists()
    assert runner.invoke(app, ["sweep", "workload=small", "policy=budget,defer", "--out", str(sweep)]).exit_code == 0
    plotted = json.loads(runner.invoke(app, ["plot", str(sweep), "--format", "json"]).stdout)
    assert plotted["files"] and all(Path(f).is_file() for f in plotted["files"])
    reported = json.loads(runner.invoke(app, ["report", str(sweep), "-o", str(tmp_path / "r.html"), "--format",
                                              "json"]).stdout)
    assert reported["report"] == str(tmp_path / "r.html") and reported["kind"] == "sweep"
    exported = json.loads(runner.invoke(app, ["export", str(sweep), "-o", str(tmp_path / "e"), "--export-format",
                                              "parquet", "--format", "json"]).stdout)
    assert any(f.endswith("metrics.parquet") for f in exported["files"])


@pytest.mark.parametrize("command", [["calibrate"], ["report", "x", "-o", "y.html"], ["plot", "x"], ["docs"]])
def test_an_unknown_format_is_one_line(command):
    r = runner.invoke(app, [*command, "--format", "xml"])
    assert r.exit_code == 2 and "--format: 'xml' is not one of table, json" in r.stderr, r.output


def test_the_export_format_option_has_one_spelling():
    for command in (["run", "-h"], ["sweep", "-h"], ["export", "-h"]):
        assert "--export-format" in runner.invoke(app, command, terminal_width=200).stdout, command


def test_licence_metadata_is_spdx_with_the_full_text():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    typer_dep = next(d for d in project["dependencies"] if d.startswith("typer"))
    assert "<" in typer_dep, "cli/errors.py imports typer._click: Typer is bounded above"
