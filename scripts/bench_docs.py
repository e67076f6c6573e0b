"""The figures ``make bench`` measures, kept true in the docs: the bench writes its table to a record
(``docs/performance-bench.json``: the rows, the machine, the commit, the date, the command) and
rewrites the marked region of ``docs/performance.md`` from that record, with the record's digest.
``tests/test_bench_docs.py`` renders the region again from the committed record and compares: a
figure edited by hand, or a record changed without the docs, fails it (no timing involved).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "performance-bench.json"
DOC = ROOT / "docs" / "performance.md"
REGION = "main"


class BenchTable:
    """The bench's table as it is built (Rich's ``Table`` calls: ``add_column``, ``add_row``,
    ``add_section``), kept as plain rows so that it can be printed and written to the record."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.columns: list[str] = []
        self.sections: list[list[list[str]]] = [[]]

    def add_column(self, name: str, **_: Any) -> None:
        self.columns.append(name)

    def add_row(self, *cells: str) -> None:
        self.sections[-1].append([str(c) for c in cells])

    def add_section(self) -> None:
        if self.sections[-1]:
            self.sections.append([])

    def rich(self):
        from rich.table import Table

        t = Table(title=self.title)
        for i, name in enumerate(self.columns):
            t.add_column(name, justify="left" if i == 0 else "right")
        for k, rows in enumerate(self.sections):
            if k:
                t.add_section()
            for row in rows:
                t.add_row(*row)
        return t


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def machine() -> dict[str, Any]:
    """What the figures were measured on (the load is the 1-minute average when the bench ended)."""
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "memory_gib": mem_gib,
            "python": platform.python_version(), "platform": platform.platform(terse=True),
            "load_average": round(os.getloadavg()[0], 1)}


def record_of(table: BenchTable, command: str) -> dict[str, Any]:
    return {"title": table.title, "columns": table.columns, "sections": table.sections, "machine": machine(),
            "commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "date": datetime.now(UTC).date().isoformat(), "command": command}


def record_bytes(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_region(record: dict[str, Any], data_digest: str) -> str:
    """The docs region for ``record``: its origin line, then the table in Markdown."""
    m = record["machine"]
    commit = (record["commit"] or "unknown")[:7] + (" with uncommitted changes" if record["dirty"] else "")
    lines = [f"<!-- bench:{REGION} (written by make bench from docs/performance-bench.json, digest {data_digest};"
             " edit neither by hand) -->",
             f"Measured by `{record['command']}` on {record['date']} at commit `{commit}`: {m['cpu']}, {m['cores']} "
             f"cores, {m['memory_gib']} GiB, Python {m['python']}, {m['platform']}; load average "
             f"{m['load_average']} when it ended (a shared machine: the ranges show the other tenants' load).",
             "", f"**{_cell(record['title'])}**", "",
             "| " + " | ".join(_cell(c) for c in record["columns"]) + " |",
             "|" + "---|" * len(record["columns"])]
    for rows in record["sections"]:
        for row in rows:
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    lines.append(f"<!-- /bench:{REGION} -->")
    return "\n".join(lines)


_REGION = re.compile(rf"<!-- bench:{REGION} .*?<!-- /bench:{REGION} -->", re.DOTALL)


def doc_region(text: str) -> str | None:
    """The generated region of a docs page's text, or None when it has none."""
    m = _REGION.search(text)
    return m.group(0) if m else None


def write(table: BenchTable, command: str) -> Path:
    """Write the record and rewrite the docs region from it; returns the record's path."""
    record = record_of(table, command)
    data = record_bytes(record)
    RECORD.write_bytes(data)
    text = DOC.read_text()
    region = render_region(record, digest(data))
    if doc_region(text) is None:
        raise SystemExit(f"bench: {DOC} has no <!-- bench:{REGION} ... --> region to rewrite")
    DOC.write_text(_REGION.sub(lambda _: region, text, count=1))
    return RECORD


def problems(doc_text: str, record_data: bytes) -> list[str]:
    """Why the docs region is not the one ``make bench`` last wrote from ``record_data``; [] if it is."""
    region = doc_region(doc_text)
    if region is None:
        return [f"no <!-- bench:{REGION} ... --> region in the page"]
    record = json.loads(record_data)
    expected = render_region(record, digest(record_data))
    if region == expected:
        return []
    out = []
    if f"digest {digest(record_data)}" not in region:
        out.append("the region's digest is not the record's: the record changed without the docs (run make bench)")
    got_rows, want_rows = set(region.splitlines()), set(expected.splitlines())
    out += [f"not what make bench wrote: {line}" for line in region.splitlines() if line not in want_rows]
    out += [f"missing: {line}" for line in expected.splitlines() if line not in got_rows]
    return out
