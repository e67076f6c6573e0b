"""`cgbench schema KIND` prints the committed schema of each document kind; a wrong kind is one line
and exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cgbench.analysis.schemas import KINDS, schema_path
from cgbench.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("kind", KINDS)
def test_prints_the_committed_schema(kind: str) -> None:
    r = runner.invoke(app, ["schema", kind])
    assert r.exit_code == 0, r.output
    assert r.stdout == schema_path(kind).read_text(encoding="utf-8")
    assert json.loads(r.stdout)["$id"].startswith(f"urn:cgbench:schema:{kind}:v")


def test_a_mistyped_kind_is_one_line_with_a_suggestion_and_exit_2() -> None:
    r = runner.invoke(app, ["schema", "reslut"])
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "did you mean 'result'?" in lines[0]
    assert "known: result, sweep, advise, state" in lines[0]


def test_help_names_every_kind() -> None:
    r = runner.invoke(app, ["schema", "--help"])
    assert r.exit_code == 0
    for kind in KINDS:
        assert kind in r.stdout
