"""The checks of a composition that need no Hydra: override keys against the schema, the keys a
config leaves unread, and relative data paths resolved.

``cgbench.config.compose`` runs them around a Hydra composition, and ``cgbench.config.load`` around a
composition read back from the cache (``cgbench.config.compose_cache``), which imports no Hydra."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path

from cgbench.config.labels import EXPERIMENT
from cgbench.config.overrides import override_key, override_value
from cgbench.config.paths import GROUPS, data_roots
from cgbench.config.plugin_schema import plugins_named, schema_types
from cgbench.config.schema import BenchConfig, ConfigError, unread_keys, unread_reason

__all__ = ["check_override_keys", "check_read", "is_hydra_key", "known_keys", "resolve_paths"]



def _fields(cls: type, prefix: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted key, is_open_mapping) for every field of a schema dataclass, records included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield key, False
            yield from _fields(tp, key + ".")
        else:
            yield key, typing.get_origin(tp) is dict


@lru_cache(maxsize=8)
def known_keys(schema: type[BenchConfig] = BenchConfig) -> tuple[frozenset[str], frozenset[str]]:
    """(every dotted key of the schema, the keys that are open mappings such as ``sweep.params``)."""
    keys, open_maps = set(), set()
    for key, is_map in _fields(schema):
        keys.add(key)
        if is_map:
            open_maps.add(key)
    return frozenset(keys), frozenset(open_maps)


def _closest(key: str, schema: type[BenchConfig]) -> str:
    keys, _ = known_keys(schema)
    match = difflib.get_close_matches(key, sorted(keys | set(GROUPS)), n=1, cutoff=0.6)
    if not match:  # a typo in the last part: compare within the same record
        head, _, tail = key.rpartition(".")
        siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == head]
        near = difflib.get_close_matches(tail, siblings, n=1, cutoff=0.5)
        match = [f"{head}.{near[0]}"] if near else []
    return f"; did you mean {match[0]}?" if match else ""


def is_hydra_key(key: str) -> bool:
    """Whether an override key is one of Hydra's own settings (``hydra.*``, ``hydra/*``)."""
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def _hydra_refusal(o: str, key: str) -> str:
    if key == "hydra.launcher.n_jobs":  # joblib's pool size
        return (f"{o}: Hydra launchers are replaced by cgbench's executors: cgbench sweep --jobs "
                f"{override_value(o) or 'N'} (local worker processes; see cgbench docs sweeps)")
    if key.startswith("hydra.launcher."):
        setting = f"{key.removeprefix('hydra.launcher.')}={override_value(o)}"
        return (f"{o}: Hydra launchers are replaced by cgbench's executors: cgbench sweep --executor slurm "
                f"--slurm {setting} (submitit's parameters), or --jobs N for local worker processes "
                "(see cgbench docs sweeps)")
    if key.startswith(("hydra/launcher", "hydra.launcher")):
        return (f"{o}: Hydra launchers are replaced by cgbench's executors: cgbench sweep --jobs N (worker "
                "processes) or --executor slurm --slurm KEY=VALUE (submitit's parameters; see cgbench docs sweeps)")
    return f"{o}: Hydra's own settings are not used by cgbench (results go to out_dir=DIR, a sweep to --out DIR)"


def check_override_keys(overrides: Sequence[str]) -> None:
    """Refuse unknown keys (with or without ``+``), ``~`` deletions and Hydra's own settings; each
    with one line naming the override. Keys of the plug-in policies the overrides name are known keys."""
    schema = schema_types(plugins_named(overrides))[1]
    keys, open_maps = known_keys(schema)
    for o in overrides:
        key = override_key(o)
        if is_hydra_key(key):
            raise ConfigError(_hydra_refusal(o, key))
        if o.lstrip().startswith("~"):
            raise ConfigError(f"{o}: removing a key is not supported (the schema keeps every key); "
                              f"set a value instead, e.g. {key}=<value>")
        if "/" in key:
            raise ConfigError(f"{key}: not a config group (groups: {', '.join(GROUPS)})")
        if key == EXPERIMENT:
            _check_experiment(o)
            continue
        if key in GROUPS or key in keys or any(key.startswith(m + ".") for m in open_maps):
            continue
        raise ConfigError(f"{key}: unknown key{_closest(key, schema)}")


def _check_experiment(o: str) -> None:
    """``+experiment=NAME`` (Hydra's experiment pattern): ``experiment/NAME.yaml`` of a user config
    folder, ``# @package _global_``, its defaults list overriding groups (``- override /model: hybrid``)
    and its keys set anywhere. Added to the defaults list, so it needs the ``+``."""
    if not o.lstrip().startswith("+"):
        raise ConfigError(f"{o}: an experiment is added to the defaults list: +{o.strip()} (Hydra's experiment "
                          "pattern: experiment/NAME.yaml in a --config-dir folder)")
    if not override_value(o).strip():
        raise ConfigError(f"{o}: name an experiment (a file experiment/NAME.yaml of a --config-dir folder)")


def check_read(cfg: BenchConfig, overrides: Sequence[str]) -> None:
    unread = unread_keys(cfg)
    for o in overrides:
        key = override_key(o)
        if key in GROUPS or key == EXPERIMENT:
            continue
        why = unread_reason(key, unread)
        if why is not None:
            raise ConfigError(f"{key}: not read with {why}; remove it or choose the option that reads it")




def resolve_paths(cfg: BenchConfig) -> None:
    """Relative data paths resolve against the working directory, else ``data_roots()`` (so
    ``workload=trace`` finds the example traces from anywhere, in a checkout or a wheel)."""
    for holder, key in ((cfg.workload, "trace"), (cfg.backend, "calibration")):
        value = getattr(holder, key)
        if not value or Path(value).is_absolute() or Path(value).exists():
            continue
        for root in data_roots():
            candidate = root / value
            if candidate.exists():
                setattr(holder, key, str(candidate))
                break
