"""Doctored documents (issue 44 class 6): a result, a sweep index or an advise report with a field of
the wrong JSON type or a field missing, fed to the commands that read them (explain, report,
compare, plot). Each answer is a valid one (exit 0) or exactly one ``error:`` line naming the file
and the field (exit 2), never a traceback; the reader is ``cgbench.results.read_checked``.

The fields are drawn (a seeded generator, the same every run) from every leaf and record of the real
documents; each draw flips its type (a number becomes a string, a list an object, ...) or deletes it."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.inputs.fuzz_lines import doc_places, flipped

pytestmark = pytest.mark.slow
runner = CliRunner()
DRAWS = 12  # per document kind and command


def doctored(doc: dict, rng: random.Random) -> tuple[dict, str]:
    """A copy of ``doc`` with one drawn field flipped or deleted, and which (for the failure message)."""
    bad = json.loads(json.dumps(doc))
    place = rng.choice(doc_places(bad))
    parent = bad
    for part in place[:-1]:
        parent = parent[part]
    if rng.random() < 0.5 and isinstance(parent, dict):
        del parent[place[-1]]
        return bad, f"deleted {place}"
    parent[place[-1]] = flipped(parent[place[-1]])
    return bad, f"flipped {place}"


def _answer_ok(r, what: str) -> None:
    assert "Traceback" not in r.output, (what, r.output[-2000:])
    assert r.exception is None or isinstance(r.exception, SystemExit), (what, repr(r.exception))
    allowed = (0, 1, 2) if what.startswith("compare") else (0, 2)  # 1: compare's gate failed
    assert r.exit_code in allowed, (what, r.exit_code, r.output[-500:])
    if r.exit_code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (what, r.stderr)


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("docs")
    small = ["workload.num_requests=20", "policy=budget"]
    assert runner.invoke(app, ["run", *small, "--out", str(d / "run.json"), "--requests", "--trace"]).exit_code == 0
    r = runner.invoke(app, ["sweep", "workload.num_requests=20", "policy=budget,defer", "--out", str(d / "sweep")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["advise", *small, "-g", "20", "-n", "2", "-o", str(d / "advise")])
    assert r.exit_code == 0, r.output
    return {"result": d / "run.json", "sweep": d / "sweep", "advise": d / "advise" / "advise.json"}


def _commands(kind: str, target: Path, other: Path, out: Path) -> list[list[str]]:
    if kind == "result":
        return [["explain", str(target), "--step", "3"], ["report", str(target), "-o", str(out / "r.html")],
                ["compare", str(other), str(target)], ["plot", str(target), "-o", str(out / "plots")]]
    if kind == "sweep":
        return [["report", str(target), "-o", str(out / "r.html")], ["compare", str(other), str(target)],
                ["plot", str(target), "-o", str(out / "plots")]]
    return [["report", str(target), "-o", str(out / "r.html")]]


@pytest.mark.parametrize("kind", ["result", "sweep", "advise"])
def test_doctored_documents_get_one_line_or_a_valid_answer(documents, tmp_path, kind) -> None:
    rng = random.Random(f"doctored-{kind}")
    source = documents[kind]
    for draw in range(DRAWS):
        case = tmp_path / "hostile_inputs" / f"{draw}"  # broken on purpose: the suite's schema check skips it
        case.mkdir(parents=True)
        if kind == "sweep":
            target = case / "sweep"
            shutil.copytree(source, target)
            index = json.loads((source / "sweep.json").read_text())
            bad, what = doctored(index, rng)
            (target / "sweep.json").write_text(json.dumps(bad))
        else:
            target = case / source.name
            bad, what = doctored(json.loads(source.read_text()), rng)
            target.write_text(json.dumps(bad))
        for args in _commands(kind, target, source, case):
            _answer_ok(runner.invoke(app, args), f"{' '.join(args[:1])} of a {kind} {what}")


@pytest.mark.parametrize(("kind", "change", "words"), [
    ("result", lambda d: d["metrics"].pop("steps"), "/metrics/steps is missing (required)"),
    ("result", lambda d: d["metrics"]["ttft_ms"].__setitem__("p99", "slow"), "/metrics/ttft_ms/p99 must be"),
    ("result", lambda d: d["config"]["engine"].__setitem__("max_requests", "8"),
     "/config/engine/max_requests must be an integer, got string"),
    ("advise", lambda d: d["candidates"][0]["metrics"].__setitem__("steps", []),
     "/candidates/0/metrics/steps must be an integer, got array"),
    ("advise", lambda d: d.pop("default"), "/default is missing (required)"),
    # crashes before the typed reader: a TypeError in the run report, AttributeError / TypeError in advise's
    ("result", lambda d: d["metrics"].__setitem__("eager_step_fraction", [1]),
     "/metrics/eager_step_fraction must be a number, got array"),
    ("advise", lambda d: d.__setitem__("default", 5), "/default must be an object, got integer"),
    ("advise", lambda d: d.__setitem__("robustness", 5), "/robustness must be"),
])
def test_a_doctored_field_is_named_by_its_pointer(documents, tmp_path, kind, change, words) -> None:
    doc = json.loads(documents[kind].read_text())
    change(doc)
    bad = tmp_path / "hostile_inputs" / "bad.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(doc))
    r = runner.invoke(app, ["report", str(bad), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 2, r.output
    assert f"bad.json: not a valid cgbench {kind} document: {words}" in r.stderr, r.stderr
    assert not (tmp_path / "r.html").exists()
    if kind == "result":  # plot reads it with the same reader
        r = runner.invoke(app, ["plot", str(bad), "-o", str(tmp_path / "plots")])
        assert r.exit_code == 2 and words in r.stderr, r.output
        assert not (tmp_path / "plots").exists()


def test_a_doctored_sweep_index_is_named_by_its_pointer(documents, tmp_path) -> None:
    target = tmp_path / "hostile_inputs" / "sweep"
    shutil.copytree(documents["sweep"], target)
    index = json.loads((target / "sweep.json").read_text())
    index["counts"]["done"] = "two"
    (target / "sweep.json").write_text(json.dumps(index))
    r = runner.invoke(app, ["compare", str(documents["sweep"]), str(target)])
    assert r.exit_code == 2, r.output
    assert "sweep.json: not a valid cgbench sweep document: /counts/done must be an integer, got string" in r.stderr
