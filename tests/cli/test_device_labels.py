"""A ``backend=torch`` run is labelled by the device it ran on, not by a simulated hardware preset
it never used: the header, the file name and the result's ``labels`` say ``hardware=cpu``, as its
``environment.device`` does. Simulator runs keep their preset."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cgbench.backends.torch.probe import device_kind
from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.labels import header, run_labels
from cgbench.pipeline import run_device

runner = CliRunner()


def test_sim_runs_keep_the_hardware_preset():
    cfg = load_config(["hardware=a100"])
    assert run_device(cfg) is None
    labels = run_labels(cfg, ["hardware=a100"], device=run_device(cfg))
    assert labels["hardware"] == "a100" and labels["name"].endswith("_a100")
    assert run_labels(load_config([]), [])["hardware"] == "h100"


@pytest.mark.parametrize("device,cuda,expected", [("cpu", True, "cpu"), ("cuda", False, "cuda"),
                                                  ("auto", False, "cpu"), ("auto", True, "cuda")])
def test_a_torch_run_is_labelled_by_its_device(device, cuda, expected, monkeypatch):
    import cgbench.backends.torch.probe as probe

    monkeypatch.setattr(probe, "cuda_available", lambda: cuda)
    assert device_kind(device) == expected
    ovr = ["backend=torch", f"backend.device={device}", "model=tiny_hybrid", "hardware=a100"]
    cfg = load_config(ovr)
    assert run_device(cfg) == expected
    labels = run_labels(cfg, ovr, device=run_device(cfg))
    assert labels["hardware"] == expected and f"hardware={expected}" in header(labels)
    assert labels["name"].endswith(f"_torch+device_{expected}")


def test_a_cpu_torch_run_says_cpu_in_its_header_file_name_and_document(tmp_path):
    pytest.importorskip("torch")
    r = runner.invoke(app, ["run", "backend=torch", "backend.device=cpu", "model=tiny_hybrid", "engine=small",
                            "workload.num_requests=4", f"out_dir={tmp_path}"])
    assert r.exit_code == 0, r.output
    assert "backend=torch+device hardware=cpu" in r.stdout and "h100" not in r.stdout
    (path,) = (tmp_path / "runs").glob("*.json")
    assert path.name.endswith("_torch+device_cpu.json")
    doc = json.loads(path.read_text())
    assert doc["labels"]["hardware"] == "cpu" == doc["environment"]["device"]
