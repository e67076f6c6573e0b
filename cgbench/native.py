"""The optional compiled build of the simulator's hot modules (mypyc), and which build a run used.

``make native`` compiles ``COMPILED_MODULES`` with mypyc into extension modules next to their sources
and records the sources' digests in ``cgbench/_native_build.json``. Python then imports an extension
module in preference to its source. The compiled modules are the same source code, so they give the
same results, only faster; without a build (no compiler on the machine, or never built) every module
runs as plain Python.

A compiled module must never run stale code: when ``cgbench`` is imported, the recorded digests are
compared with the sources, and if any source changed since the build (or ``CGBENCH_PURE_PYTHON=1``
is set) a finder placed first on ``sys.meta_path`` loads those modules from their ``.py`` sources.
``simulator_build()`` says what actually got imported; result documents record it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import importlib.machinery
    from types import ModuleType

# Imported by ``import cgbench``, so by every command: what it needs only when a build is present
# (hashlib, json, importlib's machinery) is imported then, not at every start.

PACKAGE_ROOT = Path(__file__).resolve().parent
BUILD_INFO = PACKAGE_ROOT / "_native_build.json"
PURE_ENV = "CGBENCH_PURE_PYTHON"
# the shared library mypyc builds for the group (one C runtime for all the modules below)
GROUP_NAME = "cgbench.simcore"

# The step loop and everything it calls per step or per request. Exceptions subclassing built-in
# exceptions cannot be compiled (cgbench/engine/invariants.py stays Python for that reason). The
# metrics (results/metrics.py) stay Python too: their work is numpy's, and compiled they held more
# memory (a million chat requests: 306 MiB peak against 285 MiB, metrics 0.92 s against 0.78 s CPU).
COMPILED_MODULES: tuple[str, ...] = (
    "cgbench.engine.request",
    "cgbench.engine.ledger",
    "cgbench.engine.contract",
    "cgbench.engine.context",
    "cgbench.engine.policies",
    "cgbench.engine.rows",
    "cgbench.engine.scheduler",
    "cgbench.engine.stats",
    "cgbench.engine.drive",
    "cgbench.engine.core",
    "cgbench.engine.fast",
    "cgbench.grids.lookup",
    "cgbench.workload.lengths",
    "cgbench.workload.arrivals",
    "cgbench.workload.stream",
    "cgbench.backends.sim.cost_model",
    "cgbench.backends.sim.backend",
)


def source_path(module: str, root: Path = PACKAGE_ROOT) -> Path:
    """``cgbench.engine.core`` -> ``<root>/engine/core.py``."""
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_record(modules: Sequence[str] = COMPILED_MODULES, root: Path = PACKAGE_ROOT) -> dict:
    """What ``BUILD_INFO`` holds after a build: the interpreter and each compiled source's digest."""
    return {"python": sys.implementation.cache_tag,
            "sources": {m: source_digest(source_path(m, root)) for m in modules}}


def stale_modules(info_path: Path = BUILD_INFO, root: Path = PACKAGE_ROOT) -> list[str] | None:
    """The compiled modules whose source changed since the build; ``None`` when there is no build.
    A record that cannot be read counts every module as stale (the build cannot be trusted)."""
    if not info_path.is_file():
        return None
    import json

    try:
        recorded = json.loads(info_path.read_text(encoding="utf-8"))["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return list(COMPILED_MODULES)
    stale = []
    for module in COMPILED_MODULES:
        path = source_path(module, root)
        if not isinstance(recorded, dict) or recorded.get(module) != (source_digest(path) if path.is_file() else None):
            stale.append(module)
    return stale


class _SourceFinder:
    """Loads the named ``cgbench`` modules from their ``.py`` sources, whatever else is installed (a
    meta path finder: ``find_spec`` is all the import system asks of one)."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def install_guard() -> None:
    """Called once when ``cgbench`` is imported: fall back to the sources when the build is stale or
    ``CGBENCH_PURE_PYTHON=1``, saying so once on stderr for a stale build."""
    if any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        return
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        sys.meta_path.insert(0, _SourceFinder(COMPILED_MODULES))
        return
    stale = stale_modules()
    if stale:
        sys.meta_path.insert(0, _SourceFinder(COMPILED_MODULES))
        print(f"cgbench: the compiled simulator is older than its sources ({', '.join(stale[:3])}"
              f"{', ...' if len(stale) > 3 else ''} changed); running plain Python. `make native` rebuilds "
              "it, `make clean-native` removes it.", file=sys.stderr)


def loaded_from_extension(module: str) -> bool:
    import importlib.machinery

    mod = sys.modules.get(module)
    origin = getattr(mod, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def simulator_build() -> str:
    """``"mypyc"`` when every hot module ran compiled, ``"python"`` when none did, ``"mixed"`` otherwise
    (a partial build); modules are imported first, so the answer is what a run uses."""
    import importlib

    for module in COMPILED_MODULES:
        importlib.import_module(module)
    compiled = sum(loaded_from_extension(m) for m in COMPILED_MODULES)
    if compiled == 0:
        return "python"
    return "mypyc" if compiled == len(COMPILED_MODULES) else "mixed"
