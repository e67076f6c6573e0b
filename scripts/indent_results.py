"""Rewrite the point files of a sweep folder indented (one value a line, ``json.dumps(indent=1)``).

A sweep writes each point compact, on one line (fast: Python's C encoder); ``make baseline`` runs
this on ``results/baseline`` so that the committed reference stays readable in ``git diff`` (a
changed metric is a changed line). The documents are the same on reading; files already indented
are rewritten to the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cgbench.safeio import read_json, write_json_atomic


def indent_folder(folder: Path) -> int:
    """Every ``*.json`` directly in ``folder`` rewritten indented; returns how many."""
    files = sorted(folder.glob("*.json"))
    for path in files:
        write_json_atomic(path, read_json(path))
    return len(files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    n = indent_folder(ap.parse_args().folder)
    print(f"indented {n} JSON file(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
