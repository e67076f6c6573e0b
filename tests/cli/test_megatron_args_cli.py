"""``cgbench run --megatron-args``: the translation printed, --cfg job composed from it, refusals
with exit 2 and no traceback; the idle ``cg.mixed_prefill_count`` warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cgbench.cli.app import app

runner = CliRunner()
LAUNCH = Path(__file__).resolve().parents[1] / "config" / "data" / "nemotron_h_8b_tp8.sh"


def test_cfg_job_shows_the_composed_translation_and_the_user_override_wins():
    r = runner.invoke(app, ["run", "--megatron-args", f"@{LAUNCH}", "engine.max_tokens=4096", "--cfg", "job"])
    assert r.exit_code == 0, r.output
    assert "translated   --tensor-model-parallel-size 8 -> engine.tp_size=8" in r.stderr
    assert "no effect    --lr" not in r.stderr and "no effect    --log-interval  [logging]" in r.stderr
    assert "yours wins   engine.max_tokens=4096" in r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert cfg["engine"]["tp_size"] == 8 and cfg["engine"]["max_tokens"] == 4096
    assert cfg["engine"]["kv_blocks"] == 37767 and cfg["cg"]["all_prefills"] is False
    assert cfg["model"]["layer_pattern"].count("*") == 4 and cfg["model"]["gated_mlp"] is False


def test_a_typo_and_an_unmodelled_flag_exit_2_naming_both(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "--out", str(out), "--megatron-args",
                            "--hiden-size 4096 --lr 3e-4 --num-experts 8 --moe-expert-capacity-factor 1.0"])
    assert r.exit_code == 2
    assert "--hiden-size is not a Megatron 0.19.2 argument (did you mean --hidden-size?)" in r.stderr
    assert "--moe-expert-capacity-factor is not modelled by cgbench: this mixture-of-experts feature" in r.stderr
    assert "Traceback" not in r.output and not out.exists()


@pytest.mark.slow
def test_a_small_translated_run_runs(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "--out", str(out), "--format", "json", "--megatron-args",
                            "--inference-dynamic-batching --inference-dynamic-batching-max-requests 8 "
                            "--inference-dynamic-batching-buffer-size-gb 2 --cuda-graph-impl local "
                            "--enable-chunked-prefill",
                            "model=tiny_transformer", "workload.num_requests=4"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["config"]["engine"]["chunked_prefill"] is True and doc["config"]["engine"]["max_requests"] == 8


def test_an_idle_mixed_prefill_count_is_warned_about():
    r = runner.invoke(app, ["grid", "cg.mixed_prefill_count=4"])
    assert r.exit_code == 0, r.output
    assert "cg.mixed_prefill_count=4 gives the same" in r.stderr and "changes nothing" in r.stderr
    r = runner.invoke(app, ["grid", "cg.mixed_prefill_count=4", "cg.distribution=linear"])
    assert "mixed_prefill_count" not in r.stderr  # linear sizing reads the count
