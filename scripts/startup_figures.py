"""Start-up and sweep-overhead figures of two cgbench installs side by side (docs/performance.md).

    python scripts/startup_figures.py BEFORE_BIN AFTER_BIN [--repeat 3] [--only TEXT]

BEFORE_BIN and AFTER_BIN are the ``bin`` folders of two virtual environments (each with its own
checkout installed, e.g. ``make install`` in a worktree of the older commit). Every figure is whole
``cgbench`` processes, run interleaved (before, after, before, ...) so that load from other processes
hits both alike, the median of ``--repeat`` with wall and CPU time (user + system of the child).
"Warm" runs first make the same call once (a later call of the same command finds the kept help or
composition); "caches off" sets ``CGBENCH_CACHE_DIR=off`` (what a first call costs).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload=small", "workload.num_requests=8"]
CPU_BOUND = ["workload=chat", "workload.num_requests=2000"]


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall s, CPU s) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cases(tmp: str) -> list[tuple[str, list[str], bool]]:
    """(name, arguments, caches on) of each figure."""
    def sweep(points: int, extra: list[str], jobs: int) -> list[str]:
        return ["sweep", f"seed=range(0,{points})", *extra, "--jobs", str(jobs), "--out", f"{tmp}/sweep-{{side}}",
                "--format", "csv"]

    return [
        ("cgbench --help (warm)", ["--help"], True),
        ("cgbench --help (caches off)", ["--help"], False),
        ("default cgbench run -o FILE (warm)", ["run", "-o", f"{tmp}/run-{{side}}.json"], True),
        ("default cgbench run -o FILE (caches off)", ["run", "-o", f"{tmp}/run-{{side}}.json"], False),
        ("one tiny cgbench run (8 requests, warm)", ["run", *TINY, "-o", f"{tmp}/tiny-{{side}}.json"], True),
        ("200 tiny points, --jobs 1 (warm)", sweep(200, TINY, 1), True),
        ("200 tiny points, --jobs 2 (warm)", sweep(200, TINY, 2), True),
        ("24 CPU-bound points (chat, 2,000 requests), --jobs 1", sweep(24, CPU_BOUND, 1), True),
        ("24 CPU-bound points (chat, 2,000 requests), --jobs 2", sweep(24, CPU_BOUND, 2), True),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path, help="the bin folder of the older install")
    ap.add_argument("after", type=Path, help="the bin folder of the newer install")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="only the figures whose name holds this text (e.g. 'tiny')")
    args = ap.parse_args()
    sides = {"before": args.before / "cgbench", "after": args.after / "cgbench"}
    for exe in sides.values():
        if not exe.exists():
            raise SystemExit(f"startup_figures: {exe}: no cgbench there")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        caches = {side: f"{tmp}/cache-{side}" for side in sides}
        for name, argv, cached in cases(tmp):
            if args.only not in name:
                continue
            got: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
            for i in range(args.repeat + (1 if cached else 0)):  # a warm figure's first call only warms
                for side, exe in sides.items():
                    env = {**os.environ, "CGBENCH_CACHE_DIR": caches[side] if cached else "off"}
                    cmd = [str(exe), *(a.format(side=side) for a in argv)]
                    shutil.rmtree(f"{tmp}/sweep-{side}", ignore_errors=True)
                    figure = timed(cmd, env, tmp)
                    if not (cached and i == 0):
                        got[side].append(figure)
            med = {side: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for side, v in got.items()}
            rows.append((name, med["before"], med["after"]))
            print(f"{name}: before {med['before'][0]:.2f} s wall ({med['before'][1]:.2f} s CPU), after "
                  f"{med['after'][0]:.2f} s wall ({med['after'][1]:.2f} s CPU), after / before "
                  f"{med['after'][0] / med['before'][0]:.2f}x wall", file=sys.stderr)
    print("| figure | before: wall (CPU) | after: wall (CPU) | after / before, wall |")
    print("|---|---|---|---|")
    for name, (bw, bc), (aw, ac) in rows:
        print(f"| {name} | {bw:.2f} s ({bc:.2f} s) | {aw:.2f} s ({ac:.2f} s) | {aw / bw:.2f}× |")


if __name__ == "__main__":
    main()
