"""The optional compiled simulator (make native): which modules, the stale-build guard, the label,
and (when a build is present) results identical to plain Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgbench import native
from cgbench.native import COMPILED_MODULES, build_record, source_path, stale_modules

ROOT = Path(__file__).resolve().parents[2]


def test_every_compiled_module_has_a_source_and_none_defines_a_builtin_exception_subclass():
    for module in COMPILED_MODULES:
        path = source_path(module)
        assert path.is_file(), module
        # mypyc cannot compile a subclass of a built-in exception: those live in uncompiled modules
        assert "(AssertionError)" not in path.read_text() and "(Exception)" not in path.read_text(), module
    assert "cgbench.engine.invariants" not in COMPILED_MODULES
    # compiled, the numpy metrics held their arrays longer (a higher peak at a million requests) for no gain
    assert "cgbench.results.metrics" not in COMPILED_MODULES


def _copy_sources(dest: Path) -> Path:
    for module in COMPILED_MODULES:
        target = source_path(module, dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_path(module), target)
    return dest


def test_a_fresh_record_is_not_stale_and_an_edit_makes_exactly_that_module_stale(tmp_path):
    root = _copy_sources(tmp_path / "pkg")
    info = tmp_path / "build.json"
    assert stale_modules(info, root) is None  # no build at all
    info.write_text(json.dumps(build_record(root=root)))
    assert stale_modules(info, root) == []
    edited = source_path("cgbench.engine.fast", root)
    edited.write_text(edited.read_text() + "\n# an edit\n")
    assert stale_modules(info, root) == ["cgbench.engine.fast"]
    source_path("cgbench.grids.lookup", root).unlink()
    assert stale_modules(info, root) == ["cgbench.engine.fast", "cgbench.grids.lookup"]


def test_an_unreadable_record_makes_every_module_stale(tmp_path):
    info = tmp_path / "build.json"
    info.write_text("{not json")
    assert stale_modules(info) == list(COMPILED_MODULES)
    info.write_text(json.dumps({"sources": ["a list"]}))
    assert stale_modules(info) == list(COMPILED_MODULES)


def _env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``extra``, never forcing plain Python unless ``extra`` does (the
    suite may run under ``CGBENCH_PURE_PYTHON=1``)."""
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    return {**env, **extra}


def _build_in(env_extra: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", "from cgbench.native import simulator_build; print(simulator_build())"],
                         capture_output=True, text=True, env=_env(env_extra), check=True, cwd=ROOT)
    return out.stdout.strip()


@pytest.mark.e2e
def test_pure_python_can_be_forced_and_the_label_says_so():
    assert _build_in({native.PURE_ENV: "1"}) == "python"


def test_the_result_document_records_the_build_that_ran():
    from cgbench.config.compose import load_config
    from cgbench.pipeline import run_point

    doc = run_point(load_config(["workload.num_requests=8"]), [])
    assert doc["environment"]["simulator_build"] == native.simulator_build()
    assert doc["environment"]["simulator_build"] in ("python", "mypyc")


@pytest.mark.e2e
def test_the_compiled_modules_type_check():
    """mypyc refuses code mypy rejects: keep the compiled set type-clean even where no build is made."""
    api = pytest.importorskip("mypy.api")
    sources = [str(source_path(m)) for m in COMPILED_MODULES]
    limit = sys.getrecursionlimit()
    try:
        out, err, status = api.run(["--ignore-missing-imports", "--follow-imports=silent", "--no-incremental",
                                    "--cache-dir", os.devnull, *sources])
    finally:
        # mypy raises the limit to 16,384 and leaves it there: every later test in this process would
        # recurse that deep before a RecursionError (a 20,000-deep YAML input takes 15x as long)
        sys.setrecursionlimit(limit)
    assert status == 0, out + err


_POINTS = [
    ["workload=chat", "workload.num_requests=3000"],
    [],
    ["model=transformer", "cg=sparse", "policy=budget"],
    ["workload=decode_heavy", "engine.kv_blocks=300", "engine.kv_corners=safe"],
    ["workload=burst", "policy=wait_timeout", "engine.chunked_prefill=false"],
    ["workload=bimodal", "engine.oracle=true"],
    ["engine.ep_size=2", "workload.num_requests=64"],
    ["workload=azure_conv", "workload.window={end_s: 900}"],  # the shipped production traces, streamed
    ["workload=mooncake_conv", "workload.window={end_s: 600}", "model=transformer"],
]

_RUN = """
import json, sys
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
out = []
for o in json.loads(sys.argv[1]):
    doc = run_point(load_config(o), o, requests=True)
    out.append({k: doc[k] for k in ("metrics", "graph_usage", "requests")})
print(json.dumps(out, sort_keys=True))
"""


@pytest.mark.e2e
@pytest.mark.skipif(native.stale_modules() != [], reason="no fresh compiled build (make native)")
def test_the_compiled_build_gives_exactly_the_plain_python_results():
    def run(env_extra: dict[str, str]) -> str:
        return subprocess.run([sys.executable, "-c", _RUN, json.dumps(_POINTS)], capture_output=True, text=True,
                              env=_env(env_extra), check=True, cwd=ROOT).stdout

    assert _build_in({}) == "mypyc"
    assert run({}) == run({native.PURE_ENV: "1"})


_COPY = """
import ast, copy, json
from cgbench.engine import request
from cgbench.native import simulator_build
from cgbench.native import source_path
tree = ast.parse(source_path("cgbench.engine.request").read_text())
[cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Request"]
fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]  # the declared fields, either build
r = request.make_request(7, 300, 50, 2048, arrival_s=1.5, arrival_step=3)
r.start_prefill(200, 100)
r.generated, r.kv_tokens, r.blocks, r.deferrals, r.fail_reason = 4, 304, 2, 5, "x"
c = copy.copy(r)
same = [repr(getattr(c, f)) for f in fields] == [repr(getattr(r, f)) for f in fields]
print(json.dumps([simulator_build(), c is not r, same, len(fields)]))
"""


@pytest.mark.parametrize("pure", ["1", ""])
def test_a_request_copies_in_either_build(pure):
    """``copy.copy`` of a request (sensitivity's repricing log keeps each admitted one): a compiled class
    has no instance dictionary for the default copy, so ``Request.__copy__`` gives every field."""
    env = _env({native.PURE_ENV: pure} if pure else {})
    build, fresh, same, n_fields = json.loads(subprocess.run([sys.executable, "-c", _COPY], capture_output=True,
                                                             text=True, env=env, check=True, cwd=ROOT).stdout)
    assert fresh and same and n_fields == 25, build
