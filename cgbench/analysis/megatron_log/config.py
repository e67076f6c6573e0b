"""The config a Megatron log is read against: what the user says ran (``--megatron-args``, overrides).

``cgbench explain --megatron-log`` reads a log without one (the grid then comes from the log itself,
and nothing is priced); ``cgbench calibrate --megatron-log`` needs the model. The what-ifs
(``--what-if OVERRIDES``) are composed on top of the same config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from cgbench.config.schema import BenchConfig, ConfigError, PolicyConfig


@dataclass
class LogConfig:
    """``cfg`` is None when the user named nothing; ``text`` says where it came from."""

    cfg: BenchConfig | None
    overrides: list[str] = field(default_factory=list)
    text: str = ""
    translation: str = ""  # --megatron-args' translation, to print
    model_named: bool = False  # the model was named (not the default one)


def log_config(overrides: list[str], megatron_args: str | None, config_dirs: list[Path]) -> LogConfig:
    """The config of ``--megatron-args`` and ``overrides`` (the user's win), or none when neither is given."""
    from cgbench.config.compose import load_config
    from cgbench.config.overrides import override_key

    if megatron_args is None and not overrides:
        return LogConfig(None)
    ovr, translation = list(overrides), ""
    if megatron_args is not None:
        from cgbench.config.megatron_args import with_megatron_args

        ovr, translation = with_megatron_args(megatron_args, ovr, config_dirs=config_dirs)
    cfg = load_config(ovr, config_dirs=config_dirs)
    if cfg.backend.name != "sim":
        raise ConfigError("--megatron-log: the log is read against the simulator's model (backend=sim)")
    parts = (["--megatron-args"] if megatron_args is not None else []) + list(overrides)
    named = megatron_args is not None or any(override_key(o).split(".")[0] == "model" for o in overrides)
    return LogConfig(cfg, ovr, " ".join(parts), translation, named)


def what_if_configs(base: LogConfig, what_ifs: list[str], config_dirs: list[Path]) -> list[tuple[str, BenchConfig]]:
    """Each ``--what-if`` (space-separated overrides) composed on the base config; with none given,
    #4870's gating (``policy=megatron cg.all_prefills=true``) when the base does not gate already."""
    from cgbench.config.compose import load_config

    if base.cfg is None:
        if what_ifs:
            raise ConfigError("--what-if: needs the config the log ran (--megatron-args or --override): a grid is "
                              "built for a model and the engine's limits")
        return []
    out = []
    for text in what_ifs:
        words = text.split()
        if not words:
            raise ConfigError("--what-if: give overrides, e.g. --what-if 'cg=dense'")
        out.append((text, load_config(base.overrides + words, config_dirs=config_dirs)))
    if not what_ifs and base.cfg.policy.name == "budget":
        gated = replace(base.cfg, policy=PolicyConfig(name="megatron"), cg=replace(base.cfg.cg, all_prefills=True))
        out.append(("policy=megatron cg.all_prefills=true (#4870's gating)", gated))
    return out
