"""``cgbench run --info``: where a config comes from, as Hydra's ``--info`` tells it: the config
search path (the shipped tree, then ``$CGBENCH_CONFIG_DIR``'s and ``--config-dir``'s folders) and the
defaults list as composed (each group's option, the file that defines it and what chose it: the
default, the command line, a preset's own defaults list, or an experiment)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cgbench.config.labels import (
    EXPERIMENT,
    LABEL_GROUPS,
    default_options,
    option_file,
    preset_choices,
    preset_overrides,
)
from cgbench.config.overrides import split_override
from cgbench.config.paths import ENV_CONFIG_DIR, config_dir, user_config_dirs


def search_path(config_dirs: Sequence[str | Path] = ()) -> list[dict[str, str]]:
    """The folders Hydra searches, in order, each with what put it there."""
    env = {str(Path(p).expanduser().resolve()) for p in os.environ.get(ENV_CONFIG_DIR, "").split(os.pathsep)
           if p.strip()}
    out = [{"path": str(config_dir()), "provider": "cgbench (shipped)"}]
    for d in user_config_dirs(config_dirs):
        out.append({"path": str(d), "provider": ENV_CONFIG_DIR if str(d) in env else "--config-dir"})
    return out


def defaults_list(overrides: Sequence[str]) -> list[dict[str, Any]]:
    """Each group's option in the composed defaults list, its file and what chose it."""
    typed: dict[str, str] = {}
    experiment = None
    for o in overrides:
        key, value = split_override(o)
        if key in LABEL_GROUPS:
            typed[key] = value
        elif key == EXPERIMENT:
            experiment = value
    chosen = {**default_options(), **typed}
    by_preset: dict[str, str] = {}
    for group, option in chosen.items():
        for g in preset_overrides(group, option):
            by_preset[g] = f"{group}={option}'s defaults list"
    picked = preset_choices(chosen)
    if experiment is not None:
        for g, v in preset_overrides(EXPERIMENT, experiment).items():
            picked[g] = v
            by_preset[g] = f"+experiment={experiment}"
    rows = []
    for group in LABEL_GROUPS:
        option = typed.get(group) or picked.get(group) or chosen.get(group)
        if option is None:
            continue
        why = "command line" if group in typed else by_preset.get(group, "default (conf/config.yaml)")
        file = option_file(group, option)
        rows.append({"group": group, "option": option, "file": str(file) if file else None, "from": why})
    if experiment is not None:
        file = option_file(EXPERIMENT, experiment)
        rows.append({"group": EXPERIMENT, "option": experiment, "file": str(file) if file else None,
                     "from": "command line (+experiment, # @package _global_)"})
    return rows


def config_info(overrides: Sequence[str], config_dirs: Sequence[str | Path] = ()) -> dict[str, Any]:
    from cgbench import __version__

    return {"cgbench_version": __version__, "search_path": search_path(config_dirs),
            "defaults": defaults_list(overrides), "overrides": list(overrides)}
