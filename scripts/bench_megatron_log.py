"""How fast the Megatron step-log reader reads, and in how much memory: a synthetic log of N lines
(the step lines of a simulated run, repeated with their step numbers moving on, one other line after
every ``--other-every`` step lines), read once by ``MegatronLogReader`` and once digested
(``digest_log``, what explain and calibrate start from), each in a fresh child process on one core.

    python scripts/bench_megatron_log.py                     # 1,000,000 lines, in /tmp
    python scripts/bench_megatron_log.py --lines 200000 --gzip --keep

Prints, per mode (the least CPU time of ``--repeat`` passes): lines, step lines, CPU seconds (the
child's user + system time) and lines per second, and the child's peak RSS. Writes
``/tmp/cgbench_megatron_<lines>.log[.gz]`` (deleted afterwards unless ``--keep``; never commit it).
The issue's bound: 1M lines in at most 10 s on one core.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, resource, sys, time
path, mode = sys.argv[1], sys.argv[2]
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
start = resource.getrusage(resource.RUSAGE_SELF)
if mode == "read":
    from cgbench.workload.megatron_log import MegatronLogReader
    reader = MegatronLogReader(path)
    steps = sum(1 for _ in reader.steps())
    lines = reader.stats.lines
else:
    from cgbench.analysis.megatron_log.digest import digest_log
    d = digest_log(path)
    steps, lines = d.stats.step_lines, d.stats.lines
end = resource.getrusage(resource.RUSAGE_SELF)
cpu = (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime)
print(json.dumps({"lines": lines, "steps": steps, "cpu_s": cpu, "peak_rss_mib": end.ru_maxrss / 1024}))
"""


def write_log(path: Path, lines: int, other_every: int, compress: bool) -> None:
    """``lines`` lines: a simulated run's step lines (hybrid model, the default grid, no gating) over
    and over, step numbers counting on, and an unrelated line after every ``other_every`` step lines."""
    from cgbench.analysis.megatron_log.emit import log_text
    from cgbench.config.compose import load_config
    from cgbench.pipeline import run_point

    cfg = load_config(["model=hybrid", "policy=budget"])
    text, _, _ = log_text(cfg, run_point(cfg, [])["metrics"])
    steps = [line for line in text.splitlines() if "* rank " in line]
    number = re.compile(r"\| step \d+ \|")
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as f:
        written = step = 0
        while written < lines:
            f.write(number.sub(f"| step {step + 1} |", steps[step % len(steps)], count=1) + "\n")
            step += 1
            written += 1
            if other_every and step % other_every == 0 and written < lines:
                f.write("INFO:megatron.core.inference.engines.dynamic_engine:some other line of the log\n")
                written += 1


def measure(path: Path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], check=True, capture_output=True,
                          text=True, env={**os.environ})
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--other-every", type=int, default=4, help="one other line after every N step lines (0: none)")
    ap.add_argument("--gzip", action="store_true", help="write the log gzip'd")
    ap.add_argument("--keep", action="store_true", help="keep the generated log in /tmp")
    ap.add_argument("--repeat", type=int, default=3, help="passes per mode; the least CPU time is printed (on a "
                    "shared machine the others measure the neighbours too)")
    args = ap.parse_args()
    path = Path(tempfile.gettempdir()) / f"cgbench_megatron_{args.lines}.log{'.gz' if args.gzip else ''}"
    write_log(path, args.lines, args.other_every, args.gzip)
    try:
        print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")
        for mode in ("read", "digest"):
            r = min((measure(path, mode) for _ in range(max(args.repeat, 1))), key=lambda x: x["cpu_s"])
            print(f"{mode:>6}: {r['lines']:,} lines ({r['steps']:,} step lines) in {r['cpu_s']:.2f} s CPU on one "
                  f"core, {r['lines'] / r['cpu_s']:,.0f} lines/s, peak RSS {r['peak_rss_mib']:.0f} MiB")
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
