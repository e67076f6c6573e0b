"""Where configs and data live (no Hydra import: ``cgbench --help`` lists options from here).

The shipped tree (``cgbench/conf`` in a wheel, ``<checkout>/conf`` in a checkout) is always the
primary tree. Folders named by ``$CGBENCH_CONFIG_DIR`` (several joined with ``os.pathsep``) and by
``--config-dir`` are searched after it, so ``<dir>/model/my70b.yaml`` adds ``model=my70b``. A user
file named like a shipped one (and different from it) is refused: it could never take effect.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path

from cgbench.errors import ConfigError

MAX_CONFIG_FILE_BYTES = 1024 * 1024  # an option file is a few hundred bytes
MAX_CONFIG_FILES = 10_000  # YAML files in one user tree
MAX_YAML_EVENTS = 100_000  # parser events in one option file (a 1 MiB file has far fewer)

GROUPS = ("model", "cg", "workload", "policy", "engine", "backend", "hardware", "sweep")
ENV_CONFIG_DIR = "CGBENCH_CONFIG_DIR"


@cache  # where the package is does not change in a process; asked a dozen times a sweep point
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
            files = check_user_tree(d, source)
            _refuse_shadowing(d, primary, source, files)
            dirs.append(d)
    return dirs


# a tree already checked, by the (name, inode, size, mtime) of each of its YAML entries
_checked: dict[Path, tuple] = {}


def _yaml_entries(d: Path, source: str) -> list[Path]:
    """Every ``*.yaml`` entry under ``d`` (files, links, anything so named), symlinked folders not
    followed, at most ``MAX_CONFIG_FILES``."""
    found: list[Path] = []
    for root, subdirs, names in os.walk(d, followlinks=False):
        subdirs.sort()
        for name in sorted(names + [s for s in subdirs if s.endswith(".yaml")]):
            if name.endswith(".yaml"):
                found.append(Path(root) / name)
                if len(found) > MAX_CONFIG_FILES:
                    raise ConfigError(f"{source}: {d}: more than {MAX_CONFIG_FILES:,} YAML files")
    return found


def check_user_tree(d: Path, source: str) -> list[Path]:
    """Refuse a user tree that Hydra could not read safely (module docstring); returns its YAML files."""
    import stat

    files = _yaml_entries(d, source)
    signature = []
    for f in files:
        try:
            st = os.stat(f)  # follows links: a link to /dev/zero is a character device
        except FileNotFoundError:
            raise ConfigError(f"{source}: {f}: a dangling link (its target does not exist)") from None
        except OSError as e:
            raise ConfigError(f"{source}: {f}: cannot read: {(e.strerror or str(e)).lower()}") from None
        if not stat.S_ISREG(st.st_mode):
            from cgbench.safeio import kind_of

            raise ConfigError(f"{source}: {f}: is {kind_of(st.st_mode)}, not a regular file")
        signature.append((str(f), st.st_ino, st.st_size, st.st_mtime_ns))
    key = tuple(signature)
    if _checked.get(d) != key:
        problems: dict[Path, str] = {}
        for f in files:
            try:
                check_option_file(f)
            except ConfigError as e:  # refused once a command may read it (check_files_read)
                problems[f] = str(e)
        _checked[d] = key
        _problems[d] = problems
    return files


# a tree's files whose content is refused, by folder: Hydra reads only the files a config selects,
# so a bad file no command line names is no reason to refuse the folder
_problems: dict[Path, dict[Path, str]] = {}


def _names(value: str) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z0-9_.\-]+", value))


def check_files_read(dirs: Sequence[Path], overrides: Sequence[str]) -> None:
    """Refuse the first file of ``dirs`` with refused content (``check_option_file``) that composing
    ``overrides`` may read: a file at a tree's top, an option an override selects (``GROUP=NAME``, a
    sweep's list, a ``glob``), or one any other YAML file of the trees names (a defaults list)."""
    from cgbench.safeio import read_text

    bad = {f: why for d in dirs for f, why in _problems.get(d, {}).items()}
    if not bad:
        return
    selected: dict[str, set[str]] = {}
    named: set[str] = set()  # any override's value names it (a nested group's option, say)
    for o in overrides:
        key, _, value = o.partition("=")
        group = key.lstrip("+~").strip()
        selected.setdefault(group, set()).update({"*"} if "glob(" in value else _names(value))
        named |= _names(value)
    others: set[str] = set()
    for d in [config_dir(), *dirs]:
        for f in d.rglob("*.yaml"):
            if f not in bad and f.is_file():
                try:
                    others |= _names(read_text(f, max_bytes=MAX_CONFIG_FILE_BYTES))
                except ConfigError:
                    continue
    for f, why in bad.items():
        root = next(d for d in dirs if d in f.parents)
        group = f.parent.relative_to(root).as_posix()
        names = selected.get(group, set())
        if group == "." or f.stem in names or "*" in names or f.stem in named or f.stem in others:
            raise ConfigError(why)


def yaml_tree_signature(dirs: Sequence[Path]) -> tuple:
    """Each YAML file under ``dirs`` by (folder, name, inode, size, mtime): a change of any file, or
    one added or removed, changes it (what a cache of compositions must notice). A linked folder is
    entered (Hydra composes through it), each real folder once (a link can close a loop)."""
    signature = []
    for d in dirs:
        seen: set[str] = set()
        for root, subdirs, names in os.walk(d, followlinks=True):
            real = os.path.realpath(root)
            if real in seen:
                subdirs[:] = []
                continue
            seen.add(real)
            subdirs.sort()
            for name in sorted(names):
                if name.endswith(".yaml"):
                    try:
                        st = os.stat(os.path.join(root, name))
                    except OSError:
                        st = None
                    signature.append((root, name, *((st.st_ino, st.st_size, st.st_mtime_ns) if st else ())))
    return tuple(signature)


def check_option_file(path: Path) -> None:
    """One user option file: bounded in bytes, nodes and depth, UTF-8, YAML without aliases
    (``check_user_tree``)."""
    import yaml

    from cgbench.safeio import read_text, yaml_events

    where = str(path)  # named as Hydra's own errors in a user file are (cgbench.config.suggest)
    text = read_text(path, max_bytes=MAX_CONFIG_FILE_BYTES)
    try:
        for event in yaml_events(text, where, MAX_YAML_EVENTS):  # bounded in depth too: in time
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark is not None else 0
                raise ConfigError(f"{where}:{line}: YAML alias *{event.anchor}: aliases are not supported in "
                                  "config files (write the value out)")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}{line}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None


def _refuse_shadowing(d: Path, primary: Path, source: str, files: list[Path]) -> None:
    """A user file named like a shipped one would be silently ignored (the shipped tree is searched
    first): refuse it unless it is an unchanged copy."""
    for mine in files:
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
