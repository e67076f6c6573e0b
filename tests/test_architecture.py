"""The package's shape, checked from its source: no import cycles, torch only under the torch
backend, no private names imported across modules outside the engine core."""

from __future__ import annotations

import ast
from pathlib import Path

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


def _graph(*, module_level: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        skip = _is_type_checking_block(path)
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


def test_no_import_cycles_at_module_level():
    assert _cycles(_graph(module_level=True)) == []


def test_no_import_cycles_even_through_imports_inside_functions():
    assert _cycles(_graph(module_level=False)) == []


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


def test_no_private_names_imported_across_modules_outside_the_engine_core():
    offenders = []
    for name, path in MODULES.items():
        for mod, imported, line in _imports(path, module_level=False):
            if imported and imported.startswith("_") and not imported.startswith("__") \
                    and mod.startswith("cgbench") and not (name.startswith("cgbench.engine.")
                                                            and mod.startswith("cgbench.engine.")):
                offenders.append(f"{name}:{line} imports {mod}.{imported}")
    assert offenders == []
