"""The Megatron step-log format the reader depends on, pinned (tests/data/megatron_log_format.json) and
held to Megatron-LM's own source at both refs when a checkout is at hand.

The reader and the writer are built from ``cgbench.workload.megatron_log_format``'s pieces; the first
test holds those pieces to the pinned file. The others read Megatron's source (``CGBENCH_MEGATRON_LM``:
a Megatron-LM clone or bare git folder; else the mirror at ``/work/.mirror/NVIDIA+Megatron-LM/repo``)
with ``ast`` and check that every pinned piece, in printf form, is a format string the engine uses:
the step line's literal, the config bracket, the suffixes, the capture line, the step kinds and the
batch shape's ``__str__``. Without a checkout (CI machines have none) they skip, saying so."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cgbench.workload import megatron_log_format as fmt

PINNED = json.loads((Path(__file__).resolve().parents[1] / "data" / "megatron_log_format.json").read_text())
REFS = tuple(PINNED["refs"])
DEFAULT_MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
ENGINE = "megatron/core/inference/engines/dynamic_engine.py"
SHAPES = "megatron/core/inference/batch_dimensions_utils.py"


def test_the_readers_pieces_are_the_pinned_ones():
    for ref, pinned in PINNED["refs"].items():
        version = pinned["format"]
        ours = {k: v for k, v in fmt.PIECES.items() if not k.startswith("blocks_")}
        ours["blocks"] = fmt.BLOCKS[version]
        assert ours == pinned["pieces"], ref
        assert list(fmt.KINDS) == pinned["kinds"], ref
    assert set(fmt.VERSIONS) == {p["format"] for p in PINNED["refs"].values()}


def test_printf_form():
    assert fmt.printf_form("a {x:d} b {y:.3f} {z} 5%") == "a %d b %.3f %s 5%%"


def _mirror() -> Path | None:
    given = os.environ.get("CGBENCH_MEGATRON_LM")
    path = Path(given) if given else DEFAULT_MIRROR
    return path if path.exists() else None


def _show(repo: Path, ref: str, path: str) -> str | None:
    bare = (repo / "HEAD").is_file() and not (repo / ".git").exists()
    base = ["git", f"--git-dir={repo}"] if bare else ["git", "-C", str(repo)]
    for name in (ref, f"origin/{ref}"):
        done = subprocess.run([*base, "show", f"{name}:{path}"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout
    return None


@pytest.fixture(scope="module")
def sources() -> dict[str, dict[str, str]]:
    repo = _mirror()
    if repo is None:
        pytest.skip("no Megatron-LM checkout: set CGBENCH_MEGATRON_LM to a clone (or a bare git folder) to hold "
                    "the pinned step-log format to Megatron's source")
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot read the Megatron-LM checkout")
    out = {}
    for ref in REFS:
        engine, shapes = _show(repo, ref, ENGINE), _show(repo, ref, SHAPES)
        if engine is None or shapes is None:
            pytest.skip(f"{repo} has no ref {ref} (or origin/{ref}) holding {ENGINE}: fetch it to run this check")
        out[ref] = {"engine": engine, "shapes": shapes}
    return out


def _format_strings(source: str) -> set[str]:
    """Every string a ``%`` formats, every f-string (its fields as ``{}``) and every first argument of a
    logging call, in ``source``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
                and isinstance(node.left.value, str):
            found.add(node.left.value)
        elif isinstance(node, ast.JoinedStr):
            found.add("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)
    return found


def _constants(source: str, function: str) -> set[str]:
    tree = ast.parse(source)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    fn = next(n for n in ast.walk(tree) if isinstance(n, functions) and n.name == function)
    return {n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _fields_as_braces(piece: str) -> str:
    """An f-string-like piece with its fields as ``{}``."""
    import re

    return re.sub(r"\{\w+(?::[^}]*)?\}", "{}", piece)


@pytest.mark.slow
@pytest.mark.parametrize("ref", REFS)
def test_the_pinned_step_line_is_megatrons(sources, ref):
    pieces = PINNED["refs"][ref]["pieces"]
    strings = _format_strings(sources[ref]["engine"])
    line = "".join(fmt.printf_form(pieces[k]) for k in ("head", "reqs", "blocks", "mem"))
    assert line in strings, f"{ref}: the step line's literal is not {line!r}"
    for name in ("config", "spec", "spec_position", "prefix_hits", "prefill", "prefix_util", "mamba"):
        assert fmt.printf_form(pieces[name]) in strings, f"{ref}: {name}"
    capture = fmt.printf_form(pieces["capture"])
    assert any(s.startswith(capture) for s in strings), f"{ref}: capture {capture!r}"
    assert _fields_as_braces(pieces["color"]) in strings, f"{ref}: color"
    assert pieces["graph_off"] in _constants(sources[ref]["engine"], "async_bookkeep")


@pytest.mark.slow
@pytest.mark.parametrize("ref", REFS)
def test_the_pinned_kinds_and_shape_are_megatrons(sources, ref):
    pinned = PINNED["refs"][ref]
    kinds = _constants(sources[ref]["engine"], "_get_decode_only_log_state")
    assert set(pinned["kinds"]) <= kinds, ref
    assert _fields_as_braces(pinned["pieces"]["kind_with_previous"]) in _format_strings(sources[ref]["engine"])
    assert _fields_as_braces(pinned["pieces"]["shape"]) in _format_strings(sources[ref]["shapes"]), ref


@pytest.mark.slow
@pytest.mark.parametrize("ref", REFS)
def test_the_step_is_logged_after_its_counter_moves_on(sources, ref):
    """The logged step number counts steps from 1: the counter moves on before the line is written
    (what the reader's step numbering and the writer's ``step = i + 1`` assume)."""
    engine = sources[ref]["engine"]
    bump = engine.index("self.context.step_count += 1")
    gate = engine.index("self.context.step_count % self.logging_step_interval == 0")
    assert bump < gate, ref
