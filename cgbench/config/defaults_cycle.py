"""A Hydra defaults list that includes itself, or a cycle of config files that include each other:
Hydra recurses until Python's RecursionError. ``compose`` catches that error and names the cycle
found here, in one line: ``model/a.yaml -> model/b.yaml -> model/a.yaml``.

The includes are read as Hydra resolves them within a config tree: in ``GROUP/x.yaml`` a plain
entry ``y`` is ``GROUP/y.yaml``, ``sub: y`` is ``GROUP/sub/y.yaml``, a leading ``/`` is from the tree's
root; ``_self_``, optional and override entries are followed as their names say."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cgbench.safeio import MAX_DEPTH


def _entries(doc: Any) -> list[tuple[str, str]]:
    """(group or "", name) for each entry of a file's defaults list."""
    out: list[tuple[str, str]] = []
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    for item in defaults if isinstance(defaults, list) else []:
        if isinstance(item, str) and item != "_self_":
            out.append(("", item))
        elif isinstance(item, dict):
            for k, v in item.items():
                if isinstance(k, str) and isinstance(v, str):
                    out.append((k.split()[-1], v))  # "override model" / "optional model": the group
    return out


def _target(root: Path, here: Path, group: str, name: str) -> Path:
    base = root if (group or name).startswith("/") else here.parent
    rel = Path(group.lstrip("/")) / name.lstrip("/") if group else Path(name.lstrip("/"))
    return (base / rel).with_suffix(".yaml")


def _includes(root: Path, path: Path) -> list[Path]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return []
    return [t for g, n in _entries(doc) if (t := _target(root, path, g, n)).is_file()]


def _cycle_from(root: Path, start: Path) -> list[Path] | None:
    stack: list[list[Path]] = [[start]]
    while stack:
        path = stack.pop()
        if len(path) > MAX_DEPTH:
            continue
        for nxt in _includes(root, path[-1]):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            stack.append(path + [nxt])
    return None


def find_cycle(roots: Sequence[Path], named: Sequence[str] = ()) -> str | None:
    """``FOLDER: a.yaml -> b.yaml -> a.yaml`` for a cycle of includes among the YAML files of
    ``roots`` (one through a file whose name is in ``named`` first: the config the command chose),
    else None."""
    found: list[tuple[Path, list[Path]]] = []
    for root in roots:
        for start in sorted(root.rglob("*.yaml"))[:10_000]:
            loop = _cycle_from(root, start)
            if loop is not None:
                found.append((root, loop))
                if any(p.stem in named for p in loop):
                    break
    if not found:
        return None
    root, loop = next(((r, c) for r, c in found if any(p.stem in named for p in c)), found[0])
    return f"{root}: " + " -> ".join(str(p.relative_to(root)) for p in loop)
