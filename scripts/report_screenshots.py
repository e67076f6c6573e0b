"""Regenerate the README's screenshots of ``cgbench report`` (docs/figures/report_*.png): the page of a
run, of the CI sweep (results/baseline/, 48 points) and of an advise report, each as the top of a
1280 x 1600 window of headless Chromium shows it (``tests/browser.py`` drives it; ``make browser``
installs it).

  python scripts/report_screenshots.py            # the three screenshots
  python scripts/report_screenshots.py --keep DIR # also keep the reports (HTML) in DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
RUN = ["model=hybrid", "workload.num_requests=64"]
ADVISE = ["model=hybrid", "policy=budget", "workload.num_requests=64", "--budget-graphs", "20", "-n", "3"]
WINDOW = (1280, 1600)


def _browser():
    spec = importlib.util.spec_from_file_location("cgbench_test_browser", ROOT / "tests" / "browser.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _cgbench(*args: str, cwd: Path = ROOT) -> None:
    exe = Path(sys.executable).parent / "cgbench"
    cmd = [str(exe) if exe.exists() else "cgbench", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="keep the HTML reports here")
    args = ap.parse_args(argv)
    browser = _browser()
    chromium = browser.find_chromium()
    if chromium is None:
        sys.exit("no Chromium found: make browser (or apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="cgbench-report-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        work = work.resolve()
        _cgbench("run", *RUN, "--trace", "--requests", "--out", "run.json", cwd=work)
        _cgbench("advise", *ADVISE, "--out", "advise", cwd=work)
        # the pages name their input as given: short relative paths
        targets = {"run": ("run.json", work), "sweep": ("results/baseline", ROOT),
                   "advise": ("advise/advise.json", work)}
        FIGURES.mkdir(parents=True, exist_ok=True)
        for name, (target, cwd) in targets.items():
            html = work / f"report_{name}.html"
            _cgbench("report", target, "-o", str(html), cwd=cwd)
            png = browser.screenshot(chromium, html, FIGURES / f"report_{name}.png", *WINDOW)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
