"""The one module that knows Hydra: config discovery, composition, sweep expansion.

Everything else receives plain ``cgbench.config.schema`` dataclasses.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cgbench.config.limits import check_sweep_axis, check_sweep_points, validate_within_limits
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.safeio import require_cwd

GROUPS = ("model", "cg", "workload", "policy", "engine", "backend", "hardware", "sweep")

ConfigStore.instance().store(name="cgbench_schema", node=BenchConfig)


def config_dir() -> Path:
    """``$CGBENCH_CONFIG_DIR``, else the packaged ``cgbench/conf`` (wheel), else ``<repo>/conf``."""
    if env := os.environ.get("CGBENCH_CONFIG_DIR"):
        return Path(env).resolve()
    packed = resources.files("cgbench") / "conf"
    if packed.is_dir():
        return Path(str(packed))
    return Path(__file__).resolve().parents[2] / "conf"


@contextmanager
def _hydra() -> Iterator[None]:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name="cgbench"):
        yield


def _error_text(e: BaseException) -> str:
    """Hydra/OmegaConf errors as one line: the message, the cause, the available options."""
    text = str(e).strip()
    cause = e.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text = f"{text}: {str(cause).strip()}"
    text = text.split("Config search path")[0]
    parts: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        if line.startswith("\t"):
            options.append(line.strip())
        elif line.strip() and not line.strip().startswith(("object_type", "reference_type")):
            parts.append(line.strip())
    msg = " ".join(parts) if parts else "invalid configuration"
    if options:
        msg = f"{msg} {', '.join(options)}"
    return msg


def compose_dict(overrides: list[str]) -> DictConfig:
    """Compose ``conf/config.yaml`` with overrides; config errors become ConfigError."""
    require_cwd()  # Hydra reads the working directory; a deleted one is one clear line
    try:
        with _hydra():
            cfg = compose(config_name="config", overrides=list(overrides))
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        return cfg
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise ConfigError(_error_text(e)) from e


def load_config(overrides: list[str] | None = None) -> BenchConfig:
    """Compose, convert to typed dataclasses and validate cross-field rules."""
    return to_bench_config(compose_dict(list(overrides or [])))


def to_bench_config(cfg: DictConfig) -> BenchConfig:
    """A composed DictConfig (from compose or a ``@hydra.main`` job) as validated dataclasses."""
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(_error_text(e)) from e
    assert isinstance(obj, BenchConfig)
    _resolve_paths(obj)
    return validate_within_limits(obj)  # finiteness, names, sizes, validate(), resource estimates


def _resolve_paths(cfg: BenchConfig) -> None:
    """Relative data paths resolve against the working directory, else the checkout's root
    (so ``workload=trace`` finds ``examples/traces/`` from anywhere in a checkout)."""
    for holder, key in ((cfg.workload, "trace"), (cfg.backend, "calibration")):
        value = getattr(holder, key)
        if not value or Path(value).is_absolute() or Path(value).exists():
            continue
        candidate = config_dir().parent / value
        if candidate.exists():
            setattr(holder, key, str(candidate))


def group_options(group: str) -> list[str]:
    """The option names of one config group (the YAML files in ``conf/<group>/``)."""
    d = config_dir() / group
    return sorted(p.stem for p in d.glob("*.yaml"))


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Hydra sweep syntax -> the Cartesian product of override lists (first key varies slowest,
    as Hydra's BasicSweeper). ``a=1,2``, ``range()``, ``choice()`` and ``glob()`` are supported."""
    axes: list[list[str]] = []
    try:
        with _hydra():
            loader = GlobalHydra.instance().hydra.config_loader  # type: ignore[union-attr]
            parsed = OverridesParser.create(config_loader=loader).parse_overrides(list(overrides))
            seen: set[str] = set()
            for o in parsed:
                key = o.get_key_element()
                if key in seen:
                    raise ConfigError(f"{key}: given more than once in the sweep")
                seen.add(key)
                if o.is_sweep_override():
                    if not o.is_discrete_sweep():
                        raise ConfigError(f"{key}: interval() sweeps are not supported; list values instead")
                    check_sweep_axis(key, o.value())  # a zero step, an endless or huge range
                    values = [f"{key}={v}" for v in o.sweep_string_iterator()]
                    if not values:
                        raise ConfigError(f"{key}: the sweep has no values")
                    axes.append(values)
                else:
                    axes.append([f"{key}={o.get_value_element_as_str()}"])
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_error_text(e)) from e
    check_sweep_points(axes)
    return [list(p) for p in itertools.product(*axes)]


def sweep_overrides_from_config(params: dict[str, str]) -> list[str]:
    """``sweep.params`` (key -> sweep value) as Hydra override strings."""
    return [f"{k}={v}" for k, v in params.items()]
