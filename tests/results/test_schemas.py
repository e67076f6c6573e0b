"""The JSON Schemas of cgbench's documents: current with the registry and the configs, valid schemas
themselves, versioned with the documents, accepting what cgbench writes (a run with every record,
EP, a sweep, a state file, the committed baseline) and catching documents that violate them."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from cgbench.analysis.schemas import BUILDERS, KINDS, document_kind, render, schema_path
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.document import SCHEMA_VERSION
from cgbench.results.names import ALL_SUMMARY_FIELDS, METRICS
from tests.helpers import schema_errors

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_committed_schemas_are_current() -> None:
    for kind in KINDS:
        assert schema_path(kind).read_text(encoding="utf-8") == render(kind), (
            f"{schema_path(kind)} is stale: run python scripts/json_schemas.py")
    check = subprocess.run([sys.executable, "scripts/json_schemas.py", "--check"], cwd=ROOT, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.slow
def test_every_schema_is_a_valid_draft_2020_12_schema_with_a_versioned_id() -> None:
    for kind in KINDS:
        schema = json.loads(schema_path(kind).read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"urn:cgbench:schema:{kind}:v{SCHEMA_VERSION}"
    result = BUILDERS["result"]()
    assert result["properties"]["schema_version"] == {"const": SCHEMA_VERSION,
                                                      "description": "the document format's version"}


def test_the_metrics_schema_is_the_registry() -> None:
    metrics = BUILDERS["result"]()["$defs"]["metrics"]
    assert list(metrics["properties"]) == list(dict.fromkeys(m.name.split(".")[0] for m in METRICS))
    assert metrics["additionalProperties"] is False
    assert "ttft_ms" not in metrics["required"] and "steps" in metrics["required"]  # a clock metric is optional
    summary = BUILDERS["result"]()["$defs"]["summary"]
    assert list(summary["properties"]) == list(ALL_SUMMARY_FIELDS)  # metrics.percentiles adds p1 ... p75
    assert "p95" not in summary["required"] and "p99" in summary["required"]  # added within version 1
    assert metrics["properties"]["makespan_s"]["description"].endswith("[s]")


def test_the_config_schema_is_the_typed_config() -> None:
    config = BUILDERS["result"]()["$defs"]["config"]
    engine = config["properties"]["engine"]
    assert engine["properties"]["max_requests"] == {"type": "integer"}
    assert engine["properties"]["chunked_prefill"] == {"type": "boolean"}
    assert config["properties"]["slo"]["properties"]["ttft_ms"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}
    assert config["properties"]["cg"]["properties"]["graphs"] == {
        "type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    # every key required but those added after the version's first results (older results lack them)
    from cgbench.results.schema import ADDED_CONFIG_KEYS

    assert engine["additionalProperties"] is False
    assert set(engine["required"]) == set(engine["properties"]) - set(ADDED_CONFIG_KEYS["engine"])


@pytest.fixture(scope="module")
def run_doc() -> dict:
    """A run with the trace and per-request records, under KV pressure (pauses, evictions)."""
    cfg = load_config(["workload.num_requests=40", "policy=budget", "engine.kv_blocks=200"])
    return run_point(cfg, [], trace=True, requests=True)


def test_documents_cgbench_writes_validate(run_doc: dict) -> None:
    assert "steps" in run_doc and "requests" in run_doc
    assert schema_errors(run_doc) == ("result", [])
    ep = run_point(load_config(["model=hybrid", "workload.num_requests=24", "engine.ep_size=4"]), [])
    assert "ep" in ep["metrics"] and schema_errors(ep) == ("result", [])


@pytest.mark.slow
def test_the_committed_baseline_validates() -> None:
    files = sorted((ROOT / "results" / "baseline").glob("*.json"))
    assert len(files) == 49
    kinds = set()
    for f in files:
        kind, errors = schema_errors(json.loads(f.read_text()))
        assert errors == [], (f.name, errors[:3])
        kinds.add(kind)
    assert kinds == {"result", "sweep"}


def _violations(doc: dict, change) -> list[str]:
    bad = copy.deepcopy(doc)
    change(bad)
    kind, errors = schema_errors(bad)
    assert kind is not None
    return errors


def _set(path: str, value):
    def change(doc):
        *head, last = path.split(".")
        for part in head:
            doc = doc[int(part)] if isinstance(doc, list) else doc[part]
        doc[last] = value
    return change


def _delete(path: str):
    def change(doc):
        *head, last = path.split(".")
        for part in head:
            doc = doc[part]
        del doc[last]
    return change


@pytest.mark.slow
@pytest.mark.parametrize(("change", "where"), [
    (_delete("metrics.steps"), "'steps' is a required property"),  # a missing metric
    (_delete("metrics.ttft_ms.p99"), "'p99' is a required property"),
    (_delete("config"), "'config' is a required property"),
    (_set("metrics.steps", "many"), "metrics.steps: 'many' is not of type 'integer'"),  # a wrong type
    (_set("metrics.ttft_ms.p95", "fast"), "metrics.ttft_ms.p95: 'fast' is not of type 'number'"),
    (_set("metrics.gating_active", 1), "metrics.gating_active: 1 is not of type 'boolean'"),
    (_set("config.engine.max_requests", 1.5), "config.engine.max_requests: 1.5 is not of type 'integer'"),
    (_set("metrics.no_such_metric", 1), "'no_such_metric' was unexpected"),  # an unknown metric
    (_set("metrics.requests.lost", 1), "'lost' was unexpected"),
    (_set("metrics.ttft_ms.p42", 1.0), "'p42' was unexpected"),
    (_set("config.engine.max_requets", 8), "'max_requets' was unexpected"),
    (_set("surprise", True), "'surprise' was unexpected"),
    (_set("schema_version", 3), "schema_version: 2 was expected"),  # (the suite's fixture skips it)
    (_set("steps.0.real", []), "steps.0.real: [] should be non-empty"),
    (_set("requests.0.id", "r1"), "requests.0.id: 'r1' is not of type 'integer'"),
])
def test_a_result_that_violates_the_schema_is_caught(run_doc: dict, change, where: str) -> None:
    errors = _violations(run_doc, change)
    assert any(where in e for e in errors), errors


@pytest.mark.slow
def test_a_sweep_index_validates_and_violations_are_caught(tmp_path) -> None:
    from typer.testing import CliRunner

    from cgbench.cli.app import app

    out = tmp_path / "sweep"
    r = CliRunner().invoke(app, ["sweep", "policy=budget,defer", "workload.num_requests=20", "--out", str(out)])
    assert r.exit_code == 0, r.output
    index = json.loads((out / "sweep.json").read_text())
    assert schema_errors(index) == ("sweep", [])
    bad = copy.deepcopy(index)
    del bad["points"][0]["file"]
    bad["status"] = "finished"
    errors = schema_errors(bad)[1]
    assert any("'file' is a required property" in e for e in errors)
    assert any("'finished' is not one of" in e for e in errors)
    bad = copy.deepcopy(index)
    bad["points"][0]["metrics"]["ttft_ms.p98"] = 1.0
    assert any("'ttft_ms.p98' was unexpected" in e for e in schema_errors(bad)[1])


def test_state_files_validate_and_violations_are_caught() -> None:
    from cgbench.engine.replay import state_from_engine
    from cgbench.pipeline import build_engine

    states = sorted((ROOT / "tests" / "states").glob("*.json"))
    assert states
    for f in states:
        assert schema_errors(json.loads(f.read_text())) == ("state", []), f.name
    cfg = load_config(["engine.chunked_prefill=true", "workload.num_requests=8"])
    doc = json.loads(json.dumps(state_from_engine(build_engine(cfg), cfg)))
    assert schema_errors(doc) == ("state", [])
    doc["queue"] = [{"prompt_tokens": 5}, {"id": 2, "prompt_tokens": -1}]
    doc["batch"]["decode"] = "three"
    errors = schema_errors(doc)[1]
    assert any("queue.0: 'id' is a required property" in e for e in errors)
    assert any("queue.1.prompt_tokens: -1 is less than the minimum of 0" in e for e in errors)
    assert any("batch.decode: 'three' is not of type 'integer'" in e for e in errors)


def test_recognised_by_content() -> None:
    assert document_kind({"schema_version": 2, "metrics": {}}) == "result"
    assert document_kind({"kind": "cgbench-sweep"}) == "sweep"
    assert document_kind({"kind": "cgbench-advise"}) == "advise"
    assert document_kind({"model": {}, "engine": {}, "batch": {}, "queue": []}) == "state"
    for other in ({"kind": "cgbench-advise-run", "metrics": {}}, {"rules": {}}, [], {"model": {}}):
        assert document_kind(other) is None


@pytest.mark.slow
def test_an_advise_report_validates_and_violations_are_caught(tmp_path) -> None:
    from typer.testing import CliRunner

    from cgbench.cli.app import app

    out = tmp_path / "advise"
    r = CliRunner().invoke(app, ["advise", "model=hybrid", "policy=budget", "workload.num_requests=128", "-g", "40",
                                 "-n", "6", "-o", str(out), "--check-workload", "workload=chat"])
    assert r.exit_code == 0, r.output
    report = json.loads((out / "advise.json").read_text())
    assert report["robustness"] and report["candidates"]
    assert schema_errors(report) == ("advise", [])
    bad = copy.deepcopy(report)
    bad["candidates"][0]["metrics"]["steps"] = -0.5
    del bad["default"]["metrics"]["outcome"]
    bad["objective"]["direction"] = "up"
    errors = schema_errors(bad)[1]
    assert any(e.startswith("candidates.0.metrics") for e in errors), errors
    assert any(e.startswith("default.metrics") for e in errors), errors
    assert any("objective.direction: 'up' is not one of ['max', 'min']" in e for e in errors), errors
