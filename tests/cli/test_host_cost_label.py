"""Which host cost priced a run, said where the user reads it: the run header and the result's
``labels.host_cost`` name the µs per op and where it came from (the megatron profile's default, a
``--host`` calibration file, an override, another profile), and the docs state the default's one
provenance with the range ``--sensitivity`` uses (docs/cost-model.md, "Host cost per engine")."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from cgbench.backends.sim.calibrated import HostCalibration
from cgbench.backends.sim.factory import host_cost_label
from cgbench.backends.sim.host_profiles import DEFAULT_HOST_OP_US, HOST_OP_RANGE_US, MEGATRON, VLLM
from cgbench.backends.sim.uncertainty import by_key
from cgbench.cli.app import app
from cgbench.config.compose import load_config

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
RUN = ["run", "model=tiny_transformer", "workload.num_requests=4"]


def _run(tmp_path: Path, *overrides: str) -> tuple[str, dict]:
    out = tmp_path / f"r{len(list(tmp_path.glob('*.json')))}.json"
    r = runner.invoke(app, [*RUN, *overrides, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return r.stdout, json.loads(out.read_text())


def test_the_default_host_cost_is_named_in_the_header_and_the_labels(tmp_path: Path) -> None:
    stdout, doc = _run(tmp_path)
    label = doc["labels"]["host_cost"]
    assert label.startswith(f"{DEFAULT_HOST_OP_US:g} µs/op, the megatron profile's default")
    assert f"{HOST_OP_RANGE_US[0]:g}-{HOST_OP_RANGE_US[1]:g}" in label
    assert f"host: {label}" in stdout.splitlines()[0]  # the header line, before the table


def test_a_calibration_file_an_override_and_a_profile_are_each_named(tmp_path: Path) -> None:
    cal = tmp_path / "host.json"
    cal.write_text(json.dumps(HostCalibration(8.51, "Intel Xeon (Linux, Python 3.11)").to_dict()))
    _, doc = _run(tmp_path, f"hardware.host_calibration={cal}")
    assert doc["labels"]["host_cost"] == f"8.51 µs/op from hardware.host_calibration={cal} " \
                                         "(measured on Intel Xeon (Linux, Python 3.11))"
    _, doc = _run(tmp_path, "hardware.host_op_us=2.0")
    assert doc["labels"]["host_cost"] == "2 µs/op set by hardware.host_op_us (megatron profile's op counts)"
    _, doc = _run(tmp_path, "hardware.host_profile=vllm")
    assert doc["labels"]["host_cost"].startswith(f"{VLLM.op_us:g} µs/op, the vllm profile's")


def test_a_calibrated_cost_model_has_no_host_cost() -> None:
    cfg = load_config([])
    calibrated = dataclasses.replace(cfg.backend, cost_model="calibrated")
    assert host_cost_label(calibrated, cfg.hardware).startswith("none: backend.cost_model=calibrated")


def test_sensitivity_varies_the_host_cost_over_the_stated_range() -> None:
    p = by_key()["hardware.host_op_us"]
    assert (p.low, p.high) == HOST_OP_RANGE_US and p.low < MEGATRON.op_us < p.high
    assert p.bounds(load_config([])) == HOST_OP_RANGE_US


def test_the_docs_state_one_provenance_for_the_default() -> None:
    lo, hi = HOST_OP_RANGE_US
    for doc in ("README.md", "docs/cost-model.md", "docs/sensitivity.md"):
        text = (ROOT / doc).read_text()
        assert "2-core AMD EPYC VM" in text, doc
        assert f"{lo:g}–{hi:g} µs" in text, doc
        for stale in ("measured on a server core", "a 2-core x86 VM", "Megatron's measured", "3.0 – 10.3"):
            assert stale not in text, (doc, stale)
