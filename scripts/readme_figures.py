"""Regenerate the policy-comparison tables in README.md and the transformer figures its text states
(python scripts/readme_figures.py)."""

from __future__ import annotations

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point

HEADER = ("| policy | steps | eager steps | eager reasons | deferrals (events / requests) | longest wait (iters) "
          "| TTFT ms p50 / p99 | TPOT ms p50 | output tok/s |\n|---|---|---|---|---|---|---|---|---|")


def row(overrides: list[str], label: str) -> str:
    m = run_point(load_config(overrides), overrides)["metrics"]
    reasons = ", ".join(f"{k} {v}" for k, v in m["eager_steps_by_reason"].items()) or "-"
    return (f"| {label} | {m['steps']} | {m['eager_steps']} ({100 * m['eager_step_fraction']:.2f}%) | {reasons} | "
            f"{m['deferral_events']} / {m['deferred_requests']} | {m['max_cg_wait_iters']} | "
            f"{m['ttft_ms']['p50']:.0f} / {m['ttft_ms']['p99']:.0f} | {m['tpot_ms']['p50']:.1f} | "
            f"{m['output_throughput_tok_s']:,.0f} |")


def table(title: str, base: list[str], policies: tuple[str, ...]) -> None:
    print(f"{title}: cgbench run {' '.join(base)} policy=...\n{HEADER}")
    for p in policies:
        print(row([*base, f"policy={p}"], f"`{p}`"))
    print()


if __name__ == "__main__":
    table("headline", ["model=hybrid", "cg=megatron"], ("budget", "megatron", "defer"))
    table("transformer", ["model=transformer", "cg=megatron"], ("budget", "megatron"))
    table("chat", ["model=hybrid", "workload=chat", "workload.num_requests=2000", "engine.chunked_prefill=true"],
          ("budget", "megatron", "defer", "wait_timeout"))
