"""Simulator and matcher performance (make bench): prints a table; figures go to docs/performance.md.

Each figure is the best of ``--repeat`` runs (gpt-fast style: warm up, then measure), one process.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cgbench.config.compose import load_config
from cgbench.grids.build import build_grid
from cgbench.grids.shapes import BatchShape, match
from cgbench.pipeline import run_point

ROOT = Path(__file__).resolve().parents[1]


def sim_tokens_per_s(overrides: list[str], repeat: int) -> tuple[float, float, int]:
    cfg = load_config(overrides)
    best, tokens = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        doc = run_point(cfg, overrides)
        best = min(best, time.perf_counter() - t0)
        tokens = doc["metrics"]["output_tokens"]
    return tokens / best, best, tokens


def matcher_qps(n_queries: int) -> tuple[float, float, bool]:
    cfg = load_config(["model=hybrid", "cg=megatron"])
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    assert len(grid.graphs) == 101
    rng = random.Random(0)
    queries = []
    for _ in range(n_queries):
        d = rng.randint(0, 255)
        p = rng.choice([0, 0, 1, 1, 2, 3, 5, 8]) if d < 256 else 0
        p = min(p, 256 - d)
        t = d + p * rng.choice([1, 16, 100, 500, 2000]) if p else d
        queries.append((max(1, min(t, 16384)), p, d))
    graphs = list(grid.graphs)
    t0 = time.perf_counter()
    plain = [match(BatchShape(*q), graphs, grid.strict) for q in queries]
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    fast = [grid.lookup(*q)[0] for q in queries]
    t_fast = time.perf_counter() - t0
    return n_queries / t_fast, n_queries / t_plain, plain == fast


def wall(cmd: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        best = min(best, time.perf_counter() - t0)
    return best


def peak_rss_mb(n_requests: int) -> float:
    code = ("import resource; from cgbench.config.compose import load_config; from cgbench.pipeline import run_point; "
            f"o=['workload=chat','workload.num_requests={n_requests}']; run_point(load_config(o), o); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return int(out.stdout.strip().splitlines()[-1]) / 1024.0


def profile_split(requests: int) -> list[tuple[str, int, float]]:
    """Where the fast engine's time goes on the chat preset: (part, calls, seconds), by timing wrappers."""
    from cgbench.engine.core import Engine
    from cgbench.engine.fast import FastEngine
    from cgbench.pipeline import build_engine

    parts = {"_quiet_steps": FastEngine, "_update": FastEngine, "_run_step": Engine}
    spent = {name: [0, 0.0] for name in parts}
    originals = {name: getattr(cls, name) for name, cls in parts.items()}

    def timed(name):
        def wrapper(self, *args):
            t0 = time.perf_counter()
            try:
                return originals[name](self, *args)
            finally:
                spent[name][0] += 1
                spent[name][1] += time.perf_counter() - t0
        return wrapper

    for name, cls in parts.items():
        setattr(cls, name, timed(name))
    try:
        engine = build_engine(load_config(["workload=chat", f"workload.num_requests={requests}"]))
        t0 = time.perf_counter()
        engine.run()
        total = time.perf_counter() - t0
    finally:
        for name, cls in parts.items():
            setattr(cls, name, originals[name])
    rows = [(name, calls, secs) for name, (calls, secs) in spent.items()]
    return rows + [("everything else (rounds, arrivals, stretch set-up)", 0, total - sum(r[2] for r in rows)),
                   ("total (with timing wrappers)", 0, total)]


def advise_search_s(requests: int, candidates: int, jobs: int) -> tuple[float, str]:
    """Wall time of one ``cgbench advise`` search (a fresh folder, nothing reused), and its verdict."""
    import json
    import tempfile

    cgbench = str(Path(sys.executable).with_name("cgbench"))
    with tempfile.TemporaryDirectory() as d:
        cmd = [cgbench, "advise", "workload=chat", f"workload.num_requests={requests}", "--budget-graphs", "101",
               "--candidates", str(candidates), "--jobs", str(jobs), "--out", d, "--format", "json"]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
    doc = json.loads(out.stdout)
    rec = doc["recommended"]
    o = doc["improvement"]["objective"]
    return wall, (f"{doc['runs']['ran']} runs; {rec['name']}, {rec['num_graphs']} graphs, "
                  f"{o['recommended']:,.0f} vs default {o['default']:,.0f} tok/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rss-requests", type=int, default=100000)
    ap.add_argument("--profile", action="store_true", help="only: where the fast engine's time goes (chat)")
    ap.add_argument("--advise", action="store_true", help="only: the time of a 20-candidate advise search")
    args = ap.parse_args()
    console = Console()
    advise_row = ("advise: 20-candidate search, chat preset, 2,000 requests, --jobs 2 ({})", "< 60 s")
    if args.advise:
        wall, verdict = advise_search_s(2000, 20, 2)
        console.print(f"{advise_row[0].format(verdict)}: {wall:.1f} s (target {advise_row[1]})")
        return
    if args.profile:
        t = Table(title=f"fast engine time split, chat preset, {args.requests} requests")
        for col in ("part", "calls", "seconds"):
            t.add_column(col, justify="right" if col != "part" else "left")
        for name, calls, secs in profile_split(args.requests):
            t.add_row(name, f"{calls:,}" if calls else "", f"{secs:.3f}")
        console.print(t)
        return
    base = ["workload=chat", f"workload.num_requests={args.requests}"]
    fast, fast_s, tokens = sim_tokens_per_s(base, args.repeat)
    oracle, oracle_s, _ = sim_tokens_per_s(base + ["engine.oracle=true"], 1)
    loaded = ["workload=default", "workload.num_requests=5000"]
    l_fast, l_fast_s, _ = sim_tokens_per_s(loaded, args.repeat)
    l_oracle, l_oracle_s, _ = sim_tokens_per_s(loaded + ["engine.oracle=true"], 1)
    d_fast, d_fast_s, _ = sim_tokens_per_s(["workload=decode_heavy"], args.repeat)
    d_oracle, d_oracle_s, _ = sim_tokens_per_s(["workload=decode_heavy", "engine.oracle=true"], 1)
    m_fast, m_plain, same = matcher_qps(200_000)
    cgbench = str(Path(sys.executable).with_name("cgbench"))
    help_s = wall([cgbench, "--help"], args.repeat)
    run_s = wall([cgbench, "run", "-o", os.devnull], args.repeat)
    rss = peak_rss_mb(args.rss_requests)
    advise_s, advise_verdict = advise_search_s(2000, 20, 2)

    t = Table(title=f"cgbench bench ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                    f"Python {platform.python_version()})")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("target", justify="right")
    t.add_row(f"sim output tokens/s, chat preset, {args.requests} requests ({tokens:,} tokens, {fast_s:.2f} s)",
              f"{fast:,.0f}", ">= 1,000,000")
    t.add_row(f"same, step-by-step oracle engine ({oracle_s:.2f} s)", f"{oracle:,.0f}", "")
    t.add_row("fast / oracle", f"{fast / oracle:.1f}x", ">= 10x")
    t.add_row(f"loaded batch (workload=default, 5000 requests): fast {l_fast_s:.2f} s, oracle {l_oracle_s:.2f} s",
              f"{l_fast:,.0f}", "")
    t.add_row("fast / oracle, loaded batch", f"{l_fast / l_oracle:.1f}x", "")
    t.add_row(f"fast / oracle, decode_heavy preset ({d_fast_s:.3f} s vs {d_oracle_s:.3f} s)",
              f"{d_fast / d_oracle:.1f}x", "")
    t.add_row("matcher queries/s, indexed (101-graph Megatron grid, strict)", f"{m_fast:,.0f}", "")
    t.add_row("matcher queries/s, plain scan", f"{m_plain:,.0f}", "")
    t.add_row("matcher speed-up (identical answers: " + ("yes" if same else "NO") + ")",
              f"{m_fast / m_plain:.1f}x", ">= 10x")
    t.add_row("cgbench --help wall", f"{help_s:.3f} s", "< 0.5 s")
    t.add_row("default cgbench run wall (start-up included)", f"{run_s:.3f} s", "< 1.5 s")
    t.add_row(f"peak RSS, {args.rss_requests:,}-request run, no --trace", f"{rss:.0f} MB", "< 500 MB")
    t.add_row(advise_row[0].format(advise_verdict), f"{advise_s:.1f} s", advise_row[1])
    console.print(t)


if __name__ == "__main__":
    main()
