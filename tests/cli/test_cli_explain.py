"""``cgbench explain RUN.json``: the text and JSON answers, the state it saves, and its refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.engine.replay import replay_round
from cgbench.results.state_file import parse_state

runner = CliRunner()
# the hybrid model on the default burst defers requests 251 and 255 once each (non-chunked prefill)
RUN = ["run", "model=hybrid", "workload.num_requests=300"]


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("explain") / "run.json"
    r = runner.invoke(app, [*RUN, "--out", str(path)])
    assert r.exit_code == 0, r.output
    return path


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, ["explain", *args])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output
    return lines[0]


def test_a_default_run_records_its_deferred_requests(run_file):
    doc = json.loads(run_file.read_text())
    assert doc["deferrals"]["columns"][0] == "id"
    assert [row[0] for row in doc["deferrals"]["rows"]] == [251, 255]
    assert len(doc["deferrals"]["rows"]) == doc["metrics"]["deferred_requests"]


def test_explain_a_request_in_text(run_file):
    r = runner.invoke(app, ["explain", str(run_file), "--request", "251"])
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert "step 10, policy megatron" in text
    assert "request 251 deferred: with it the step would be (6141, 9, 243)" in text
    assert "what if no gating (policy=budget): admitted; step (8761, 13, 243) runs eager (shape)" in text
    assert "in total: deferred in 1 round(s), at most 1 in a row; first admitted at step 11" in text
    assert "the engine made the same decision" in text


def test_explain_json_and_the_saved_state_replay_the_same_round(run_file, tmp_path):
    state = tmp_path / "round.json"
    r = runner.invoke(app, ["explain", str(run_file), "-r", "255", "--format", "json", "--state", str(state)])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["agrees"] and got["request"] == 255 and got["decision"]["deferred"] == 255
    assert got["waits"]["deferrals"] == 1 and got["waits"]["first_admit_step"] == 12
    # the saved state is cgbench schedule's input: replaying it gives the same decision
    again = replay_round(parse_state(json.loads(state.read_text())), "megatron").to_json()
    assert again == got["decision"]


@pytest.mark.slow
def test_explain_a_step_names_the_request_it_deferred(run_file):
    r = runner.invoke(app, ["explain", str(run_file), "--step", "11", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["step"] == 11 and got["request"] == 255 and got["agrees"]
    r = runner.invoke(app, ["explain", str(run_file), "--step", "0", "--request", "3"])
    assert r.exit_code == 0 and "request 3 was admitted in this round" in r.stdout
    r = runner.invoke(app, ["explain", str(run_file), "--step", "0"])
    assert r.exit_code == 0 and "no request was deferred in this round" in r.stdout


@pytest.mark.slow
def test_refusals(run_file, tmp_path):
    assert "request 3 was never deferred" in _refused([str(run_file), "--request", "3"])
    assert "out of range: the run has requests 0 to 299" in _refused([str(run_file), "--request", "300"])
    assert "name a request (--request N) or a step (--step K)" in _refused([str(run_file)])
    assert "--step 100000: out of range" in _refused([str(run_file), "--step", "100000"])
    assert "--format" in _refused([str(run_file), "-r", "251", "--format", "yaml"])
    doc = json.loads(run_file.read_text())
    old = dict(doc)
    del old["deferrals"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "no 'deferrals' record" in _refused([str(tmp_path / "old.json"), "-r", "251"])
    torch = json.loads(json.dumps(doc))
    torch["config"]["backend"]["name"] = "torch"
    (tmp_path / "torch.json").write_text(json.dumps(torch))
    assert "backend=torch run" in _refused([str(tmp_path / "torch.json"), "-r", "251"])
    broken = json.loads(json.dumps(doc))
    broken["deferrals"]["rows"][0] = ["x"]
    bad = tmp_path / "hostile_inputs" / "broken.json"  # broken on purpose: the schema check skips it
    bad.parent.mkdir()
    bad.write_text(json.dumps(broken))
    assert "broken.json: not a valid cgbench result document: /deferrals/rows/0 must hold" in _refused(
        [str(bad), "-r", "251"])
    changed = json.loads(json.dumps(doc))
    changed["deferrals"]["rows"][0][4] += 1  # not what this config makes
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    assert "re-run's deferrals differ" in _refused([str(tmp_path / "changed.json"), "-r", "251"])
    assert "no such file" in _refused([str(tmp_path / "missing.json"), "-r", "1"]).lower()
