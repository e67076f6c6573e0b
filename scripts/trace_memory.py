"""Peak memory of ``cgbench run`` replaying a long synthetic trace in the Azure format: the trace
streams (it is never held in memory), so the peak grows only with what a run keeps per request
(the ledger's packed columns, ~90 B a request), not with the trace file.

    python scripts/trace_memory.py                 # 100,000 and 1,000,000 rows, in /tmp
    python scripts/trace_memory.py --rows 1000000 --keep

Writes ``/tmp/cgbench_azure_<rows>.csv`` (deleted afterwards unless ``--keep``; never commit it),
runs ``cgbench run workload.trace=<it>`` in a child process and prints its peak RSS
(``resource.getrusage(RUSAGE_CHILDREN)``; each size in a fresh child so the figures do not mix).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

START = datetime(2023, 11, 16, 18, 15, 46)
RATE = 50.0  # requests per second: a million rows span ~5.6 hours of trace time


def write_azure_trace(path: Path, rows: int, seed: int = 0) -> None:
    """``rows`` requests in the Azure format: wall-clock TIMESTAMP (7 fractional digits), Poisson
    arrivals at ``RATE``, prompts and outputs drawn small enough for the default engine limits."""
    rng = random.Random(seed)
    t = 0.0
    with path.open("w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for _ in range(rows):
            t += rng.expovariate(RATE)
            stamp = START + timedelta(seconds=t)
            f.write(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0,"
                    f"{rng.randint(16, 512)},{rng.randint(1, 64)}\n")


def peak_rss_of_run(trace: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of one ``cgbench run`` of ``trace``, in a fresh child."""
    code = ("import resource, subprocess, sys, time; t = time.time(); "
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.time() - t)")
    cmd = [sys.executable, "-c", code, sys.executable, "-m", "cgbench", "run", "workload=trace",
           f"workload.trace={trace}", "--out", str(out)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ})
    kib, seconds = done.stdout.split()
    return int(kib) / 1024, float(seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--keep", action="store_true", help="keep the generated traces in /tmp")
    args = ap.parse_args()
    for rows in args.rows:
        trace = Path(tempfile.gettempdir()) / f"cgbench_azure_{rows}.csv"
        t = time.time()
        write_azure_trace(trace, rows)
        size = trace.stat().st_size
        print(f"{rows:,} rows: {size / 2**20:.1f} MiB trace written in {time.time() - t:.1f} s", flush=True)
        out = Path(tempfile.gettempdir()) / f"cgbench_azure_{rows}.json"
        rss, seconds = peak_rss_of_run(trace, out)
        print(f"{rows:,} rows: cgbench run peak RSS {rss:,.0f} MiB ({rss * 2**20 / rows:,.0f} B a request, "
              f"the trace is {size / rows:.0f} B a row), {seconds:.0f} s", flush=True)
        out.unlink(missing_ok=True)
        if not args.keep:
            trace.unlink()


if __name__ == "__main__":
    main()
