"""Errors that give advice: the advice, taken as it is written, works (issue 44 class 3): an epoch-ms
Mooncake trace is told the arrival unit its format then reads; a non-ASCII path Hydra's override
grammar cannot lex is told how to quote it."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import one_error_line

runner = CliRunner()


def _advised(line: str, key: str) -> str:
    found = re.search(rf"(?:set |quote it: )({re.escape(key)}=\S+?)\)?$", line)
    assert found, line
    return found.group(1)


def test_an_epoch_ms_mooncake_trace_is_advised_a_unit_that_then_runs(tmp_path):
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1733100000000 + 250 * i, "input_length": 64,
                                         "output_length": 4, "hash_ids": [i]}) + "\n" for i in range(4)))
    out = tmp_path / "run.json"
    line = one_error_line(runner.invoke(app, ["run", f"workload.trace={trace}", "--out", str(out)]),
                          "an epoch time?")
    advice = _advised(line, "workload.trace_arrival_unit")
    assert advice == "workload.trace_arrival_unit=epoch_ms"
    for extra in ([], ["workload.trace_format=mooncake"]):  # detected, or named: the same unit is read
        r = runner.invoke(app, ["run", f"workload.trace={trace}", advice, *extra, "--out", str(out)])
        assert r.exit_code == 0, r.output
        doc = json.loads(out.read_text())
        assert doc["metrics"]["requests"]["completed"] == 4
        assert doc["metrics"]["makespan_s"] >= 0.75  # the arrivals 250 ms apart, counted from the first


def test_another_unit_than_the_formats_own_or_its_epoch_variant_still_changes_nothing(tmp_path):
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}) + "\n")
    one_error_line(runner.invoke(app, ["run", f"workload.trace={trace}", "workload.trace_arrival_unit=epoch_s",
                                       "--out", str(tmp_path / "x.json")]), "changes nothing")


def test_a_non_ascii_path_is_told_how_to_quote_it_and_the_quoted_override_runs(tmp_path):
    trace = tmp_path / "trace→é.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 32, "output_tokens": 2}) + "\n"
                             for i in range(3)))
    out = tmp_path / "run.json"
    for command in (["run"], ["sweep", "seed=1,2", "--dry-run"]):
        line = one_error_line(runner.invoke(app, [*command, f"workload.trace={trace}", "--out", str(out)]),
                              "quote it: workload.trace='")
        assert "Lexer" not in line
    advice = _advised(line, "workload.trace")
    r = runner.invoke(app, ["run", advice, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["metrics"]["requests"]["completed"] == 3
