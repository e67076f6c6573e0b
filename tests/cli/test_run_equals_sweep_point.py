"""A sweep point and a ``cgbench run`` of the same config carry the same document: every metric and
every health flag (``throughput_collapse`` included) is computed by ``pipeline.run_point``, never
added afterwards by a command.

The fields that legitimately differ, and why:

* ``created_at``: when the document was made (provenance).
* a gating flag's ``explain`` and ``state_file``: they name the ``cgbench schedule`` state that only
  ``cgbench run`` saves, next to its result file (a sweep writes point files only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

runner = CliRunner()
# defer + a sparse grid + chunked prefill serialises a chat workload: a gating flag, and throughput
# far below the no-gating budget policy's
SERIALISED = ["cg=sparse", "engine=chunked", "workload=chat", "workload.num_requests=8"]
RUN_ONLY_FLAG_FIELDS = ("explain", "state_file")


def _comparable(doc: dict) -> str:
    doc = json.loads(json.dumps(doc))
    del doc["created_at"]
    for flag in doc["warnings"]:
        for key in RUN_ONLY_FLAG_FIELDS:
            flag.pop(key, None)
    return json.dumps(doc, indent=1)


def _sweep_point(out: Path, policy: str) -> dict:
    index = json.loads((out / "sweep.json").read_text())
    entry = next(p for p in index["points"] if f"policy={policy}" in p["overrides"])
    return json.loads((out / entry["file"]).read_text())


@pytest.mark.slow
def test_a_sweep_point_and_a_run_of_its_config_carry_the_same_document(tmp_path):
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", "policy=defer,budget", *SERIALISED, "--jobs", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    point = _sweep_point(out, "defer")
    assert [w["code"] for w in point["warnings"]] == ["long_graph_wait", "heavy_deferral", "overload",
                                                      "throughput_collapse", "ttft_collapse"]

    run_path = tmp_path / "run.json"
    r = runner.invoke(app, ["run", *point["overrides"], "--out", str(run_path)])
    assert r.exit_code == 0, r.output
    alone = json.loads(run_path.read_text())
    assert _comparable(alone) == _comparable(point)
    # what differs is exactly the run's own file: the state it saved, which the flag names
    flag = alone["warnings"][0]
    assert flag["state_file"] == str(run_path.with_name("run.state.json"))
    assert Path(flag["state_file"]).is_file() and flag["explain"] == f"cgbench schedule {flag['state_file']}"
    assert not any(key in w for w in point["warnings"] for key in RUN_ONLY_FLAG_FIELDS)


@pytest.mark.slow
def test_the_no_gating_point_has_no_collapse_to_report(tmp_path):
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", "policy=defer,budget", *SERIALISED, "--out", str(out)])
    assert r.exit_code == 0, r.output
    defer, budget = _sweep_point(out, "defer"), _sweep_point(out, "budget")
    assert budget["warnings"] == []
    collapse = next(w for w in defer["warnings"] if w["code"] == "throughput_collapse")
    ratio = budget["metrics"]["output_throughput_tok_s"] / defer["metrics"]["output_throughput_tok_s"]
    assert collapse["ratio"] == ratio > 2.0  # measured against the budget run of the same config
