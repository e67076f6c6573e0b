"""The package's shape, checked from its source: the package order of ``docs/architecture.md``'s
diagram (no import from a package to its right), no import cycles, torch only under the torch
backend, no private names imported across modules outside the engine core."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "cgbench"


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _imports(path: Path, *, module_level: bool) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every cgbench import in ``path``;
    ``module_level`` keeps only the imports that run when the module is imported (not those inside
    functions, which run on call)."""
    tree = ast.parse(path.read_text())
    nodes: list[ast.AST] = []
    if module_level:
        stack = list(tree.body)
        while stack:  # module level, including under `if`/`try`, but not inside defs or classes
            n = stack.pop()
            nodes.append(n)
            if isinstance(n, (ast.If, ast.Try)):
                stack.extend(getattr(n, "body", []) + getattr(n, "orelse", []) + getattr(n, "finalbody", []))
                for h in getattr(n, "handlers", []):
                    stack.extend(h.body)
    else:
        nodes = list(ast.walk(tree))
    out: list[tuple[str, str | None, int]] = []
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            for a in n.names:
                sub = f"{n.module}.{a.name}"
                out.append((sub, None, n.lineno) if sub in MODULES else (n.module, a.name, n.lineno))
        elif isinstance(n, ast.Import):
            out.extend((a.name, None, n.lineno) for a in n.names)
    return out


def _is_type_checking_block(path: Path) -> set[int]:
    """Lines of imports under ``if TYPE_CHECKING:`` (never executed)."""
    lines: set[int] = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING":
            for m in ast.walk(n):
                if isinstance(m, (ast.Import, ast.ImportFrom)):
                    lines.add(m.lineno)
    return lines


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _graph(*, module_level: bool, type_checking: bool = False) -> dict[str, set[str]]:
    """The import graph of cgbench's modules; ``type_checking``: imports under ``if TYPE_CHECKING:``
    count too (a circle a type checker walks is a circle of concepts)."""
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        skip = set() if type_checking else _is_type_checking_block(path)
        deps = set()
        for mod, _, line in _imports(path, module_level=module_level):
            if line in skip or not mod.startswith("cgbench"):
                continue
            while mod not in MODULES and "." in mod:
                mod = mod.rsplit(".", 1)[0]
            if mod in MODULES and mod != name and mod != "cgbench":
                deps.add(mod)
        edges[name] = deps
    return edges


@pytest.mark.slow
def test_no_import_cycles_at_module_level():
    assert _cycles(_graph(module_level=True)) == []


@pytest.mark.slow
def test_no_import_cycles_even_through_imports_inside_functions():
    assert _cycles(_graph(module_level=False)) == []


@pytest.mark.slow
def test_no_import_cycles_even_under_type_checking():
    """No two modules anywhere form a circle, counting every import (in functions, under TYPE_CHECKING):
    a registry that only annotates with the schema it feeds names the fields it reads (a Protocol)."""
    assert _cycles(_graph(module_level=False, type_checking=True)) == []


def test_the_cycle_check_sees_a_circle_closed_under_type_checking():
    planted = {"cgbench.engine.a": {"cgbench.engine.b"}, "cgbench.engine.b": {"cgbench.engine.a"}}
    assert _cycles(planted) == [["cgbench.engine.a", "cgbench.engine.b"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cgbench.engine.core import Engine\n"
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "planted.py"
        path.write_text(source)
        assert [m for m, _, _ in _imports(path, module_level=False) if m.startswith("cgbench")] == [
            "cgbench.engine.core"]
        assert _is_type_checking_block(path) == {3}


@pytest.mark.slow
def test_torch_is_imported_only_under_the_torch_backend():
    torch_home = "cgbench.backends.torch"
    offenders = []
    for name, path in MODULES.items():
        if name.startswith(torch_home):
            continue
        for mod, _, line in _imports(path, module_level=False):
            if mod == "torch" or mod.startswith("torch."):
                offenders.append(f"{name}:{line}")
    assert offenders == []


@pytest.mark.slow
def test_no_private_names_imported_across_modules_outside_the_engine_core():
    offenders = []
    for name, path in MODULES.items():
        for mod, imported, line in _imports(path, module_level=False):
            if imported and imported.startswith("_") and not imported.startswith("__") \
                    and mod.startswith("cgbench") and not (name.startswith("cgbench.engine.")
                                                            and mod.startswith("cgbench.engine.")):
                offenders.append(f"{name}:{line} imports {mod}.{imported}")
    assert offenders == []


# ---------------------------------------------------------------------------------------------- layering

# The diagram of docs/architecture.md, as the order its packages may import in: a module imports
# from its own layer and the layers above it in this list, never from one below, whether the
# import runs at module level, inside a function, or only under TYPE_CHECKING. "cgbench" is the
# package's own __init__ (its version).
LAYERS: tuple[tuple[str, ...], ...] = (
    # the version, the compiled-build switch, ConfigError, the caches' folder: import nothing of cgbench
    ("cgbench", "native", "errors", "user_cache"),
    ("config", "safeio"),  # what a user gives, and how user files are read (a ConfigError when bad)
    ("grids",),
    ("workload",),
    ("engine",),
    ("backends",),
    ("results",),
    ("pipeline",),  # the composition root: builds the parts, runs a point, computes every metric and flag
    ("analysis",),
    ("cli", "__main__"),  # __main__: ``python -m cgbench``
)
LAYER_OF = {package: i for i, layer in enumerate(LAYERS) for package in layer}

# Upward imports allowed for now, by importing module: each must say why and what removes it.
# Empty: the Hydra launcher entry (config/launcher_app.py), the last exception, went with the one
# sweep executor.
ALLOWED_UPWARD: dict[str, set[str]] = {}


def package_of(module: str) -> str:
    """``cgbench.engine.core`` -> ``engine``; ``cgbench.pipeline`` -> ``pipeline``; ``cgbench`` -> ``cgbench``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imported_packages(module: str, source: str) -> list[tuple[str, int]]:
    """(cgbench package imported, line) for every import anywhere in ``source``: module level,
    inside functions and classes, under ``if TYPE_CHECKING:``; relative imports resolved (as from a
    module file; cgbench's __init__ files import nothing relatively)."""
    out: list[tuple[str, int]] = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            out.extend((package_of(a.name), n.lineno) for a in n.names if a.name.split(".")[0] == "cgbench")
        elif isinstance(n, ast.ImportFrom):
            target = n.module or ""
            if n.level:
                parts = module.split(".")
                base = parts[:len(parts) - n.level]
                target = ".".join(base + ([target] if target else []))
            if target == "cgbench":  # from cgbench import safeio, __version__
                out.extend((a.name if a.name in LAYER_OF else "cgbench", n.lineno) for a in n.names)
            elif target.split(".")[0] == "cgbench":
                out.append((package_of(target), n.lineno))
    return out


def upward_imports(sources: Mapping[str, str],
                   allowed: Mapping[str, set[str]] | None = None) -> list[str]:
    """Every import of ``sources`` (module name -> its text) from a package in a lower layer than
    the importing module's (one message each), but those in ``allowed``; a package in no layer is
    reported too (the order must name it)."""
    allowed = ALLOWED_UPWARD if allowed is None else allowed
    found = []
    for module, source in sorted(sources.items()):
        mine = package_of(module)
        if mine not in LAYER_OF:
            found.append(f"{module}: package {mine!r} is in no layer of LAYERS")
            continue
        for target, line in _imported_packages(module, source):
            if target not in LAYER_OF:
                found.append(f"{module}:{line} imports package {target!r}, which is in no layer of LAYERS")
            elif LAYER_OF[target] > LAYER_OF[mine] and target not in allowed.get(module, set()):
                found.append(f"{module}:{line} imports {target} (below {mine} in the layer order)")
    return found


SOURCES = {name: path.read_text() for name, path in MODULES.items()}


@pytest.mark.slow
def test_no_package_imports_from_a_package_below_it_in_the_diagram():
    assert upward_imports(SOURCES) == []


def package_circles(sources: Mapping[str, str]) -> list[list[str]]:
    """Circles between packages (``package_of``: ``config``, ``safeio``, ``results`` ...), counting every import
    anywhere in ``sources``: two packages of one layer may import each other's modules without a module
    circle, and that still ties them into one."""
    edges: dict[str, set[str]] = {}
    for module, source in sources.items():
        mine = package_of(module)
        edges.setdefault(mine, set()).update(t for t, _ in _imported_packages(module, source) if t != mine)
    return _cycles(edges)


@pytest.mark.slow
def test_no_circle_between_packages():
    assert package_circles(SOURCES) == []


def test_the_package_circle_check_sees_two_layer_mates_importing_each_other():
    planted = {"cgbench.safeio": "def f():\n    from cgbench.config.schema import ConfigError\n",
               "cgbench.config.paths": "from cgbench import safeio\n", "cgbench.errors": ""}
    assert package_circles(planted) == [["config", "safeio"]]
    planted["cgbench.safeio"] = "from cgbench.errors import ConfigError\n"
    assert package_circles(planted) == []


def test_the_layer_order_names_every_package_once():
    named = [p for layer in LAYERS for p in layer]
    assert len(named) == len(set(named))
    assert {package_of(m) for m in MODULES} <= set(named)


def test_the_allow_list_holds_only_imports_that_still_exist():
    """An allowed upward import that is gone must leave the list too (else it would hide a new one)."""
    for module, packages in ALLOWED_UPWARD.items():
        if module in SOURCES:
            imported = {p for p, _ in _imported_packages(module, SOURCES[module])}
            assert packages <= imported, module


@pytest.mark.slow
@pytest.mark.parametrize("source", [
    "from cgbench.cli import app\n",
    "import cgbench.cli.app\n",
    "def f():\n    from cgbench.cli.app import run\n    return run\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cgbench.cli.app import app\n",
    "from ..cli import app\n",
    "from cgbench import pipeline\n",
], ids=["from", "import", "in-a-function", "type-checking", "relative", "from-cgbench"])
def test_the_checker_fails_on_a_deliberately_added_upward_import(source):
    planted = dict(SOURCES)
    planted["cgbench.engine.planted"] = source
    found = upward_imports(planted)
    assert len(found) == 1 and found[0].startswith("cgbench.engine.planted:"), found


@pytest.mark.slow
def test_the_checker_accepts_downward_and_same_package_imports():
    planted = dict(SOURCES)
    planted["cgbench.analysis.planted"] = ("from cgbench.engine.core import Engine\n"
                                           "from cgbench.analysis import sweep\n"
                                           "from cgbench import safeio, __version__\n"
                                           "import cgbench.pipeline\n")
    assert upward_imports(planted) == []


def test_the_allow_list_allows_only_what_it_names():
    planted = {"cgbench.config.planted": "from cgbench.cli import app\nfrom cgbench.analysis import sweep\n"}
    allowed = {"cgbench.config.planted": {"analysis"}}
    assert upward_imports(planted, allowed) == [
        "cgbench.config.planted:1 imports cli (below config in the layer order)"]
