"""Regenerate the README's figures (docs/figures/*.png) with `cgbench plot`, and their captions with
them: each caption's numbers are computed from the same results and written into README.md between
its markers (``<!-- caption:NAME -->`` ... ``<!-- /caption:NAME -->``).

  python scripts/plot_figures.py                  # both figures and both captions
  python scripts/plot_figures.py --keep DIR       # also keep the rate sweep's folder in DIR
  python scripts/plot_figures.py --rate-dir DIR   # plot an existing rate sweep instead of running one
  python scripts/plot_figures.py --captions-only  # the CI caption only, from results/baseline (no figures)

* ``ci_longest_wait.png``: the longest gating wait of the CI sweep (results/baseline/, the gate's
  committed reference; 2 models x 3 policies x chunked / non-chunked x ample / tight KV x 2
  workloads), faceted by model and by KV pool x workload.
* ``rate_load.png``: latency and throughput against the arrival rate from the rate preset
  (``cgbench sweep sweep=rate``: 4 policies x 3 grids x 4 rates, sim backend, deterministic), with
  the SLO (p99 TTFT <= slo.ttft_ms) and each curve's maximum sustainable rate.

Both come from the sim backend, so the same commit gives the same figures and captions
(tests/analysis/test_figure_captions.py holds the CI caption to results/baseline).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
README = ROOT / "README.md"
LONG_WAIT = 10  # iterations: a wait at least this long is "holding requests back for long"


def _cgbench(*args: str) -> str:
    exe = Path(sys.executable).parent / "cgbench"
    cmd = [str(exe) if exe.exists() else "cgbench", *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def _points(sweep_dir: Path) -> list[tuple[dict[str, str], dict]]:
    index = json.loads((sweep_dir / "sweep.json").read_text())
    return [(p["params"], p["metrics"]) for p in index["points"] if p["status"] == "done"]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def ci_caption(baseline: Path) -> str:
    """The caption of ci_longest_wait.png, its numbers from the CI sweep ``baseline``."""
    points = _points(baseline)
    long = [(p, m) for p, m in points if m["max_cg_wait_iters"] >= LONG_WAIT]
    groups = sorted({(p["policy"], p["engine.chunked_prefill"], p["workload"]) for p, _ in long})
    by_model: dict[str, int] = {}
    for p, m in long:
        by_model[p["model"]] = max(by_model.get(p["model"], 0), m["max_cg_wait_iters"])
    never = sorted({p["policy"] for p, _ in points} - {p["policy"] for p, m in points if m["max_cg_wait_iters"]})
    text = ("*The CI sweep (`results/baseline/`, the gate's reference): the longest gating wait in iterations, "
            "one bar per policy, rows by model, columns by KV pool and workload, x by chunked prefill. ")
    if len(groups) == 1:
        policy, chunked, workload = groups[0]
        text += (f"Only `{policy}` {'with' if chunked == 'True' else 'without'} chunked prefill holds requests "
                 f"back for long ({_and([str(n) for n in by_model.values()])} iterations on the {workload} "
                 f"workload, {_and(list(by_model))})")
    elif groups:
        text += "Requests wait long under " + _and([f"`{g[0]}` (chunked prefill {g[1]}, {g[2]})" for g in groups])
    else:
        text += f"No policy holds a request back for {LONG_WAIT} iterations or more"
    text += "; " + _and([f"`{p}`" for p in never]) + " never wait" + ("s" if len(never) == 1 else "") + ".*" \
        if never else ".*"
    return _wrapped(text)


def rate_caption(rate_dir: Path) -> str:
    """The caption of rate_load.png, its numbers from the rate sweep ``rate_dir``."""
    from cgbench.analysis.plots.load import max_sustainable

    index = json.loads((rate_dir / "sweep.json").read_text())
    bound = float(index["axes"].get("slo.ttft_ms", ["1000"])[0])
    n_req = index["axes"].get("workload.num_requests", ["?"])[0]
    curves: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for p, m in _points(rate_dir):
        curves[(p["cg"], p["policy"])].append((float(p["workload.arrival.rate"]), m["ttft_ms.p99"]))
    grids = list(dict.fromkeys(cg for cg, _ in curves))
    parts = []
    for cg in grids:
        rates: dict[str, list[str]] = defaultdict(list)
        for (g, policy), pts in curves.items():
            if g == cg:
                best = max_sustainable(pts, bound)
                rates["none" if best is None else f"{best:g}"].append(f"`{policy}`")
        if len(rates) == 1:
            parts.append(f"{cg}: every policy {next(iter(rates))}")
        else:
            parts.append(f"{cg}: " + "; ".join(f"{_and(ps)} {r}" for r, ps in rates.items()))
    best_p, best_m = max(_points(rate_dir), key=lambda pm: pm[1]["output_throughput_tok_s"])
    text = (f"*`cgbench sweep sweep=rate` (hybrid model, chat workload, {n_req} requests per point): latency and "
            "throughput against the arrival rate, one curve per policy, one row per grid; a metric keeps one y "
            f"scale in every row. The dashed line is the SLO (p99 TTFT ≤ {bound:g} ms, `slo.ttft_ms`); a star marks "
            "each curve's maximum sustainable rate, the highest measured rate at which it and every lower rate meet "
            "the SLO (also in the legend). Curves that coincide are named (`defer (= megatron)`) and drawn slightly "
            "apart. Maximum sustainable rate (req/s) by grid: " + "; ".join(parts) + ". The highest output "
            f"throughput is {best_m['output_throughput_tok_s']:,.0f} tok/s (`{best_p['policy']}`, {best_p['cg']} grid, "
            f"{float(best_p['workload.arrival.rate']):g} req/s).*")
    return _wrapped(text)


def _wrapped(text: str) -> str:
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def caption_in(text: str, name: str) -> str:
    """The caption of ``name`` between its markers in ``text`` (the README)."""
    m = re.search(rf"<!-- caption:{re.escape(name)} -->\n(.*?)\n<!-- /caption:{re.escape(name)} -->", text, re.S)
    if m is None:
        raise SystemExit(f"README.md has no <!-- caption:{name} --> ... <!-- /caption:{name} --> markers")
    return m.group(1)


def with_caption(text: str, name: str, caption: str) -> str:
    old = caption_in(text, name)
    return text.replace(f"<!-- caption:{name} -->\n{old}\n", f"<!-- caption:{name} -->\n{caption}\n", 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="keep the rate sweep's folder here")
    ap.add_argument("--rate-dir", type=Path, help="an existing rate sweep (cgbench sweep sweep=rate) to plot")
    ap.add_argument("--captions-only", action="store_true", help="rewrite the CI caption only")
    args = ap.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    readme = with_caption(readme, "ci_longest_wait", ci_caption(ROOT / "results" / "baseline"))
    if args.captions_only:
        README.write_text(readme, encoding="utf-8")
        return 0
    FIGURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cgbench-figures-") as tmp:
        work = Path(tmp)
        _cgbench("plot", "results/baseline", "--out", str(work / "ci"), "--y", "max_cg_wait_iters")
        shutil.copyfile(work / "ci" / "bars_max_cg_wait_iters.png", FIGURES / "ci_longest_wait.png")

        sweep = args.rate_dir or args.keep or work / "rate"
        if args.rate_dir is None:
            _cgbench("sweep", "sweep=rate", "--out", str(sweep), "--jobs", "2", "--format", "csv")
        _cgbench("plot", str(sweep), "--out", str(work / "rate"))
        shutil.copyfile(work / "rate" / "load.png", FIGURES / "rate_load.png")
        readme = with_caption(readme, "rate_load", rate_caption(sweep))
    README.write_text(readme, encoding="utf-8")
    for name in ("ci_longest_wait.png", "rate_load.png"):
        print(FIGURES / name)
    print(README)
    return 0


if __name__ == "__main__":
    sys.exit(main())
