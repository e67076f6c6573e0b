"""``--megatron-args`` on every command that composes a config (one option, one code path:
``cli.options.with_launch_line``): grid, cost, sweep, advise, calibrate, as on run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

runner = CliRunner()
LINE = ("--inference-dynamic-batching --inference-dynamic-batching-max-requests 8 "
        "--inference-dynamic-batching-buffer-size-gb 2 --cuda-graph-impl local --decode-only-cuda-graphs")


def test_every_composing_command_has_the_one_option():
    for command in ("run", "sweep", "advise", "grid", "cost", "calibrate"):
        r = runner.invoke(app, [command, "--help"], terminal_width=200)
        assert r.exit_code == 0 and "--megatron-args" in r.output, command


def test_grid_and_cost_compose_the_translation_and_print_it():
    r = runner.invoke(app, ["grid", "--megatron-args", LINE, "model=tiny_transformer", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "translated   --decode-only-cuda-graphs -> cg.non_decode=false" in r.stderr
    graphs = json.loads(r.stdout)["graphs"]
    assert graphs and all(P == 0 for _, P, _ in graphs) and max(D for _, _, D in graphs) <= 8
    r = runner.invoke(app, ["cost", "--megatron-args", "--tensor-model-parallel-size 2", "--shape", "1,0,1",
                            "model=transformer", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tp_size"] == 2 and "engine.tp_size=2" in r.stderr


def test_a_bad_line_is_one_error_on_every_command(tmp_path):
    bad = "--hiden-size 4096"
    for args in (["grid"], ["cost", "--shape", "1,0,1"], ["sweep", "policy=budget,megatron", "--dry-run"],
                 ["advise", "--budget-graphs", "8", "--out", str(tmp_path / "a")],
                 ["calibrate", "--host", "model=tiny_transformer", "--out", str(tmp_path / "h.json")]):
        r = runner.invoke(app, [*args, "--megatron-args", bad])
        assert r.exit_code == 2, (args, r.output)
        assert "--hiden-size is not a Megatron 0.19.2 argument (did you mean --hidden-size?)" in r.stderr, args
        assert "Traceback" not in r.output
    assert not any(tmp_path.iterdir())


def test_a_sweep_runs_the_line_in_every_point_and_its_axis_wins(tmp_path):
    out = tmp_path / "sw"
    r = runner.invoke(app, ["sweep", "--megatron-args", LINE, "model=tiny_transformer", "workload.num_requests=4",
                            "cg.non_decode=true,false", "--out", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "axis wins    cg.non_decode=true,false" in r.stderr.lower()
    assert "each point's value replaces the translated cg.non_decode=false" in r.stderr
    index = json.loads((out / "sweep.json").read_text())
    docs = [json.loads((out / p["file"]).read_text()) for p in index["points"]]
    assert [d["config"]["cg"]["non_decode"] for d in docs] == [True, False]
    assert all(d["config"]["engine"]["max_requests"] == 8 for d in docs)
    # each point is the run of the same line and overrides
    one = tmp_path / "one.json"
    r = runner.invoke(app, ["run", "--megatron-args", LINE, "model=tiny_transformer", "workload.num_requests=4",
                            "cg.non_decode=false", "--out", str(one), "--format", "json"])
    assert r.exit_code == 0, r.output
    run_doc = json.loads(one.read_text())
    assert run_doc["metrics"] == docs[1]["metrics"] and run_doc["config"] == docs[1]["config"]


@pytest.mark.slow
def test_advise_with_a_line_prints_the_change_to_that_line_and_every_printed_line_translates_back(tmp_path):
    from cgbench.analysis.report import advise_report
    from cgbench.config.megatron_args import translate
    from cgbench.config.megatron_lines import LaunchAdvice, applied, cg_settings

    path = Path(__file__).resolve().parents[1] / "config" / "data" / "nemotron_h_8b_tp8.sh"
    r = runner.invoke(app, ["advise", "--megatron-args", f"@{path}", "workload.num_requests=32",
                            "engine.kv_blocks=0", "--budget-graphs", "12", "--candidates", "3", "--out",
                            str(tmp_path / "adv")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "adv" / "advise.json").read_text())
    rec = doc["recommended"]
    change = rec["megatron_line"]
    assert change["against"] == "your --megatron-args line" and change["command"] == rec["megatron_command"]
    assert f"Megatron arguments (best Megatron setting, {rec['megatron_args_from']}): {rec['megatron_command']}" \
        in r.stdout
    assert "on your --megatron-args line: add " in r.stdout
    # the user's line changed as printed runs the recommended Megatron setting
    changed = applied(path.read_text(), LaunchAdvice.from_json(change))
    translate(changed).check()
    assert cg_settings(changed) == cg_settings(rec["megatron_command"])
    best = next(c for c in doc["candidates"] if c["name"] == rec["megatron_args_from"])
    knob_keys = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in best["overrides"] if o.startswith("cg.")}
    assert "cg=megatron" in best["overrides"]
    for key, value in cg_settings(changed).items():
        if key != "cg.kind":
            assert knob_keys[key].lower() == value, key
    # every candidate's printed command, and the report's rows, translate back
    for c in doc["candidates"]:
        if c["megatron_command"]:
            translate(c["megatron_command"]).check()
    rows = {t.caption: t for s in advise_report(doc, "advise.json").sections for t in s.tables}
    table = rows["the recommended CUDA-graph list"]
    cells = {row[0].text: row[1].text for row in table.rows}
    assert cg_settings(cells["Megatron command"]) == cg_settings(rec["megatron_command"])
    assert cells["change to the launch line"].startswith("on your --megatron-args line: add")
