"""The HTML report in a real headless browser (Chromium, ``tests/browser.py``): the pages of a run, of
the 48-point CI sweep (results/baseline/) and of an advise report open with no console error, no
request outside the page, every figure decoded, no heading, note, table or figure overlapping
another, nothing wider than the window, every sortable column sorting both ways, and a screenshot
that is not a blank page. Skipped, saying why, where no Chromium is installed (``make browser``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.browser import find_chromium, open_page, pixel_spread, screenshot

pytestmark = pytest.mark.e2e  # a headless browser
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install it: make browser, or "
                                                             "apt-get install chromium; or set CGBENCH_CHROMIUM)")
runner = CliRunner()
MIN_SPREAD = 8.0  # grey-level std of a page of text, tables and figures: ~30; a blank page: 0


def _invoke(*args: str) -> None:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("matplotlib")
    d = tmp_path_factory.mktemp("browser")
    _invoke("run", "model=hybrid", "workload.num_requests=64", "--trace", "--requests", "--out", str(d / "run.json"))
    _invoke("advise", "model=hybrid", "policy=budget", "workload.num_requests=64", "--budget-graphs", "20", "-n", "3",
            "--out", str(d / "adv"))
    targets = {"run": d / "run.json", "sweep": ROOT / "results" / "baseline", "advise": d / "adv" / "advise.json"}
    for name, target in targets.items():
        _invoke("report", str(target), "-o", str(d / f"{name}.html"))
    return {name: d / f"{name}.html" for name in targets}


@needs_chromium
@pytest.mark.parametrize(("name", "headings", "images"), [
    ("run", ["Headline", "Health flags", "Graph usage", "Timelines"], 3),
    ("sweep", ["Headline", "Health flags", "Graph usage", "Comparisons", "Load curves"], 4),
    ("advise", ["Recommendation", "Robustness", "Candidates"], 1),
])
def test_the_report_opens_clean_in_chromium(reports, tmp_path, name, headings, images):
    assert CHROMIUM is not None
    page = open_page(CHROMIUM, reports[name])
    p = page.probe
    assert page.errors == []
    assert p["headings"] == headings
    assert len(p["images"]) == images and all(im["complete"] and im["width"] > 0 for im in p["images"])
    assert p["overlaps"] == []
    assert all(b["x1"] > b["x0"] and b["y1"] > b["y0"] for b in p["boxes"])
    assert p["page_width"] <= p["window_width"]  # wide tables scroll inside their box, the page does not
    assert p["sorting"] and all(s["ascending"] and s["descending"] for s in p["sorting"]), p["sorting"]
    if name == "sweep":
        assert p["tables"][0] == {"rows": 48, "sortable": True}
    png = screenshot(CHROMIUM, reports[name], tmp_path / f"{name}.png")
    assert pixel_spread(png) > MIN_SPREAD


@needs_chromium
def test_the_probe_sees_errors_requests_and_overlaps(tmp_path):
    """The checks above can fail: a page with a console error, an image from the network (blocked by
    the report's policy) and two headings on top of each other."""
    assert CHROMIUM is not None
    bad = tmp_path / "bad.html"
    from cgbench.cli.report_html import CSP

    bad.write_text(f"""<!DOCTYPE html><html><head>
<meta http-equiv="Content-Security-Policy" content="{CSP}"></head>
<body><h2 style="position:absolute;top:10px">one</h2><h2 style="position:absolute;top:14px">two</h2>
<img src="http://198.51.100.7/x.png" alt="remote"><script>console.error("boom");</script></body></html>""")
    page = open_page(CHROMIUM, bad)
    assert any("console.error: boom" in e for e in page.errors)
    assert any(e.startswith("CSP blocked http://198.51.100.7") for e in page.errors)
    assert ["h2 one", "h2 two"] in page.probe["overlaps"]
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><head></head><body></body></html>")
    assert pixel_spread(screenshot(CHROMIUM, blank, tmp_path / "blank.png")) < MIN_SPREAD
