"""Regenerate README.md's "Prefix caching on the Mooncake trace" table: what engine.prefix_caching
does to the shapes, the eager fraction and the deferrals under each policy on workload=mooncake_conv.

    python scripts/prefix_figures.py                 # the first ten minutes (the README's table): ~40 s
    python scripts/prefix_figures.py --window 0      # the full hour
"""

from __future__ import annotations

import argparse

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point

POLICIES = ("budget", "megatron", "defer")
# (model, grid, label, overrides): prefix caching off, then on; a hybrid model skips prefill only up
# to a cached Mamba state, so it runs without a Mamba cache (memory-only) and with 1,024 slots
CASES = (
    ("transformer", "megatron", "off", []),
    ("transformer", "megatron", "on", ["engine.prefix_caching=true"]),
    ("transformer", "sparse", "off", []),
    ("transformer", "sparse", "on", ["engine.prefix_caching=true"]),
    ("hybrid", "megatron", "off", []),
    ("hybrid", "megatron", "on, no Mamba cache", ["engine.prefix_caching=true"]),
    ("hybrid", "megatron", "on, 1,024 Mamba slots", ["engine.prefix_caching=true",
                                                     "engine.prefix_caching_mamba_slots=1024"]),
)
HEADER = ("| model | grid | prefix caching | policy | steps (prefill-only / mixed) | eager steps | deferrals "
          "| coordination waits | prefill tokens hit | computed tokens per prefill | TTFT ms p50 / p99 "
          "| TPOT ms p50 |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def row(overrides: list[str], model: str, grid: str, label: str, policy: str) -> str:
    m = run_point(load_config(overrides), overrides)["metrics"]
    pc = m.get("prefix_cache")
    kinds = m["step_kinds"]
    hit = f"{100 * pc['token_hit_rate']:.1f}%" if pc else "-"
    waits = f"{pc['coordination_waits']:,}" if pc else "-"
    per_prefill = f"{pc['computed_tokens_per_prefill']:,.0f}" if pc else "-"
    return (f"| {model} | `cg={grid}` | {label} | `{policy}` | {m['steps']:,} ({kinds['prefill_only']:,} / "
            f"{kinds['mixed']:,}) | {m['eager_steps']:,} ({100 * m['eager_step_fraction']:.2f}%) | "
            f"{m['deferral_events']:,} | {waits} | {hit} | {per_prefill} | "
            f"{m['ttft_ms']['p50']:,.0f} / {m['ttft_ms']['p99']:,.0f} | {m['tpot_ms']['p50']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=600, help="replay the first WINDOW seconds (0: the hour)")
    args = ap.parse_args()
    base = ["workload=mooncake_conv"]
    if args.window:
        base.append(f"workload.window={{end_s: {args.window:g}}}")
    print(f"`cgbench run {' '.join(base)} model=... cg=... policy=... [engine.prefix_caching=true]`\n\n{HEADER}")
    for model, grid, label, extra in CASES:
        for p in POLICIES:
            print(row([*base, f"model={model}", f"cg={grid}", f"policy={p}", *extra], model, grid, label, p),
                  flush=True)


if __name__ == "__main__":
    main()
