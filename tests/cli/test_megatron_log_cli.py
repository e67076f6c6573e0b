"""The Megatron-log commands end to end: ``run --emit-megatron-log``, ``explain --megatron-log`` (table,
JSON, report page), ``calibrate --megatron-log`` and a run priced by its file, and their refusals."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

pytestmark = pytest.mark.slow

runner = CliRunner()
RUN = ["model=transformer", "cg=decode_only", "policy=budget", "workload=chat", "workload.num_requests=120"]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlog")
    r = runner.invoke(app, ["run", *RUN, "--out", str(d / "run.json"), "--emit-megatron-log", str(d / "run.log.gz")])
    assert r.exit_code == 0, r.output
    assert "megatron log: " in r.stderr and "step lines, megatron-core 0.19 format" in r.stderr
    return d


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def test_the_emitted_log_is_gzip_and_megatrons_lines(emitted):
    text = gzip.decompress((emitted / "run.log.gz").read_bytes()).decode()
    doc = json.loads((emitted / "run.json").read_text())
    steps = [line for line in text.splitlines() if "* rank 0 | step " in line]
    assert len(steps) == doc["metrics"]["steps"]
    assert sum("cuda graph OFF" in line for line in steps) == doc["metrics"]["eager_steps"]
    assert text.startswith("cgbench: emitted log: model=transformer ")


def test_explain_the_log_in_a_table_in_json_and_as_a_page(emitted, tmp_path):
    log = str(emitted / "run.log.gz")
    r = runner.invoke(app, ["explain", "--megatron-log", log, *[a for o in RUN for a in ("-O", o)],
                            "--what-if", "cg=megatron"])
    assert r.exit_code == 0, r.output
    doc = json.loads((emitted / "run.json").read_text())
    m = doc["metrics"]
    assert f"{m['eager_steps']:,} " in r.stdout and "eager steps by reason" in r.stdout
    assert "no_mixed_graphs" in r.stdout and "what if" in r.stdout and "cg=megatron" in r.stdout
    r = runner.invoke(app, ["explain", "--megatron-log", log, "--format", "json"])
    assert r.exit_code == 0, r.output
    explained = json.loads(r.stdout)
    assert explained["ranks"][0]["eager_steps"] == m["eager_steps"]
    page_input = tmp_path / "explained.json"  # validated against its schema by tests/conftest.py
    page_input.write_text(r.stdout)
    r = runner.invoke(app, ["report", str(page_input), "-o", str(tmp_path / "page.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "page.html").read_text()
    assert "Eager steps by reason" in html and "What if" in html


def test_calibrate_from_the_log_then_run_priced_by_it(emitted, tmp_path):
    out = tmp_path / "fit.json"
    r = runner.invoke(app, ["calibrate", "--megatron-log", str(emitted / "run.log.gz"), *RUN, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "host_op_us" in r.stdout and f"hardware.host_calibration={out}" in r.stdout
    fit = json.loads(out.read_text())
    assert fit["schema"] == "cgbench.log_calibration/1" and fit["fitted"]["hardware.host_op_us"] == pytest.approx(
        4.05, rel=0.01)
    r = runner.invoke(app, ["run", *RUN, f"hardware.host_calibration={out}", "--out", str(tmp_path / "again.json"),
                            "--sensitivity"])
    assert r.exit_code == 0, r.output
    assert "cost model: fitted to megatron log" in r.stdout  # the run header names the log
    again = json.loads((tmp_path / "again.json").read_text())
    assert "run.log.gz" in again["environment"]["calibration"]
    fitted = {p["key"]: p for p in again["sensitivity"]["parameters"]}
    assert "fitted to megatron log" in fitted["hardware.host_op_us"]["source"]


def test_refusals(emitted, tmp_path):
    log = str(emitted / "run.log.gz")
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert "no step line" in _refused(["explain", "--megatron-log", str(empty)])
    assert "name the model" in _refused(["calibrate", "--megatron-log", log])
    assert "not for model 'hybrid'" in _refused(["calibrate", "--megatron-log", log, "model=hybrid",
                                                 "cg=decode_only"])
    assert "--what-if: needs the config" in _refused(["explain", "--megatron-log", log, "--what-if", "cg=dense"])
    assert "--rank: " in _refused(["explain", "--megatron-log", log, "--rank", "7"])
    assert "--megatron-args: reads a Megatron log" in _refused(["explain", str(emitted / "run.json"), "-r", "1",
                                                                "--megatron-args", "--hidden-size 8"])
    assert "explains a cgbench run" in _refused(["explain", str(emitted / "run.json"), "--megatron-log", log])
    assert "writes one rank's log" in _refused(["run", "engine.dp_size=2", "--emit-megatron-log",
                                                str(tmp_path / "x.log")])
    assert "is the result's own path" in _refused(["run", *RUN, "--out", str(tmp_path / "a.json"),
                                                   "--emit-megatron-log", str(tmp_path / "a.json")])
    assert not (tmp_path / "a.json").exists()
