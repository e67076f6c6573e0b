"""Every file the README and the docs tell a user to write lands in a folder git ignores (under
``results/``), so following any of their examples leaves the checkout clean and later results are
not ``git_dirty``. The README's own commands are also run in a scratch checkout
(``tests/cli/test_readme.py``); this checks every example of every document, statically."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUTPUT_OPTIONS = ("--out", "-o", "--export", ">")
REGENERATED_ON_PURPOSE = ("results/baseline",)  # the CI gate's reference (make baseline)


def example_commands(text: str) -> list[list[str]]:
    """The cgbench command lines of a document's code blocks (a ``$ `` prompt dropped, comments cut)."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        line = line.removeprefix("$ ")
        if inside and line.startswith("cgbench "):
            try:
                lines.append(shlex.split(line.split("  #", 1)[0].rstrip(" \\")))
            except ValueError:
                continue
    return lines


def written_paths(argv: list[str]) -> list[str]:
    """The concrete paths a command line writes (placeholders such as DIR, <run>, $OUT skipped)."""
    out = []
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in OUTPUT_OPTIONS and not re.search(r"[<$\[]|^[A-Z_]+$|^/dev/", value):
            out.append(value)
    return out


def _ignored(paths: list[str]) -> set[str]:
    r = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(paths),
                       capture_output=True, text=True)
    return set(r.stdout.split())


def test_the_example_parser_finds_the_written_paths():
    cmds = example_commands("```\n$ cgbench run x=1 --out a/b.json  # note\ncgbench report r -o c.html\n"
                            "cgbench sweep --out DIR\ncgbench schema result > s.json\n```\ncgbench run --out no\n")
    assert [written_paths(c) for c in cmds] == [["a/b.json"], ["c.html"], [], ["s.json"]]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_every_documented_output_lands_in_an_ignored_folder():
    found = {(doc.relative_to(ROOT).as_posix(), path) for doc in DOCUMENTS
             for argv in example_commands(doc.read_text(encoding="utf-8")) for path in written_paths(argv)
             if not path.startswith(REGENERATED_ON_PURPOSE)}
    assert len(found) >= 15  # the README's reports, exports, calibrations, ... (the parser still sees them)
    ignored = _ignored(sorted({p for _, p in found}))
    assert ignored, "git check-ignore answered nothing"
    stray = sorted((doc, p) for doc, p in found if p not in ignored)
    assert not stray, f"outputs git would see (put them under results/): {stray}"
    # the check can fail: a report at the root, the old examples' folders are seen; an advise report is not
    assert _ignored(["report.html", "cal/host.json", "exports/run", "results/advise/x/advise.json"]) == \
        {"results/advise/x/advise.json"}
