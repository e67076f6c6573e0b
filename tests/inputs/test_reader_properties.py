"""Property: every reader, fed random JSON / YAML / CSV structures (random trees, and valid
documents with one random subtree swapped in), either returns a value or raises one ConfigError
line. Any other exception, a multi-line message or a hang is a bug. The CLI is held to the same:
``compare`` and ``schedule`` on such files exit 0/1 with output, or exit 2 with one line."""

from __future__ import annotations

import copy
import csv
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.analysis.compare import load_rules
from cgbench.analysis.sweep.run import load_index
from cgbench.backends.sim.calibrated import CALIBRATION_SCHEMA, CalibrationTable
from cgbench.cli.app import app
from cgbench.config.schema import ConfigError
from cgbench.results.document import load_result
from cgbench.results.state_file import load_state
from cgbench.safeio import read_json
from cgbench.workload.trace import read_trace
from tests.helpers import examples

pytestmark = pytest.mark.slow  # a deep property search

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["schema_version", "metrics", "overrides", "config", "environment", "steps", "requests",
        "graph_usage", "schema", "model", "kind", "name", "device", "graphed", "eager", "T", "P", "D",
        "ctx", "ms", "tp_size", "rules", "better", "abs_tol", "rel_tol", "deterministic", "engine",
        "batch", "queue", "cg", "id", "prompt_tokens", "finished", "points", "file", "status",
        "arrival_s", "output_tokens", "step", "real", "hits", "max_requests", "max_tokens"]

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["lower", "higher", "exact", "hybrid", "transformer", CALIBRATION_SCHEMA, "done"]))
trees = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                     | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), c, max_size=5),
                     max_leaves=25)
PROFILE = settings(max_examples=examples(60, stretch=False), suppress_health_check=list(HealthCheck))


def _swap(base: Any, data: st.DataObject) -> Any:
    """``base`` with one random subtree replaced by a random tree."""
    doc = copy.deepcopy(base)
    node = doc
    while True:
        if isinstance(node, dict) and node:
            key = data.draw(st.sampled_from(sorted(node, key=str)))
        elif isinstance(node, list) and node:
            key = data.draw(st.integers(0, len(node) - 1))
        else:
            return data.draw(trees)
        child = node[key]
        if not isinstance(child, (dict, list)) or data.draw(st.booleans()):
            node[key] = data.draw(trees)
            return doc
        node = child


def _clean(call, *args) -> None:
    try:
        call(*args)
    except ConfigError as e:
        text = str(e)
        assert text and "\n" not in text, repr(text)


def _write(text: str, name: str) -> Path:
    # under hostile_inputs/: these files hold NaN on purpose (the strict-JSON check skips them)
    (Path.cwd() / "hostile_inputs").mkdir(exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="prop-", dir=Path.cwd() / "hostile_inputs"))
    (d / name).write_text(text, encoding="utf-8")
    return d / name


def _json(value: Any) -> str:
    return json.dumps(value)  # NaN/Infinity written as such: the readers must refuse them


@pytest.fixture(scope="module")
def bases() -> dict[str, Any]:
    from cgbench.config.compose import load_config
    from cgbench.pipeline import run_point

    result = run_point(load_config(["workload.num_requests=4"]), [], trace=True, requests=True)
    row = {"T": 64, "P": 1, "D": 0, "ctx": 0, "ms": 1.0}
    return {
        "result": json.loads(json.dumps(result)),
        "calibration": {"schema": CALIBRATION_SCHEMA, "model": {"name": "m", "kind": "hybrid"}, "device": "cpu",
                        "graphed": [row], "eager": [dict(row, P=0, D=1)]},
        "state": json.loads((ROOT / "tests/states/11_1_step1.json").read_text()),
        "rules": yaml.safe_load((ROOT / "conf/compare/default.yaml").read_text()),
        "index": {"kind": "cgbench.sweep", "name": "x", "points": [{"file": "a.json", "overrides": ["seed=1"],
                                                                     "status": "done"}]},
    }


JSON_READERS = {"result": load_result, "calibration": CalibrationTable.load, "state": load_state,
                "json": read_json}


@pytest.mark.parametrize("reader", sorted(JSON_READERS))
@PROFILE
@given(tree=trees)
def test_json_readers_on_random_trees(reader, tree):
    _clean(JSON_READERS[reader], _write(_json(tree), "x.json"))


@pytest.mark.parametrize("reader,base", [("result", "result"), ("calibration", "calibration"),
                                         ("state", "state")])
@PROFILE
@given(data=st.data())
def test_json_readers_on_valid_documents_with_a_random_subtree(reader, base, bases, data):
    _clean(JSON_READERS[reader], _write(_json(_swap(bases[base], data)), "x.json"))


@PROFILE
@given(data=st.data())
def test_sweep_index_reader(bases, data):
    path = _write(_json(_swap(bases["index"], data)), "sweep.json")
    _clean(load_index, path.parent)


@PROFILE
@given(data=st.data(), random_tree=st.booleans())
def test_rules_reader_on_random_yaml(bases, data, random_tree):
    value = data.draw(trees) if random_tree else _swap(bases["rules"], data)
    _clean(load_rules, _write(yaml.safe_dump(value), "rules.yaml"))


@PROFILE
@given(text=st.text(alphabet=st.sampled_from(list("{}[]:,-&*!|>'\"#\n 01aeE.x")), max_size=80))
def test_rules_reader_on_random_yaml_text(text):
    _clean(load_rules, _write(text, "rules.yaml"))


trace_row = st.dictionaries(st.sampled_from(["arrival_s", "prompt_tokens", "output_tokens", "x"]), trees,
                            max_size=4)


@PROFILE
@given(rows=st.lists(trace_row | trees, max_size=6))
def test_jsonl_trace_reader(rows):
    _clean(read_trace, _write("".join(_json(r) + "\n" for r in rows), "t.jsonl"))


cells = (st.text(max_size=8) | st.integers(-(2**70), 2**70).map(str) | st.floats().map(repr)
         | st.sampled_from(["arrival_s", "prompt_tokens", "output_tokens", "", '"', "1e400", "nan", "9" * 30]))


@PROFILE
@given(header=st.booleans(), rows=st.lists(st.lists(cells, max_size=4), max_size=6))
def test_csv_trace_reader(header, rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(["arrival_s", "prompt_tokens", "output_tokens"])
    w.writerows(rows)
    _clean(read_trace, _write(buf.getvalue(), "t.csv"))


runner = CliRunner()


def _one_line_or_success(r) -> None:
    assert "Traceback" not in r.output
    if r.exit_code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    else:
        assert r.exit_code in (0, 1) and r.exception is None or isinstance(r.exception, SystemExit), \
            (r.exit_code, r.exception)


@settings(max_examples=examples(25, stretch=False), suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cli_compare_on_mutated_results(bases, data):
    base = _write(_json(bases["result"]), "base.json")
    new = _write(_json(_swap(bases["result"], data)), "new.json")
    _one_line_or_success(runner.invoke(app, ["compare", str(base), str(new)]))


@settings(max_examples=examples(25, stretch=False), suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cli_schedule_on_mutated_states(bases, data):
    _one_line_or_success(runner.invoke(app, ["schedule", str(_write(_json(_swap(bases["state"], data)),
                                                                   "s.json"))]))
