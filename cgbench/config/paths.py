"""Where configs and data live (no Hydra import: ``cgbench --help`` lists options from here).

The shipped tree (``cgbench/conf`` in a wheel, ``<checkout>/conf`` in a checkout) is always the
primary tree. Folders named by ``$CGBENCH_CONFIG_DIR`` (several joined with ``os.pathsep``) and by
``--config-dir`` are searched after it, so ``<dir>/model/my70b.yaml`` adds ``model=my70b``. A user
file named like a shipped one (and different from it) is refused: it could never take effect.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from cgbench.config.schema import ConfigError

GROUPS = ("model", "cg", "workload", "policy", "engine", "backend", "hardware", "sweep")
ENV_CONFIG_DIR = "CGBENCH_CONFIG_DIR"


def config_dir() -> Path:
    """The shipped config tree: the packaged ``cgbench/conf`` (wheel), else ``<checkout>/conf``."""
    packed = resources.files("cgbench") / "conf"
    if packed.is_dir():
        return Path(str(packed))
    return Path(__file__).resolve().parents[2] / "conf"


def user_config_dirs(extra: Sequence[str | Path] = ()) -> list[Path]:
    """Extra config folders: ``$CGBENCH_CONFIG_DIR`` entries, then ``extra`` (``--config-dir``)."""
    env = [p for p in os.environ.get(ENV_CONFIG_DIR, "").split(os.pathsep) if p.strip()]
    primary = config_dir().resolve()
    dirs: list[Path] = []
    for raw, source in [(p, ENV_CONFIG_DIR) for p in env] + [(p, "--config-dir") for p in extra]:
        d = Path(raw).expanduser().resolve()
        if not d.is_dir():
            raise ConfigError(f"{source}: {raw}: no such folder")
        if d != primary and d not in dirs:
            _refuse_shadowing(d, primary, source)
            dirs.append(d)
    return dirs


def _refuse_shadowing(d: Path, primary: Path, source: str) -> None:
    """A user file named like a shipped one would be silently ignored (the shipped tree is searched
    first): refuse it unless it is an unchanged copy."""
    for mine in sorted(d.rglob("*.yaml")):
        shipped = primary / mine.relative_to(d)
        if shipped.is_file() and shipped.read_bytes() != mine.read_bytes():
            rel = mine.relative_to(d)
            name = f"{rel.parent}={rel.stem}" if rel.parent != Path(".") else rel.name
            raise ConfigError(f"{source}: {mine} differs from the shipped {name}, which takes precedence; "
                              f"give your file a new name (e.g. {rel.parent / ('my_' + rel.name)})")


def group_options(group: str, config_dirs: Sequence[str | Path] = ()) -> list[str]:
    """The option names of one config group (YAML files in ``<tree>/<group>/`` over the search path)."""
    names: set[str] = set()
    for d in [config_dir(), *user_config_dirs(config_dirs)]:
        names.update(p.stem for p in (d / group).glob("*.yaml"))
    return sorted(names)


def data_roots() -> list[Path]:
    """Where relative data paths (traces, calibration tables) are looked up after the working
    directory: user config folders' parents, the shipped tree's parent (the installed ``cgbench``
    package, which holds ``examples/traces``), and the checkout's root."""
    roots = [d.parent for d in user_config_dirs()] + [config_dir().parent, Path(__file__).resolve().parents[2]]
    return list(dict.fromkeys(roots))
