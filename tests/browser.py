"""A real headless browser for the HTML report's tests: Chromium driven by its command line.

``open_page`` loads a copy of a page with a probe injected: a first script that records every
uncaught error, ``console.error`` / ``console.warn`` call, Content-Security-Policy violation (a
request for anything outside the page) and image that fails to decode, and a last one that, once
the page has loaded, measures it (the bounding boxes of the headings, notes, tables, figures and
their captions; whether each sortable table sorts) and writes what it found into the DOM as JSON.
``--dump-dom`` prints that DOM. ``screenshot`` takes a PNG of the page as a window of a given size
shows it. Chromium comes from Debian's ``chromium`` package (``make browser`` installs it; the
tests skip, saying so, where no Chromium is found)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 120
PROBE_ID = "cgbench-probe"

_EARLY = """<script>
window.__probe = {errors: []};
(function () {
  var p = window.__probe;
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t.tagName === "IMG") { p.errors.push("image failed: " + (t.alt || "")); return; }
    p.errors.push("error: " + e.message);
  }, true);
  window.addEventListener("unhandledrejection", function (e) { p.errors.push("rejection: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    p.errors.push("CSP blocked " + e.blockedURI + " (" + e.violatedDirective + ")");
  });
  ["error", "warn"].forEach(function (level) {
    var original = console[level];
    console[level] = function () {
      p.errors.push("console." + level + ": " + Array.prototype.join.call(arguments, " "));
      return original.apply(console, arguments);
    };
  });
}());
</script>
"""

_LATE = """<script>
window.addEventListener("load", function () {
  var p = window.__probe;
  function box(el) {
    var r = el.getBoundingClientRect();
    return {tag: el.tagName.toLowerCase(), text: (el.textContent || "").trim().slice(0, 60),
            x0: r.left + window.scrollX, y0: r.top + window.scrollY,
            x1: r.right + window.scrollX, y1: r.bottom + window.scrollY};
  }
  var blocks = Array.prototype.slice.call(document.querySelectorAll(
    "h1, h2, p.note, dl.facts, nav, div.missing, figure > figcaption, div.scroll, img.figure, footer"));
  p.boxes = blocks.map(box);
  p.overlaps = [];
  for (var i = 0; i < blocks.length; i++) {
    for (var j = i + 1; j < blocks.length; j++) {
      if (blocks[i].contains(blocks[j]) || blocks[j].contains(blocks[i])) { continue; }
      var a = p.boxes[i], b = p.boxes[j];
      if (a.x0 < b.x1 - 0.5 && b.x0 < a.x1 - 0.5 && a.y0 < b.y1 - 0.5 && b.y0 < a.y1 - 0.5) {
        p.overlaps.push([a.tag + " " + a.text, b.tag + " " + b.text]);
      }
    }
  }
  p.page_width = document.documentElement.scrollWidth;
  p.window_width = window.innerWidth;
  p.images = Array.prototype.map.call(document.images, function (im) {
    return {alt: im.alt, width: im.naturalWidth, height: im.naturalHeight, complete: im.complete};
  });
  p.headings = Array.prototype.map.call(document.querySelectorAll("h2"), function (h) { return h.textContent; });
  p.tables = Array.prototype.map.call(document.querySelectorAll("table"), function (t) {
    return {rows: t.tBodies[0].rows.length, sortable: t.classList.contains("sortable")};
  });
  // every sortable table: a click on each numeric column sorts it ascending, a second click descending
  p.sorting = [];
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (t, ti) {
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th, col) {
      var first = t.tBodies[0].rows[0].cells[col];
      if (!first || first.getAttribute("data-v") === null) { return; }
      function values() {
        return Array.prototype.map.call(t.tBodies[0].rows, function (r) {
          var v = r.cells[col].getAttribute("data-v");
          return v === null ? null : parseFloat(v);
        }).filter(function (v) { return v !== null; });
      }
      function ordered(vs, sign) {
        for (var k = 1; k < vs.length; k++) { if (sign * (vs[k] - vs[k - 1]) < 0) { return false; } }
        return true;
      }
      th.click();
      var up = ordered(values(), 1);
      th.click();
      var down = ordered(values(), -1);
      p.sorting.push({table: ti, column: th.textContent, ascending: up, descending: down});
    });
  });
  var out = document.createElement("pre");
  out.id = "PROBE_ID";
  out.textContent = JSON.stringify(p);
  document.body.appendChild(out);
});
</script>
""".replace("PROBE_ID", PROBE_ID)


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable, or None."""
    for name in (os.environ.get("CGBENCH_CHROMIUM", ""), *NAMES):
        if name and (path := shutil.which(name)):
            return path
    return None


@dataclass
class Page:
    probe: dict[str, Any]

    @property
    def errors(self) -> list[str]:
        return self.probe["errors"]


def _flags(profile: str) -> list[str]:
    # --no-sandbox: the tests may run as root (a container), where Chromium's sandbox refuses to start
    return ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-dev-shm-usage", "--disable-extensions", f"--user-data-dir={profile}"]


def _run(chromium: str, args: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="cgbench-chromium-") as profile:
        return subprocess.run([chromium, *_flags(profile), *args], capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)


def open_page(chromium: str, html: Path, width: int = 1280, height: int = 1800) -> Page:
    """Load ``html`` (a copy, with the probe) in headless Chromium; what the probe found."""
    text = html.read_text(encoding="utf-8")
    assert "<head>" in text and "</body>" in text, html
    probed = text.replace("<head>", "<head>\n" + _EARLY, 1)
    probed = probed[:probed.rindex("</body>")] + _LATE + probed[probed.rindex("</body>"):]
    copy = html.with_name(html.stem + ".probed.html")
    copy.write_text(probed, encoding="utf-8")
    try:
        done = _run(chromium, [f"--window-size={width},{height}", "--virtual-time-budget=10000", "--dump-dom",
                               copy.resolve().as_uri()])
    finally:
        copy.unlink()
    marker = f'<pre id="{PROBE_ID}">'
    if done.returncode != 0 or marker not in done.stdout:
        raise AssertionError(f"chromium --dump-dom gave no probe (exit {done.returncode}):\n{done.stderr[-2000:]}")
    import html as html_lib

    body = done.stdout.split(marker, 1)[1].split("</pre>", 1)[0]
    return Page(json.loads(html_lib.unescape(body)))


def screenshot(chromium: str, html: Path, png: Path, width: int = 1280, height: int = 1800) -> Path:
    """A PNG of ``html`` as a ``width`` x ``height`` window shows its top."""
    # every compositor stage before the capture: else a large image may be captured half painted
    done = _run(chromium, [f"--window-size={width},{height}", "--virtual-time-budget=10000",
                           "--run-all-compositor-stages-before-draw", f"--screenshot={png.resolve()}",
                           html.resolve().as_uri()])
    if done.returncode != 0 or not png.is_file():
        raise AssertionError(f"chromium --screenshot wrote no PNG (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return png


def pixel_spread(png: Path) -> float:
    """The standard deviation of the PNG's grey levels (0 for a blank page)."""
    import numpy as np
    from PIL import Image

    with Image.open(png) as im:
        grey = np.asarray(im.convert("L"), dtype=float)
    return float(grey.std())
