"""docs/performance.md's bench table is the one ``make bench`` last wrote: rendered again from the
committed record (docs/performance-bench.json, whose digest the page carries), it must be the page's
region line for line. A figure edited by hand, or a record regenerated without the page, fails here.
Nothing is timed."""

from __future__ import annotations

import json

from tests.helpers import load_script

bench_docs = load_script("bench_docs")


def test_the_docs_table_is_the_one_make_bench_last_wrote():
    record = bench_docs.RECORD.read_bytes()
    assert bench_docs.problems(bench_docs.DOC.read_text(), record) == []


def test_a_figure_edited_by_hand_or_a_record_changed_alone_is_caught():
    record = bench_docs.RECORD.read_bytes()
    page = bench_docs.DOC.read_text()
    region = bench_docs.doc_region(page)
    row = next(line for line in region.splitlines() if line.startswith("| ") and "---" not in line
               and "measure" not in line)
    cells = row.split(" | ")
    edited = page.replace(row, " | ".join([cells[0], cells[1] + "0", *cells[2:]]), 1)
    assert any(p.startswith("not what make bench wrote") for p in bench_docs.problems(edited, record))
    doc = json.loads(record)
    doc["date"] = "1999-01-01"
    other = bench_docs.record_bytes(doc)
    assert any("digest" in p for p in bench_docs.problems(page, other))


def test_the_record_names_its_machine_commit_date_and_command():
    doc = json.loads(bench_docs.RECORD.read_bytes())
    assert {"cpu", "cores", "python", "load_average"} <= set(doc["machine"])
    assert len(doc["commit"]) == 40 and doc["date"] and doc["command"].startswith("python scripts/bench.py")
    assert doc["columns"] == ["measure", "value", "target"] and any(doc["sections"])
