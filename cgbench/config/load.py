"""A command's config: read back from the kept compositions (``cgbench.config.compose_cache``) when
this exact composition was made before, else composed by Hydra (``cgbench.config.compose``, imported
only then) and kept.

The commands load their config here; ``compose.load_config`` (the Python API, and the many loads of
one process: advise's candidates, the test suite) composes in the process, through its shared
``Composer``, and keeps nothing on disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cgbench.config import compose_cache
from cgbench.config.limits import validate_within_limits
from cgbench.config.model_files import check_model_file, chosen_model, model_file
from cgbench.config.override_checks import check_override_keys, check_read, resolve_paths
from cgbench.config.paths import config_dir, user_config_dirs
from cgbench.config.registry.plugin_files import plugin_folders
from cgbench.config.schema import BenchConfig
from cgbench.safeio import require_cwd

__all__ = ["check_read_back", "load_config"]


def load_config(overrides: list[str] | None = None, *, config_dirs: Sequence[str | Path] = ()) -> BenchConfig:
    """What ``cgbench.config.compose.load_config`` returns (or raises) for these overrides."""
    ovr = list(overrides or [])
    with plugin_folders(config_dirs):
        key = compose_cache.entry_key(ovr, config_dirs)
        kept = compose_cache.read(key) if key is not None else None
        if kept is not None:
            return check_read_back(kept, ovr, config_dirs)
        from cgbench.config.compose import load_config_recorded

        cfg, typed = load_config_recorded(ovr, config_dirs=config_dirs)
        if key is not None and typed is not None:
            compose_cache.write(key, typed)
        return cfg


def check_read_back(cfg: BenchConfig, overrides: list[str], config_dirs: Sequence[str | Path],
                    keyed_models: dict[str, bool] | None = None) -> BenchConfig:
    """The steps of a fresh ``load_config`` around its composition, in its order: the keys (the rest of
    its checks before composing passed with this input when the composition was kept), then the paths,
    the limits and validation, the unread keys and the model file. The model-file check passed when the
    entry was kept and reads only the overrides and the chosen model file, so it is repeated only for a
    file the entry's key does not hold (one outside the config folders, through a link or ``..``): the
    key holds the bytes of every YAML file in them, and reading the file again costs PyYAML's import.
    ``keyed_models``: whether each model's file is so held, kept by a caller that reads many configs back
    from one state of the trees (a sweep's points)."""
    check_override_keys(overrides)
    require_cwd()  # what Hydra would have met first: a working directory deleted meanwhile
    resolve_paths(cfg)
    cfg = validate_within_limits(cfg)
    check_read(cfg, overrides)
    if keyed_models is None:
        keyed = _model_file_keyed(overrides, config_dirs)
    else:
        name = chosen_model(overrides)
        keyed = keyed_models.get(name)
        if keyed is None:
            keyed = keyed_models[name] = _model_file_keyed(overrides, config_dirs)
    if not keyed:
        check_model_file(overrides, config_dirs)
    return cfg


def _model_file_keyed(overrides: list[str], config_dirs: Sequence[str | Path]) -> bool:
    path = model_file(chosen_model(overrides), config_dirs)
    if path is None:
        return True  # no file to read: the check returns at once
    real = path.resolve()
    return any(real.is_relative_to(tree.resolve()) for tree in [config_dir(), *user_config_dirs(config_dirs)])
