"""A model file states its whole architecture: no field silently takes a generic default.

The ``ModelConfig`` dataclass keeps defaults for library users, but a ``model=NAME`` file (shipped or
in a user's ``--config-dir``) that leaves out a field its layers use, or sets it to null, is refused
with the list of what is missing. What each layer kind uses:

* always: ``name``, ``kind``, ``layer_pattern``, ``pattern_repeat``, ``hidden_size``, ``vocab_size``,
  ``dtype_bytes``;
* attention ``*``: ``num_attention_heads``, ``num_kv_heads``, ``head_dim``;
* MLP ``-``: ``ffn_hidden_size`` and ``gated_mlp`` (true: SwiGLU, 3 matrices; false: 2 matrices,
  squared-ReLU / GeLU). ``gated_mlp: null`` ("by kind") is refused in a file: say which MLP it is;
* Mamba-2 ``M``: ``mamba_num_heads``, ``mamba_head_dim``, ``mamba_state_dim``, ``mamba_num_groups``,
  ``mamba_conv_kernel``;
* MoE ``E``: ``num_experts``, ``experts_per_token``, ``moe_ffn_hidden_size``, ``moe_shared_experts``,
  ``moe_shared_expert_ffn_hidden_size`` (0 without shared experts) and ``gated_mlp`` (the experts' FFN).

A file that inherits (``defaults: [hybrid]``) states what it and its parents state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cgbench.config.overrides import override_key, override_value
from cgbench.config.paths import config_dir, user_config_dirs
from cgbench.errors import ConfigError

ALWAYS = ("name", "kind", "layer_pattern", "pattern_repeat", "hidden_size", "vocab_size", "dtype_bytes")
BY_LAYER = {
    "*": ("num_attention_heads", "num_kv_heads", "head_dim"),
    "-": ("ffn_hidden_size", "gated_mlp"),
    "M": ("mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups", "mamba_conv_kernel"),
    "E": ("num_experts", "experts_per_token", "moe_ffn_hidden_size", "moe_shared_experts",
          "moe_shared_expert_ffn_hidden_size", "gated_mlp"),
}
DEFAULT_MODEL = "hybrid"  # conf/config.yaml's defaults list
_MAX_DEPTH = 8


def required_fields(layer_pattern: str) -> list[str]:
    out = list(ALWAYS)
    for symbol, keys in BY_LAYER.items():
        if symbol in layer_pattern:
            out += [k for k in keys if k not in out]
    return out


def model_file(name: str, config_dirs: Sequence[str | Path] = ()) -> Path | None:
    for d in [config_dir(), *user_config_dirs(config_dirs)]:
        path = d / "model" / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def stated_fields(path: Path, config_dirs: Sequence[str | Path] = (), depth: int = 0) -> dict[str, Any]:
    """The non-null fields ``path`` states, with those of the files it inherits from (its own win)."""
    import yaml  # ~10 ms: only a model file asked about is read

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        return {}
    stated: dict[str, Any] = {}
    for parent in doc.get("defaults", []) if depth < _MAX_DEPTH else []:
        name = parent if isinstance(parent, str) else None
        found = model_file(name, config_dirs) if name and name != "_self_" else None
        if found is not None and found != path:
            stated.update(stated_fields(found, config_dirs, depth + 1))
    stated.update({k: v for k, v in doc.items() if k != "defaults" and v is not None})
    return stated


def chosen_model(overrides: Sequence[str]) -> str:
    name = DEFAULT_MODEL
    for o in overrides:
        if override_key(o) == "model" and not o.lstrip().startswith("~"):
            name = override_value(o).strip()
    return name


def check_model_file(overrides: Sequence[str], config_dirs: Sequence[str | Path] = ()) -> None:
    """Refuse a chosen model file that does not state every field its layers use (module docstring).
    Fields typed as overrides (``model.ffn_hidden_size=...``) count as stated."""
    name = chosen_model(overrides)
    path = model_file(name, config_dirs)
    if path is None:
        return  # Hydra has refused an unknown option already
    stated = stated_fields(path, config_dirs)
    for o in overrides:
        key = override_key(o)
        if key.startswith("model.") and override_value(o).strip().lower() not in ("null", "~", ""):
            stated[key.removeprefix("model.")] = override_value(o)
    pattern = str(stated.get("layer_pattern", "M*-"))
    missing = [k for k in required_fields(pattern) if k not in stated]
    if missing:
        hint = ("; gated_mlp: true (SwiGLU, 3 matrices) or false (2 matrices) — null no longer means "
                "'by kind'" if "gated_mlp" in missing else "")
        raise ConfigError(f"model={name} ({path}): a model file states every field its layers use; "
                          f"missing: {', '.join(missing)}{hint}")
