"""How ``cgbench advise``'s execution walks its own modules (issue 38, item 2), and the equality check
of a regroup of those modules.

    python scripts/advise_flow.py                    # the walk's figures (one small search, in process)
    python scripts/advise_flow.py --json             # the same as JSON
    python scripts/advise_flow.py write DIR          # the reports of CONFIGS, as JSON files in DIR
    python scripts/advise_flow.py compare DIR        # the same reports again, byte for byte against DIR

**The walk.** One small search (``FLOW``: the overrides of the quick ``small_search`` fixture of
tests/analysis/test_advise.py, ``candidates=4``, ``jobs=1``, so every candidate runs in this process)
runs under ``sys.setprofile``. At every Python ``call`` event whose new frame's code lives in a
``cgbench.analysis.advise.*`` module (the frame's module ``__name__``; a dataclass's generated
methods count as its module's), and at every ``return`` event whose frame returns *into* such a
frame, that module is appended to the walk; consecutive repeats collapse to one visit. Frames of any
other module (the engine, the config layer, the executors) are invisible: a call from advise module
X through non-advise code back into advise module Y reads as the step X -> Y. The walk is the
sequence of advise modules that execution is in, in order.

**returns**: the number of visits (positions ``i`` of the collapsed walk) to a module that occurs
earlier in the walk than ``i``; since repeats are collapsed, that earlier visit was left before
``i``: ``A B A`` -> 1, ``A B A B`` -> 2, ``A B C`` -> 0. Counted over the whole walk, and per module
(the visits to it that are returns); ``return sites``: the number of distinct (module and function the
walk leaves, module and function it returns to) among them, i.e. each kind of return once, however
often a loop repeats it. A call from X to Y and back costs one return (to X) unless Y
was never visited before, so a loop that calls across modules costs returns on every round.

**climbs back up**: the number of ``call`` events whose new frame's code lives in advise module Y and
whose calling frame (``f_back``, the direct caller) lives in advise module X != Y, where Y imports X,
directly or through other advise modules (any ``import``/``from ... import`` of a
``cgbench.analysis.advise`` module in Y's source, at module level or inside a function): a call
against the import order, i.e. a callback, or a method of an object a higher module made and handed
down. ``climb sites`` is the number of distinct (calling function, called function) pairs among them:
the figure a reader of the code meets, however often each runs.

**static**: the advise package's import graph (edges among its own modules, either kind of import)
and its largest module in lines.

**The equality check.** ``write`` runs ``run_advise`` on each of ``CONFIGS`` (varied: the default
config, a hybrid gating one, an objective and SLO variant with a memory budget, a
``--check-workload`` and ``--check-seed`` one) and writes its report with ``json.dumps(doc, indent=1)``
(key order kept) minus the provenance fields ``PROVENANCE`` (the time, the commit, the tree's state:
what legitimately differs between two checkouts). ``compare`` computes them again with the code in
this checkout and compares the bytes with the files in DIR; exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACKAGE = "cgbench.analysis.advise"
HYBRID = ["model=hybrid", "policy=budget"]
FLOW = {"overrides": HYBRID + ["workload.num_requests=128"], "budget_graphs": 40, "candidates": 4, "jobs": 1}
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {"overrides": ["workload.num_requests=64"], "budget_graphs": 16, "candidates": 4},
    "hybrid": {"overrides": HYBRID + ["workload.num_requests=128"], "budget_graphs": 40, "candidates": 6},
    "slo": {"overrides": ["model=hybrid", "policy=megatron", "workload=chat", "workload.num_requests=100"],
            "budget_graphs": 24, "candidates": 5, "objective": "ttft_p99", "slos": ["max_wait=1000"],
            "budget_memory_gb": 0.3},
    "check_workload": {"overrides": HYBRID + ["workload.num_requests=96"], "budget_graphs": 32, "candidates": 4,
                       "objective": "eager_fraction", "check_seed": 7,
                       "check_workload": ["workload.num_requests=80"]},
}
PROVENANCE = ("created_at", "git_sha", "git_dirty", "git_diff_hash")


def advise_modules() -> dict[str, Path]:
    pkg = ROOT / "cgbench" / "analysis" / "advise"
    return {f"{PACKAGE}.{p.stem}": p for p in sorted(pkg.glob("*.py")) if p.stem != "__init__"}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Advise module -> the advise modules its source imports (module level or in a function)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                targets = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
            elif isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            else:
                continue
            deps.update(t for t in targets if t in modules and t != name)
        edges[name] = deps
    return edges


def closure(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for start in edges:
        seen: set[str] = set()
        stack = list(edges[start])
        while stack:
            m = stack.pop()
            if m not in seen:
                seen.add(m)
                stack.extend(edges.get(m, ()))
        out[start] = seen
    return out


def _request(**kw: Any):
    try:  # the regrouped package, else the base one (where run.py re-exported it)
        from cgbench.analysis.advise.request import AdviseRequest
    except ImportError:
        from cgbench.analysis.advise.run import AdviseRequest
    return AdviseRequest(**kw)


def measure() -> dict[str, Any]:
    from cgbench.analysis.advise.run import run_advise

    modules = advise_modules()
    names = set(modules)
    reaches = closure(import_graph(modules))
    walk: list[str] = []
    where: list[str] = []  # the function each visit of the walk starts in
    climbs: Counter = Counter()

    def profile(frame, event, arg) -> None:
        if event == "call":
            mod = frame.f_globals.get("__name__")
            if mod not in names:
                return
            back = frame.f_back
            caller = back.f_globals.get("__name__") if back is not None else None
            if caller in names and caller != mod and caller in reaches[mod]:
                climbs[(f"{caller}.{back.f_code.co_name}", f"{mod}.{frame.f_code.co_qualname}")] += 1
            code = frame.f_code
        elif event == "return":
            back = frame.f_back
            if back is None:
                return
            mod = back.f_globals.get("__name__")
            if mod not in names:
                return
            code = back.f_code
        else:
            return
        if not walk or walk[-1] != mod:
            walk.append(mod)
            where.append(code.co_qualname)

    req = _request(**FLOW)
    t0 = time.perf_counter()
    sys.setprofile(profile)
    try:
        run_advise(req)
    finally:
        sys.setprofile(None)
    seconds = time.perf_counter() - t0
    seen: set[str] = set()
    per_module: Counter = Counter()
    steps: Counter = Counter()  # the returns by the step that makes them: (module left, module returned to)
    sites: set[tuple[str, str, str, str]] = set()  # the same by function: (module, function) left and returned to
    for i, m in enumerate(walk):
        if m in seen:
            per_module[m] += 1
            steps[(walk[i - 1], m)] += 1
            sites.add((walk[i - 1], where[i - 1], m, where[i]))
        seen.add(m)
    short = {m: m.removeprefix(PACKAGE + ".") for m in names}
    lines = {short[m]: len(p.read_text().splitlines()) for m, p in modules.items()}
    edges = import_graph(modules)
    return {
        "search": FLOW, "seconds": round(seconds, 1), "walk_visits": len(walk),
        "returns": sum(per_module.values()), "return_sites": len(sites),
        "returns_per_module": {short[m]: n for m, n in per_module.most_common()},
        "returns_per_step": {f"{short[a]} -> {short[b]}": n for (a, b), n in steps.most_common()},
        "climbs": sum(climbs.values()), "climb_sites": len(climbs),
        "climbs_per_site": {f"{a.removeprefix(PACKAGE + '.')} -> {b.removeprefix(PACKAGE + '.')}": n
                            for (a, b), n in climbs.most_common()},
        "modules": len(modules), "import_edges": sum(len(v) for v in edges.values()),
        "lines": lines, "largest": max(lines.items(), key=lambda kv: kv[1]),
    }


def report_bytes(name: str) -> bytes:
    from cgbench.analysis.advise.run import run_advise

    doc = run_advise(_request(**CONFIGS[name]))
    for k in PROVENANCE:
        doc.pop(k, None)
    return (json.dumps(doc, indent=1) + "\n").encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", nargs="?", choices=("measure", "write", "compare"), default="measure")
    ap.add_argument("folder", nargs="?", type=Path)
    ap.add_argument("--json", action="store_true", help="measure: print the figures as JSON")
    ap.add_argument("--only", nargs="*", choices=sorted(CONFIGS), help="write/compare: these configs only")
    a = ap.parse_args()
    if a.action == "measure":
        fig = measure()
        if a.json:
            print(json.dumps(fig, indent=1))
            return 0
        print(f"one advise search ({fig['seconds']} s): {fig['walk_visits']} module visits")
        per = ", ".join(f"{m} {n}" for m, n in fig["returns_per_module"].items())
        print(f"returns: {fig['returns']} at {fig['return_sites']} sites  ({per})")
        for step, n in fig["returns_per_step"].items():
            print(f"  {n:6d}  {step}")
        print(f"climbs back up: {fig['climbs']} calls at {fig['climb_sites']} sites")
        for site, n in fig["climbs_per_site"].items():
            print(f"  {n:6d}  {site}")
        print(f"static: {fig['modules']} modules, {fig['import_edges']} import edges among them, "
              f"largest {fig['largest'][0]}.py at {fig['largest'][1]} lines")
        print("lines: " + ", ".join(f"{m} {n}" for m, n in sorted(fig["lines"].items())))
        return 0
    if a.folder is None:
        ap.error(f"{a.action}: needs DIR")
    names = a.only or sorted(CONFIGS)
    bad = 0
    for name in names:
        t0 = time.perf_counter()
        data = report_bytes(name)
        path = a.folder / f"{name}.json"
        if a.action == "write":
            a.folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            verdict = f"written, {len(data)} bytes"
        else:
            same = path.is_file() and path.read_bytes() == data
            bad += not same
            verdict = f"identical ({len(data)} bytes)" if same else "DIFFERS"
        print(f"{name}: {verdict} ({time.perf_counter() - t0:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
