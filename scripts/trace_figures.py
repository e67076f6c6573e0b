"""Regenerate README.md's "Real traffic" tables: what gating does on the two shipped production
traces (workload=azure_conv, workload=mooncake_conv), full hour, per model, grid and policy.

    python scripts/trace_figures.py            # full hour: ~25 s compiled (make native), ~1.5 minutes pure Python
    python scripts/trace_figures.py --window 600   # the first ten minutes only
"""

from __future__ import annotations

import argparse

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point

PRESETS = ("azure_conv", "mooncake_conv")
MODELS = ("hybrid", "transformer")
POLICIES = ("budget", "megatron", "defer")
GRIDS = ("megatron", "sparse")  # Megatron's default grid (101 graphs at the default engine), and 4 token sizes
HEADER = ("| model | grid, policy | steps | eager steps | deferrals (events / requests) | TTFT ms p50 / p99 "
          "| TPOT ms p50 / p99 | output tok/s | health |\n|---|---|---|---|---|---|---|---|---|")


def row(overrides: list[str], model: str, label: str) -> str:
    doc = run_point(load_config(overrides), overrides)
    m = doc["metrics"]
    health = ", ".join(w["code"] for w in doc["warnings"]) or "ok"
    return (f"| {model} | {label} | {m['steps']:,} | {m['eager_steps']:,} ({100 * m['eager_step_fraction']:.2f}%) | "
            f"{m['deferral_events']:,} / {m['deferred_requests']:,} | "
            f"{m['ttft_ms']['p50']:,.0f} / {m['ttft_ms']['p99']:,.0f} | "
            f"{m['tpot_ms']['p50']:.1f} / {m['tpot_ms']['p99']:.1f} | {m['output_throughput_tok_s']:,.0f} | {health} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=None, help="replay only the first WINDOW seconds")
    args = ap.parse_args()
    window = [f"workload.window={{end_s: {args.window:g}}}"] if args.window else []
    for preset in PRESETS:
        base = [f"workload={preset}", *window]
        print(f"`cgbench run {' '.join(base)} model=... cg=... policy=...`\n\n{HEADER}")
        for model in MODELS:
            print(row([*base, f"model={model}", "cg=none", "policy=budget"], model, "`cg=none` (no graphs)"))
            for grid in GRIDS:
                for p in POLICIES:
                    print(row([*base, f"model={model}", f"cg={grid}", f"policy={p}"], model, f"`cg={grid}`, `{p}`"),
                          flush=True)
        print()


if __name__ == "__main__":
    main()
