"""Model presets state their whole architecture; a partial model file is refused with the list of
what is missing (cgbench.config.model_files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cgbench.backends.sim.memory import parameters
from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.model_files import required_fields
from cgbench.config.paths import config_dir, group_options
from cgbench.config.schema import ConfigError

runner = CliRunner()
EXISTING = ("transformer", "hybrid", "transformer_70b", "tiny_transformer", "tiny_hybrid")
ALL_FIELDS = ("name", "kind", "layer_pattern", "pattern_repeat", "hidden_size", "num_attention_heads",
              "num_kv_heads", "head_dim", "ffn_hidden_size", "vocab_size", "mamba_num_heads", "mamba_head_dim",
              "mamba_state_dim", "mamba_num_groups", "mamba_conv_kernel", "dtype_bytes", "gated_mlp")


@pytest.mark.slow
@pytest.mark.parametrize("name", group_options("model"))
def test_every_shipped_preset_states_what_its_layers_use_and_cites_a_source(name):
    path = config_dir() / "model" / f"{name}.yaml"
    text = path.read_text()
    doc = yaml.safe_load(text)
    assert set(required_fields(doc["layer_pattern"])) <= {k for k, v in doc.items() if v is not None}
    assert doc["name"] == name and text.startswith("#")
    load_config([f"model={name}"])


@pytest.mark.parametrize("name", EXISTING)
def test_the_existing_presets_state_every_field_explicitly(name):
    doc = yaml.safe_load((config_dir() / "model" / f"{name}.yaml").read_text())
    assert set(ALL_FIELDS) <= set(doc) and doc["gated_mlp"] is not None


# cgbench's count prices the weights a step streams; the input embedding (vocab x hidden) is a lookup
@pytest.mark.parametrize("name,published", [("llama3_1_8b", 8.03e9), ("llama3_1_70b", 70.6e9),
                                            ("nemotron_h_8b", 8e9), ("nemotron_h_47b", 47e9),
                                            ("nemotron_h_56b", 56e9)])
def test_the_real_presets_have_their_published_parameter_counts(name, published):
    cfg = load_config([f"model={name}"])
    total = parameters(cfg) + cfg.model.vocab_size * cfg.model.hidden_size
    assert abs(total / published - 1) < 0.03, total


def test_the_nemotron_h_layer_counts_are_the_papers():
    counts = {n: load_config([f"model={n}"]).model.layers for n in ("nemotron_h_8b", "nemotron_h_56b",
                                                                    "nemotron_h_47b")}
    assert [(len(s), s.count("M"), s.count("*"), s.count("-")) for s in counts.values()] == [
        (52, 24, 4, 24), (118, 54, 10, 54), (98, 45, 5, 48)]


def _user_model(tmp_path: Path, body: str) -> Path:
    (tmp_path / "mine" / "model").mkdir(parents=True)
    (tmp_path / "mine" / "model" / "part.yaml").write_text(body)
    return tmp_path / "mine"


PARTIAL = ("name: part\nkind: transformer\nlayer_pattern: '*-'\npattern_repeat: 2\nhidden_size: 64\n"
           "num_attention_heads: 4\nnum_kv_heads: 2\nhead_dim: 16\nvocab_size: 256\ndtype_bytes: 2\n")


@pytest.mark.slow
def test_a_partial_model_file_is_refused_with_what_is_missing(tmp_path):
    conf = _user_model(tmp_path, PARTIAL + "gated_mlp: null\n")
    r = runner.invoke(app, ["run", "--config-dir", str(conf), "model=part", "--cfg", "job"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "model=part" in r.stderr and "missing: ffn_hidden_size, gated_mlp" in r.stderr
    assert "null no longer means 'by kind'" in r.stderr
    # an override supplies what the file leaves out
    cfg = load_config(["model=part", "model.ffn_hidden_size=128", "model.gated_mlp=true"], config_dirs=[conf])
    assert cfg.model.ffn_hidden_size == 128


def test_a_file_that_inherits_from_a_preset_states_what_the_preset_states(tmp_path):
    conf = _user_model(tmp_path, "defaults: [hybrid]\nname: part\nffn_hidden_size: 16384\n")
    cfg = load_config(["model=part"], config_dirs=[conf])
    assert cfg.model.ffn_hidden_size == 16384 and cfg.model.mamba_state_dim == 128


@pytest.mark.slow
def test_a_mamba_free_file_needs_no_mamba_fields(tmp_path):
    conf = _user_model(tmp_path, PARTIAL + "ffn_hidden_size: 128\ngated_mlp: true\n")
    assert load_config(["model=part"], config_dirs=[conf]).model.kind == "transformer"
    with pytest.raises(ConfigError, match="missing: mamba_num_heads, mamba_head_dim"):
        load_config(["model=part", "model.kind=hybrid", "model.layer_pattern='M*-'"], config_dirs=[conf])
