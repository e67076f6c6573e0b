"""Every JSON document the commands write, with the engine features that add metrics blocks (prefix
caching, expert and data parallelism, speculative decoding), validates against its published schema.

The suite's fixture (tests/conftest.py ``_results_are_strict_json``) checks every document any test
leaves under its folder; this module makes sure such documents exist for every feature, whatever the
other tests happen to run (issue 44 class 10: a prefix-caching run wrote two per-prefill averages as
decimals where the schema said integer, and no test wrote one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import schema_errors

pytestmark = pytest.mark.slow
runner = CliRunner()
SMALL = ["workload.num_requests=24"]
FEATURES = {
    "prefix": ["engine.prefix_caching=true"],
    "ep": ["model=hybrid", "engine.ep_size=2"],
    "dp": ["engine.dp_size=2"],
    "spec": ["engine.num_speculative_tokens=2", "engine.spec_acceptance.per_position=[0.7,0.5]"],
}


def _validated(folder: Path) -> dict[str, int]:
    """Every JSON document under ``folder`` validated; how many of each kind."""
    kinds: dict[str, int] = {}
    for path in sorted(folder.rglob("*.json")):
        kind, errors = schema_errors(json.loads(path.read_text(encoding="utf-8")))
        assert errors == [], (path.name, errors[:3])
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_run_and_export_of_each_feature_validate(tmp_path, feature) -> None:
    out = tmp_path / "run.json"
    r = runner.invoke(app, ["run", *FEATURES[feature], *SMALL, "--out", str(out), "--requests"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(out), "--out", str(tmp_path / "export")])
    assert r.exit_code == 0, r.output
    assert _validated(tmp_path)["result"] == 1


def test_a_sweep_over_every_feature_validates(tmp_path) -> None:
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", "engine.prefix_caching=false,true", "engine.num_speculative_tokens=0,2",
                            *SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert _validated(tmp_path) == {"sweep": 1, "result": 4}


def test_the_per_prefill_averages_are_numbers_in_the_schema() -> None:
    from cgbench.analysis.schemas import schema_path

    schema = json.loads(schema_path("result").read_text(encoding="utf-8"))
    block = schema["$defs"]["metrics"]["properties"]["prefix_cache"]["properties"]
    for name in ("computed_tokens_per_prefill", "span_tokens_per_prefill"):
        assert block[name]["type"] == "number", name


def test_an_advise_with_prefix_caching_validates(tmp_path) -> None:
    out = tmp_path / "advise"
    r = runner.invoke(app, ["advise", "engine.prefix_caching=true", "workload.num_requests=16", "-g", "20", "-n", "2",
                            "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert _validated(tmp_path)["advise"] == 1
