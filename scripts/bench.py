"""Simulator and matcher performance (make bench): prints a table; figures go to docs/performance.md.

Simulator speed is CPU time (``time.process_time``: the machine is shared, wall time is not the
simulator's), measured around ``run_point`` (stream, engine, metrics). Config composition and
start-up are excluded: numpy is imported and an 8-request run of the same config is made first in
each process, as in a sweep worker, so lazy imports and first calls count as start-up. Every run is
a fresh process with the simulator build asked for (``--build``: plain Python, compiled by ``make
native``, or both; the process reports the build it ran). Fast and oracle runs are interleaved
(fast, oracle, fast, oracle, ...) so that load from other processes hits both alike; a ratio is the
median of the per-pair ratios, with their range as the spread. The scale runs (10k to 1M requests)
each run in a fresh process, for their peak RSS. The ceiling runs (plain Python) count the fast
engine's CPU time inside decode stretches apart from the rest, which the oracle also does: the
oracle's time over that rest is the most the fast / oracle ratio could reach if stretches were free.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cgbench.config.compose import load_config
from cgbench.grids.build import build_grid
from cgbench.grids.shapes import BatchShape, match
from cgbench.native import PURE_ENV, stale_modules

ROOT = Path(__file__).resolve().parents[1]


# What every measured child process does first: read the overrides, compose the config and make an
# 8-request run of it (a trace's first 8 rows), so that numpy's import (~80 ms, paid once per process
# as by a sweep worker), lazy imports and first calls are start-up, never measured. The measuring code follows it.
_PRELUDE = """
import json, sys, time
import numpy
from cgbench.config.compose import load_config
from cgbench.native import simulator_build
from cgbench.pipeline import run_point
o = json.loads(sys.argv[1])
cfg = load_config(o)
run_point(load_config(o + (["workload.window.last=7"] if cfg.workload.trace else ["workload.num_requests=8"])), o)
"""

_POINT_CODE = _PRELUDE + """
import resource
t0 = time.process_time()
doc = run_point(cfg, o)
cpu = time.process_time() - t0
print(json.dumps({"cpu_s": cpu, "tokens": doc["metrics"]["output_tokens"], "build": simulator_build(),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""

_CEILING_CODE = _PRELUDE + """
from cgbench.engine.fast import FastEngine
inside = [0.0]
stretch = FastEngine._decode_stretch
def timed(self, result):
    t = time.process_time()
    try:
        return stretch(self, result)
    finally:
        inside[0] += time.process_time() - t
FastEngine._decode_stretch = timed
t0 = time.process_time()
run_point(cfg, o)
cpu = time.process_time() - t0
print(json.dumps({"cpu_s": cpu, "stretch_s": inside[0], "build": simulator_build()}))
"""

_INSTRUCTIONS_CODE = _PRELUDE + """
import itertools
list(itertools.starmap(run_point, [(cfg, o)]))  # the counted call: valgrind toggles on starmap_next
print(json.dumps({"build": simulator_build()}))
"""


def _build_env(build: str, **extra: str) -> dict[str, str]:
    """This environment with the simulator ``build`` (``python`` or ``mypyc``) forced, and ``extra``."""
    env = dict(os.environ, **extra)
    if build == "python":
        env[PURE_ENV] = "1"
    else:
        env.pop(PURE_ENV, None)
    return env


def _child(code: str, overrides: list[str], build: str, prefix: Sequence[str] = (),
           **env: str) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """Run a measuring program (``_PRELUDE`` + its code) on ``overrides`` in a fresh process with the
    simulator ``build``, optionally under a ``prefix`` command (valgrind): the JSON record it prints
    last, checked to come from the build asked for, and the finished process."""
    out = subprocess.run([*prefix, sys.executable, "-c", code, json.dumps(overrides)], capture_output=True,
                         text=True, cwd=ROOT, env=_build_env(build, **env))
    if out.returncode != 0:
        raise SystemExit(f"bench: a measured run failed:\n{out.stderr[-2000:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    if rec["build"] != build:
        raise SystemExit(f"bench: asked for the {build} simulator, the run used {rec['build']}")
    return rec, out


def stretch_share(overrides: list[str]) -> dict:
    """One plain-Python fast run of ``overrides`` in a fresh process, with the CPU time spent inside decode
    stretches (``FastEngine._decode_stretch``: the fast engine's own machinery, with the finishes and block
    boundaries it meets) counted apart. The rest (arrivals, the rounds that can admit and the steps they
    schedule, the stream, the metrics) runs the arrival, scheduler and accounting code the oracle runs for
    the same steps, so the fast engine's time is at least that rest: the oracle's time over it is the
    most the ratio could reach if stretches cost nothing. Plain Python: a compiled class's method cannot
    be wrapped."""
    return _child(_CEILING_CODE, overrides, "python")[0]


def ceiling(overrides: list[str], repeat: int, oracle_s: float) -> dict:
    """Medians of ``repeat`` ``stretch_share`` runs; the two bounds on fast / oracle they give, with S the
    time outside stretches, Y the time inside and X = ``oracle_s`` - S the oracle's own extra work:
    (S + X) / S if stretches cost nothing, X / Y if the shared work did."""
    runs = [stretch_share(overrides) for _ in range(repeat)]
    outside = statistics.median(r["cpu_s"] - r["stretch_s"] for r in runs)
    inside = statistics.median(r["stretch_s"] for r in runs)
    return {"fast_s": statistics.median(r["cpu_s"] for r in runs), "stretch_s": inside,
            "outside_s": outside, "ceiling": oracle_s / outside, "shared_free": (oracle_s - outside) / inside}


def point_run(overrides: list[str], build: str) -> dict:
    """One ``run_point`` in a fresh process with the simulator ``build`` (``python`` or ``mypyc``): its CPU
    seconds, output tokens and peak RSS (MB). The process reports the build it actually ran."""
    return _child(_POINT_CODE, overrides, build)[0]


def interleaved(overrides: list[str], repeat: int, build: str) -> dict:
    """Fast and oracle runs of ``overrides``, interleaved: medians, ranges, per-pair ratios."""
    fast, oracle, tokens = [], [], 0
    for _ in range(repeat):
        f = point_run(overrides, build)
        o = point_run(overrides + ["engine.oracle=true"], build)
        tokens = f["tokens"]
        fast.append(f["cpu_s"])
        oracle.append(o["cpu_s"])
    ratios = [o / f for f, o in zip(fast, oracle, strict=True)]
    return {"fast": fast, "oracle": oracle, "ratios": ratios, "tokens": tokens,
            "fast_s": statistics.median(fast), "oracle_s": statistics.median(oracle),
            "ratio": statistics.median(ratios)}


# the cost of prefix caching: the Mooncake conversation trace's first ten minutes (its first 1,750
# requests), off and on (a row window: the start-up run replays its first 8 rows)
MOONCAKE = ["workload=mooncake_conv", "model=transformer", "workload.window={first: 0, last: 1749}"]


def prefix_cost(build: str) -> dict:
    """One fresh-process run of ``MOONCAKE`` with prefix caching off and one with it on (CPU seconds)."""
    return {"off": point_run(MOONCAKE, build), "on": point_run(MOONCAKE + ["engine.prefix_caching=true"], build)}


def scale_run(n_requests: int, build: str) -> dict:
    """A chat run of ``n_requests`` in a fresh process: CPU seconds of ``run_point`` and peak RSS (MB)."""
    return point_run(["workload=chat", f"workload.num_requests={n_requests}"], build)


def instructions(overrides: list[str], build: str) -> int:
    """Instructions executed by one ``run_point`` of ``overrides`` (valgrind's callgrind, counting only
    inside the measured call): a figure that does not move with machine load, for comparing two
    versions of the code on a shared machine. Hash seeds are fixed so that two runs execute alike."""
    import shutil
    import tempfile

    if shutil.which("valgrind") is None:
        raise SystemExit("bench --instructions needs valgrind (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as d:
        _, out = _child(_INSTRUCTIONS_CODE, overrides, build,
                        prefix=("valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=starmap_next",
                                f"--callgrind-out-file={d}/callgrind.out"), PYTHONHASHSEED="0")
    counted = [line for line in out.stderr.splitlines() if "Collected :" in line]
    return int(counted[-1].split(":")[-1].replace(",", "").strip())


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


def wall(cmd: list[str], repeat: int, *, caches: bool = True) -> float:
    """The best wall seconds of ``repeat`` runs of ``cmd``; ``caches=False``: with ``CGBENCH_CACHE_DIR=off``
    (what a first call costs: no kept help or composition), else after one call that warms them."""
    env = {**os.environ, "CGBENCH_CACHE_DIR": "off"} if not caches else None
    if caches:
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
        best = min(best, time.perf_counter() - t0)
    return best


def profile_split(requests: int, top: int = 18) -> list[tuple[str, int, float, float]]:
    """Where the fast engine's time goes on the chat preset (engine run only): cProfile's functions with
    the most own time, as (function, calls, own seconds, cumulative seconds), and the run's total."""
    import cProfile
    import pstats

    from cgbench.pipeline import build_engine

    engine = build_engine(load_config(["workload=chat", f"workload.num_requests={requests}"]))
    prof = cProfile.Profile()
    t0 = time.process_time()
    prof.runcall(engine.run)
    total = time.process_time() - t0
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = []
    for (path, line, func), (_, calls, own, cum, _) in stats.items():
        where = f"{Path(path).name}:{line}({func})" if line else func
        rows.append((where, calls, own, cum))
    rows.sort(key=lambda r: -r[2])
    return rows[:top] + [("total, under cProfile (its overhead inflates small calls)", 0, total, total)]


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


# The sweep-overhead figures: tiny points (8 requests: the simulation is a millisecond or two), so
# what a sweep costs beyond its simulations shows; and CPU-bound points for the pool's speed-up.
TINY = ["workload=small", "workload.num_requests=8"]
CPU_BOUND = ["workload=chat", "workload.num_requests=2000"]  # ~0.2 s a point


def sweep_wall(points: int, jobs: int, extra: Sequence[str] = TINY) -> float:
    """Wall seconds of ``cgbench sweep 'seed=range(0,points)' ... --jobs jobs`` (start-up included)."""
    import tempfile

    cgbench = str(Path(sys.executable).with_name("cgbench"))
    with tempfile.TemporaryDirectory() as d:
        cmd = [cgbench, "sweep", f"seed=range(0,{points})", *extra, "--jobs", str(jobs), "--out", f"{d}/s",
               "--format", "csv"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        return time.perf_counter() - t0


def sim_seconds_per_point(points: int = 60) -> float:
    """Median wall seconds of ``run_point`` alone on the tiny points, in this (warmed-up) process."""
    from cgbench.analysis.sweep.run import plan_sweep
    from cgbench.pipeline import run_point

    plan = plan_sweep([f"seed=range(0,{points})", *TINY])
    for p in plan.points[:5]:
        run_point(p.cfg, list(p.overrides))
    times = []
    for p in plan.points:
        t0 = time.perf_counter()
        run_point(p.cfg, list(p.overrides))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _burn(n: int, start=None, out=None) -> float:
    if start is not None:
        start.wait()  # both burners begin together
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    spent = time.perf_counter() - t0
    if out is not None:
        out.put(spent)
    return spent


def parallel_capacity(n: int = 5_000_000) -> float:
    """What two processes gain over one on this machine now: twice one CPU burner's time over the
    time of the slower of two burners started together (2.0 on two idle cores; about 1 when other
    processes keep the cores busy)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    alone = _burn(n)
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_burn, args=(n, start, out)) for _ in range(2)]
    for p in procs:
        p.start()
    together = max(out.get(timeout=300), out.get(timeout=300))
    for p in procs:
        p.join()
    return 2 * alone / together


def sweep_overhead(repeat: int) -> dict[str, float]:
    """Medians of ``repeat`` runs each: the pool's marginal cost of a point beyond its simulation
    (worker-seconds per point, from a 100- and a 400-point sweep with --jobs 2: start-up cancels out),
    a 1,000-point sweep with --jobs 2, and the speed-up of --jobs 2 over --jobs 1 on CPU-bound points
    (per point, from a 24- and a 96-point sweep, and for the whole 96-point sweep)."""
    sim_s = sim_seconds_per_point()
    small, large = 100, 400
    marginal = [(sweep_wall(large, 2) - sweep_wall(small, 2)) * 2 / (large - small) - sim_s for _ in range(repeat)]
    thousand = [sweep_wall(1000, 2) for _ in range(repeat)]
    speedups, walls, capacity = [], [], []
    few, many = 24, 96
    for _ in range(repeat):
        capacity.append(parallel_capacity())
        one = {n: sweep_wall(n, 1, CPU_BOUND) for n in (few, many)}
        two = {n: sweep_wall(n, 2, CPU_BOUND) for n in (few, many)}
        # the marginal wall of a point (start-up, the same whatever the size, cancels out) ...
        speedups.append((one[many] - one[few]) / (two[many] - two[few]))
        walls.append(one[many] / two[many])  # ... and the whole sweep's, start-up included
    return {"sim_ms": sim_s * 1e3, "overhead_ms": statistics.median(marginal) * 1e3,
            "overhead_range": (min(marginal) * 1e3, max(marginal) * 1e3), "thousand_s": statistics.median(thousand),
            "thousand_range": (min(thousand), max(thousand)), "speedup": statistics.median(speedups),
            "speedup_range": (min(speedups), max(speedups)), "wall_speedup": statistics.median(walls),
            "wall_speedup_range": (min(walls), max(walls)), "capacity": statistics.median(capacity),
            "load": os.getloadavg()[0]}


def sweep_rows(r: dict, repeat: int) -> list[tuple[str, str, str]]:
    lo, hi = r["overhead_range"]
    a, b = r["thousand_range"]
    x, y = r["speedup_range"]
    u, v = r["wall_speedup_range"]
    note = f"median (range) of {repeat}; load average {r['load']:.1f} on {os.cpu_count()} cores, shared"
    return [
        (f"sweep: pool cost of a point beyond its simulation (8 requests, --jobs 2; {note})",
         f"{r['overhead_ms']:.1f} ms ({lo:.1f}..{hi:.1f}); sim {r['sim_ms']:.1f} ms", "<= 10 ms"),
        ("sweep: 1,000 points of 8 requests, --jobs 2, wall", f"{r['thousand_s']:.1f} s ({a:.1f}..{b:.1f})", "<= 15 s"),
        ("sweep: CPU-bound points (chat, 2,000 requests): --jobs 1 / --jobs 2, wall of a point "
         "(96- minus 24-point sweep: start-up cancels out)", f"{r['speedup']:.2f}x ({x:.2f}..{y:.2f})", ">= 1.7x"),
        ("sweep: the same, whole 96-point sweep, start-up (~0.8 s, once a sweep) included",
         f"{r['wall_speedup']:.2f}x ({u:.2f}..{v:.2f})", ">= 1.7x"),
        ("control: two CPU burners side by side over one after the other (what this machine's cores "
         "give two processes now; 2.0x when idle)", f"{r['capacity']:.2f}x", ""),
    ]


def compose_ms(repeat: int) -> dict[str, float]:
    """Median ms of one ``load_config`` in a process that has composed before: a fresh Hydra composition
    (``load_config_fresh``), the shared Composer with the same group selections and another value, and
    a new set of group selections (one composition, then cached)."""
    from cgbench.config.compose import load_config_fresh

    def ms(fn, n: int) -> float:
        times = []
        for i in range(n):
            t = time.perf_counter()
            fn(i)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    load_config(["seed=0"])  # imports and the first composition out of the way
    n = max(5, 5 * repeat)
    return {"fresh": ms(lambda i: load_config_fresh([f"seed={i}"]), n),
            "shared": ms(lambda i: load_config([f"seed={100 + i}"]), n),
            "selections": ms(lambda i: load_config([f"workload.num_requests={8 + i}", "model=transformer",
                                                    f"engine.max_requests={64 + i}"]), n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=lambda v: [int(x) for x in v.split(",")], default=[10_000, 100_000, 1_000_000],
                    help="request counts of the chat scale runs (comma-separated; default 10000,100000,1000000)")
    ap.add_argument("--profile", action="store_true", help="only: where the fast engine's time goes (chat)")
    ap.add_argument("--advise", action="store_true", help="only: the time of a 20-candidate advise search")
    ap.add_argument("--sim-only", action="store_true", help="only the simulator figures (no matcher, walls, advise)")
    ap.add_argument("--sweeps", action="store_true", help="only: the sweep-overhead figures")
    ap.add_argument("--scale-only", action="store_true",
                    help="only: the chat scale runs of --scale (CPU s and peak RSS, a fresh process each, per build)")
    ap.add_argument("--write", action="store_true",
                    help="also write the table to docs/performance-bench.json and rewrite docs/performance.md's "
                         "table from it (make bench does; tests/test_bench_docs.py checks the two agree)")
    ap.add_argument("--compose", action="store_true", help="only: the time of one load_config, fresh and shared")
    ap.add_argument("--instructions", action="store_true",
                    help="only: instructions executed by a 2,000-request chat run, fast and oracle, per build "
                         "(valgrind; deterministic, for comparing code versions on a busy machine)")
    fresh = stale_modules() == []
    ap.add_argument("--build", choices=["python", "mypyc", "both"], default="both" if fresh else "python",
                    help="which simulator build(s) to measure: plain Python, the compiled one (make native) or "
                         f"both (default: {'both' if fresh else 'python'}, as a fresh compiled build is "
                         f"{'present' if fresh else 'absent'})")
    args = ap.parse_args()
    console = Console(width=max(Console().width, 120))
    advise_row = ("advise: 20-candidate search, chat preset, 2,000 requests, --jobs 2 ({})", "< 60 s")
    if args.sweeps:
        t = Table(title="sweep overhead")
        for col in ("measure", "value", "target"):
            t.add_column(col, justify="left" if col == "measure" else "right")
        for row in sweep_rows(sweep_overhead(args.repeat), args.repeat):
            t.add_row(*row)
        console.print(t)
        return
    if args.scale_only:
        t = Table(title="chat scale runs (run_point in a fresh process)")
        for col in ("build", "requests", "CPU s", "peak RSS"):
            t.add_column(col, justify="right" if col != "build" else "left")
        for b in (["python", "mypyc"] if args.build == "both" else [args.build]):
            for n in args.scale:
                r = scale_run(n, b)
                t.add_row(b, f"{n:,}", f"{r['cpu_s']:.2f}", f"{r['rss_mb']:.0f} MiB")
        console.print(t)
        return
    if args.compose:
        c = compose_ms(args.repeat)
        console.print(f"load_config, median ms: a fresh Hydra composition {c['fresh']:.1f}; the shared Composer, "
                      f"the default group selections {c['shared']:.1f}; model=transformer (composed once, then "
                      f"cached) {c['selections']:.1f}")
        return
    if args.advise:
        advise_s, verdict = advise_search_s(2000, 20, 2)
        console.print(f"{advise_row[0].format(verdict)}: {advise_s:.1f} s (target {advise_row[1]})")
        return
    if args.instructions:
        t = Table(title="instructions executed by run_point, chat preset, 2,000 requests (valgrind callgrind)")
        for col in ("build", "fast engine", "oracle", "oracle / fast"):
            t.add_column(col, justify="right" if col != "build" else "left")
        for b in (["python", "mypyc"] if args.build == "both" else [args.build]):
            chat = ["workload=chat", "workload.num_requests=2000"]
            fast, oracle = instructions(chat, b), instructions(chat + ["engine.oracle=true"], b)
            t.add_row(b, f"{fast:,}", f"{oracle:,}", f"{oracle / fast:.2f}x")
        console.print(t)
        return
    if args.profile:
        t = Table(title=f"fast engine time split, chat preset, {args.requests} requests (cProfile)")
        for col in ("function", "calls", "own s", "cumulative s"):
            t.add_column(col, justify="right" if col != "function" else "left")
        for name, calls, own, cum in profile_split(args.requests):
            t.add_row(name, f"{calls:,}" if calls else "", f"{own:.3f}", f"{cum:.3f}")
        console.print(t)
        return
    builds = ["python", "mypyc"] if args.build == "both" else [args.build]
    sim = {b: {"chat": interleaved(["workload=chat", f"workload.num_requests={args.requests}"], args.repeat, b),
               "loaded": interleaved(["workload=default"], args.repeat, b),
               "heavy": interleaved(["workload=decode_heavy"], args.repeat, b),
               "scale": {n: scale_run(n, b) for n in args.scale},
               "prefix": prefix_cost(b)} for b in builds}
    ceilings = {}
    if "python" in builds:
        for key, overrides in (("chat", ["workload=chat", f"workload.num_requests={args.requests}"]),
                               ("loaded", ["workload=default"])):
            ceilings[key] = ceiling(overrides, args.repeat, sim["python"][key]["oracle_s"])
    if not args.sim_only:
        m_fast, m_plain, same = matcher_qps(200_000)
        cgbench = str(Path(sys.executable).with_name("cgbench"))
        help_s = wall([cgbench, "--help"], args.repeat)
        help_cold_s = wall([cgbench, "--help"], args.repeat, caches=False)
        run_s = wall([cgbench, "run", "-o", os.devnull], args.repeat)
        run_cold_s = wall([cgbench, "run", "-o", os.devnull], args.repeat, caches=False)
        advise_s, advise_verdict = advise_search_s(2000, 20, 2)
        sweeps = sweep_overhead(args.repeat)

    t = _docs().BenchTable(f"cgbench bench ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()})")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("target", justify="right")

    def spread(xs: list[float], fmt: str) -> str:
        return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"

    def ratio_rows(name: str, r: dict, target: str) -> None:
        t.add_row(f"{name}: fast CPU s, median (range) of {args.repeat}", spread(r["fast"], "{:.3f}"), "")
        t.add_row(f"{name}: oracle (engine.oracle=true) CPU s", spread(r["oracle"], "{:.3f}"), "")
        t.add_row(f"{name}: fast / oracle, interleaved pairs", spread(r["ratios"], "{:.1f}x"), target)

    for b in builds:
        chat, scale = sim[b]["chat"], sim[b]["scale"]
        tag = "python" if b == "python" else "mypyc"
        t.add_section()
        tok_s = chat["tokens"] / chat["fast_s"]
        t.add_row(f"{tag}: sim output tokens/s, chat preset, {args.requests:,} requests ({chat['tokens']:,} tokens)",
                  f"{tok_s:,.0f}", ">= 1,000,000")
        ratio_rows(f"{tag}: chat preset ({args.requests:,} requests)", chat, ">= 10x")
        ratio_rows(f"{tag}: workload=default (512 requests)", sim[b]["loaded"], ">= 15x")
        ratio_rows(f"{tag}: workload=decode_heavy", sim[b]["heavy"], "")
        base_n = min(scale)
        for n, r in scale.items():
            per = r["cpu_s"] / n * 1e6
            flat = per / (scale[base_n]["cpu_s"] / base_n * 1e6)
            last = n == max(scale)
            t.add_row(f"{tag}: chat, {n:,} requests (fresh process): CPU s", f"{r['cpu_s']:.2f}",
                      "<= 20 s" if last else "")
            t.add_row(f"{tag}: chat, {n:,} requests: CPU us/request (x the {base_n:,}-request figure)",
                      f"{per:.1f}, {flat:.2f}x", "flat" if n != base_n else "")
            t.add_row(f"{tag}: chat, {n:,} requests: peak RSS", f"{r['rss_mb']:.0f} MB", "<= 300 MB" if last else "")
        pc = sim[b]["prefix"]
        t.add_row(f"{tag}: Mooncake trace, first 600 s (1,750 requests): CPU s, prefix caching off / on",
                  f"{pc['off']['cpu_s']:.2f} / {pc['on']['cpu_s']:.2f}", "")
        t.add_row(f"{tag}: Mooncake trace, first 600 s: the cost of prefix caching (on / off CPU time)",
                  f"{pc['on']['cpu_s'] / pc['off']['cpu_s']:.2f}x", "")
    if ceilings:
        t.add_section()
        for key, name, target in (("chat", f"chat preset ({args.requests:,} requests)", ">= 10x"),
                                  ("loaded", "workload=default", ">= 15x")):
            c = ceilings[key]
            t.add_row(f"python: {name}: fast CPU s inside decode stretches / outside them (medians)",
                      f"{c['stretch_s']:.3f} / {c['outside_s']:.3f}", "")
            t.add_row(f"python: {name}: ceiling = oracle / fast time outside stretches "
                      "(the ratio if stretches cost nothing)", f"{c['ceiling']:.1f}x", target)
            t.add_row(f"python: {name}: (oracle - outside) / inside (the ratio if the shared work cost nothing)",
                      f"{c['shared_free']:.1f}x", target)
    if len(builds) == 2:
        t.add_section()
        for key, name in (("chat", f"chat preset ({args.requests:,} requests)"), ("loaded", "workload=default"),
                          ("heavy", "workload=decode_heavy")):
            fast, oracle = sim["mypyc"][key]["fast_s"], sim["python"][key]["oracle_s"]
            t.add_row(f"{name}: compiled fast / plain-Python oracle (medians)", f"{oracle / fast:.1f}x", "")
            t.add_row(f"{name}: compiled fast / plain-Python fast (medians)",
                      f"{sim['python'][key]['fast_s'] / fast:.2f}x", "")
    if args.sim_only:
        _finish(console, t, args)
        return
    t.add_row("matcher queries/s, indexed (101-graph Megatron grid, strict)", f"{m_fast:,.0f}", "")
    t.add_row("matcher queries/s, plain scan", f"{m_plain:,.0f}", "")
    t.add_row("matcher speed-up (identical answers: " + ("yes" if same else "NO") + ")",
              f"{m_fast / m_plain:.1f}x", ">= 10x")
    t.add_row("cgbench --help wall, the help kept / caches off", f"{help_s:.3f} / {help_cold_s:.3f} s", "< 0.5 s")
    t.add_row("default cgbench run wall (start-up included), the composition kept / caches off",
              f"{run_s:.3f} / {run_cold_s:.3f} s", "< 1.5 s")
    t.add_row(advise_row[0].format(advise_verdict), f"{advise_s:.1f} s", advise_row[1])
    t.add_section()
    for row in sweep_rows(sweeps, args.repeat):
        t.add_row(*row)
    _finish(console, t, args)


def _docs():
    """``scripts/bench_docs.py``, the module beside this one (imported through the script's folder,
    which a test that loads this script by path does not put on ``sys.path``)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import bench_docs

    return bench_docs


def _finish(console: Console, t, args: argparse.Namespace) -> None:
    """Print the table; with ``--write``, record it and rewrite docs/performance.md's region from it."""
    console.print(t.rich())
    if args.write:
        argv = [a for a in sys.argv[1:] if a != "--write"]
        path = _docs().write(t, " ".join(["python scripts/bench.py", *argv]))
        console.print(f"bench: wrote {path.relative_to(ROOT)} and the table of docs/performance.md")


if __name__ == "__main__":
    main()
