"""Regenerate the README's figures (docs/figures/*.png) with `cgbench plot`.

  python scripts/plot_figures.py            # both figures
  python scripts/plot_figures.py --keep DIR # also keep the rate sweep's folder in DIR

* ``ci_longest_wait.png``: the longest gating wait of the CI sweep (results/baseline/, the gate's
  committed reference; 2 models x 3 policies x chunked / non-chunked x ample / tight KV x 2
  workloads), faceted by model and by KV pool x workload.
* ``rate_load.png``: latency and throughput against the arrival rate from the rate preset
  (``cgbench sweep sweep=rate``: 4 policies x 3 grids x 4 rates, sim backend, deterministic), with
  the SLO (p99 TTFT <= slo.ttft_ms) and each curve's maximum sustainable rate.

Both come from the sim backend, so the same commit gives the same figures.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"


def _cgbench(*args: str) -> str:
    exe = Path(sys.executable).parent / "cgbench"
    cmd = [str(exe) if exe.exists() else "cgbench", *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="keep the rate sweep's folder here")
    args = ap.parse_args(argv)
    FIGURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cgbench-figures-") as tmp:
        work = Path(tmp)
        _cgbench("plot", "results/baseline", "--out", str(work / "ci"), "--y", "max_cg_wait_iters")
        shutil.copyfile(work / "ci" / "bars_max_cg_wait_iters.png", FIGURES / "ci_longest_wait.png")

        sweep = args.keep or work / "rate"
        _cgbench("sweep", "sweep=rate", "--out", str(sweep), "--jobs", "2", "--format", "csv")
        _cgbench("plot", str(sweep), "--out", str(work / "rate"))
        shutil.copyfile(work / "rate" / "load.png", FIGURES / "rate_load.png")
    for name in ("ci_longest_wait.png", "rate_load.png"):
        print(FIGURES / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
