"""``cgbench report``: the page of a run, a sweep and an advise report holds their numbers, loads
nothing from outside, escapes every user string, and renders its tables without matplotlib."""

from __future__ import annotations

import html
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baseline"
runner = CliRunner()


class Page(HTMLParser):
    """The tables (caption, header, rows of cell texts), images and every src / href of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.links: list[str] = []
        self.images = 0
        self.scripts = 0
        self._cell: list[str] | None = None
        self._caption: str | None = None
        self._in_caption = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href") and v is not None]
        if tag == "img":
            self.images += 1
        elif tag == "script":
            self.scripts += 1
        elif tag == "figcaption":
            self._in_caption, self._caption = True, ""
        elif tag == "table":
            self.tables.append({"caption": self._caption or "", "head": [], "rows": [],
                                "sortable": "sortable" in (a.get("class") or "")})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self._in_caption = False
        elif tag in ("td", "th") and self._cell is not None:
            t = self.tables[-1]
            (t["head"] if tag == "th" else t["rows"][-1]).append("".join(self._cell))
            self._cell = None
        elif tag == "thead" and self.tables:
            self.tables[-1]["rows"].pop()  # the header row is not a row

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self._in_caption:
            self._caption = (self._caption or "") + data

    def table(self, caption_start: str) -> dict:
        found = [t for t in self.tables if t["caption"].startswith(caption_start)]
        assert len(found) == 1, [t["caption"] for t in self.tables]
        return found[0]


def _report(target: Path, out: Path) -> tuple[Page, str]:
    r = runner.invoke(app, ["report", str(target), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stderr.strip().splitlines()[-1] == f"report: {out}"
    text = out.read_text(encoding="utf-8")
    return Page(text), text


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run.json"
    r = runner.invoke(app, ["run", "model=hybrid", "workload.num_requests=64", "--trace", "--requests",
                            "--out", str(path)])
    assert r.exit_code == 0, r.output
    return path


@pytest.fixture
def no_matplotlib(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.mark.slow
def test_a_run_report_holds_its_headline_flags_and_graph_usage(run_file, tmp_path):
    pytest.importorskip("matplotlib")
    doc = json.loads(run_file.read_text())
    page, text = _report(run_file, tmp_path / "run.html")
    headline = page.table("every headline metric")
    values = dict(headline["rows"])
    assert headline["head"] == ["metric", "value"] and not headline["sortable"]
    assert values["outcome"] == doc["metrics"]["outcome"]
    assert values["steps (iterations)"] == f"{doc['metrics']['steps']:,}"
    usage = page.table(f"{sum(1 for g in doc['graph_usage'] if g['hits'])} of {len(doc['graph_usage'])}")
    hits = sorted((g["hits"] for g in doc["graph_usage"] if g["hits"]), reverse=True)
    assert [int(r[1].replace(",", "")) for r in usage["rows"] if not r[0].startswith("eager")] == hits
    assert usage["sortable"]
    assert ("no health flags" in text) == (not doc["warnings"])
    # the summary, the step timeline (--trace) and the queue-wait histogram (--requests)
    assert page.images == 3 and text.count('src="data:image/png;base64,') == 3
    for h in ("Headline", "Health flags", "Graph usage", "Timelines"):
        assert f"<h2>{h}</h2>" in text


@pytest.mark.slow
def test_the_page_loads_nothing_from_outside(run_file, tmp_path):
    page, text = _report(run_file, tmp_path / "run.html")
    assert page.links and all(link.startswith(("data:image/png;base64,", "#")) for link in page.links)
    assert "default-src 'none'" in text and "<link" not in text and "@import" not in text
    assert page.scripts == 1  # the table sorting, inline


@pytest.mark.slow
def test_user_text_is_escaped_everywhere(run_file, tmp_path):
    doc = json.loads(run_file.read_text())
    evil = "<script>alert(1)</script>&<b>"
    doc["overrides"] = [f"workload.name={evil}"]
    doc["labels"]["name"] = evil
    doc["warnings"] = [{"code": "long_graph_wait", "message": f"look: {evil}"}]
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(doc))
    page, text = _report(hostile, tmp_path / "hostile.html")
    assert "alert(1)</script>" not in text and text.count("<script>") == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&lt;b&gt;" in text
    assert page.table("1 flag(s)")["rows"] == [["long_graph_wait", f"look: {evil}"]]


def test_without_matplotlib_the_tables_stay_and_the_page_says_what_is_missing(run_file, tmp_path, no_matplotlib):
    from cgbench.results.extras import install_hint

    out = tmp_path / "run.html"
    r = runner.invoke(app, ["report", str(run_file), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert install_hint("plot") in r.stderr and "3 figure(s) not drawn" in r.stderr
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    assert page.images == 0 and "3 figure(s) not drawn." in text and install_hint("plot") in html.unescape(text)
    assert page.table("every headline metric")["rows"]


def test_a_sweep_report_has_a_row_per_point_and_every_flag(tmp_path, no_matplotlib):
    index = json.loads((BASELINE / "sweep.json").read_text())
    page, text = _report(BASELINE, tmp_path / "sweep.html")
    headline = page.table(f"{len(index['points'])} points")
    assert len(headline["rows"]) == 48 and headline["sortable"]
    col = headline["head"].index("steps (iterations)")
    assert [r[col] for r in headline["rows"]] == [f"{p['metrics']['steps']:,}" for p in index["points"]]
    flags = [(i, w["code"]) for i, p in enumerate(index["points"], 1)
             for w in json.loads((BASELINE / p["file"]).read_text())["warnings"]]
    if flags:
        table = page.table(f"{len(flags)} flag(s) over 48 points")
        assert [(int(r[0]), r[-2]) for r in table["rows"]] == flags
    usage = page.table("graphs captured and replayed per point")
    assert len(usage["rows"]) == 48
    for h in ("Comparisons", "Load curves"):
        assert f"<h2>{h}</h2>" in text


@pytest.mark.slow
def test_an_advise_report_ranks_every_candidate(tmp_path):
    out = tmp_path / "adv"
    r = runner.invoke(app, ["advise", "model=hybrid", "policy=budget", "workload.num_requests=64",
                            "--budget-graphs", "20", "-n", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "advise.json").read_text())
    page, text = _report(out / "advise.json", tmp_path / "advise.html")
    cands = page.table(f"{len(doc['candidates'])} candidates")
    assert [r[1] for r in cands["rows"]] == [c["name"] for c in doc["candidates"]]
    rec = dict(page.table("the recommended CUDA-graph list")["rows"])
    assert rec["candidate"] == doc["recommended"]["name"]
    assert rec["graphs"] == str(doc["recommended"]["num_graphs"])
    assert re.search(r"<h2>Robustness</h2>", text)


@pytest.mark.slow
def test_a_report_replaces_an_earlier_report_but_never_its_input(run_file, tmp_path):
    out = tmp_path / "run.html"
    out.write_text("old")
    _report(run_file, out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    link = tmp_path / "link.html"
    link.symlink_to(run_file)
    before = run_file.read_bytes()
    r = runner.invoke(app, ["report", str(run_file), "-o", str(link)])
    assert r.exit_code == 2 and "input" in r.stderr and run_file.read_bytes() == before
