"""Regenerate the README's table "Speculative decoding and decode graph coverage"
(python scripts/spec_figures.py; --all: every grid x speculation at 2, 3 and 4 req/s): each row is
one ``cgbench run`` of ``BASE`` plus the row's rate, grid and speculation overrides.

The setting mirrors vllm-project/vllm#54933: a small deployment (max_num_seqs = 6) with six
speculative tokens, whose widest uniform decode batch is 6 x (1 + 6) = 42 tokens, and a capture list
truncated to 40 tokens ([1, 2, 4, 8, 16, 24, 32, 40], rounded up to multiples of 7 by vLLM): the
6-request decode step has no graph. Megatron's own grid raises its cap to max_requests x (1 + S)
and covers it. The acceptance is DeepSeek-V3's 85 % for the first draft, decaying by 5-10 points per
later position (an assumption: DeepSeek's MTP module, reused autoregressively, accepts later
positions less often; the mean accepted length, 3.5 tokens a step, is near nebius/MTP-DeepSeek-V3's
3.2 for the original module at K = 7).
"""

from __future__ import annotations

import sys

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point

BASE = ["model=llama3_1_8b", "workload=chat", "workload.num_requests=300", "engine.max_requests=6"]
GRIDS = {
    "Megatron grid": ["cg=megatron"],
    "truncated to 40 tokens": ["cg=vllm", "cg.capture_sizes=[1,2,4,8,16,24,32,40]", "cg.max_capture_size=40"],
}
REALISTIC = "[0.85,0.75,0.7,0.65,0.6,0.55]"
SPECULATION = {
    "no speculation": ["engine.num_speculative_tokens=0"],
    "S = 6, every draft accepted": ["engine.num_speculative_tokens=6"],
    "S = 6, realistic acceptance": ["engine.num_speculative_tokens=6",
                                    f"engine.spec_acceptance.per_position={REALISTIC}"],
}
# the README's rows: (grid, speculation) at each of its rates; --all prints every combination at 2-4 req/s
README_ROWS = (("Megatron grid", "S = 6, realistic acceptance"),
               ("truncated to 40 tokens", "S = 6, every draft accepted"),
               ("truncated to 40 tokens", "S = 6, realistic acceptance"))
README_RATES = (3, 4)
# the host cost per op decides whether the eager steps push the service rate under the arrival rate:
# Megatron's own (the default host profile) and vLLM's, where the cliff was reported
HOSTS = {"megatron": [], "vllm": ["hardware.host_profile=vllm"]}
ALL_RATES = (2, 3, 4)
HEADER = ("| host | grid | speculation | req/s | eager steps | decode steps with no graph | tokens / step | "
          "TTFT p50 / p99 (s) | TPOT p50 (ms) |\n|---|---|---|--:|--:|--:|--:|--:|--:|")


def row(grid: str, spec: str, rate: int, host: str = "megatron") -> str:
    overrides = [*BASE, f"workload.arrival.rate={rate}", *GRIDS[grid], *SPECULATION[spec], *HOSTS[host]]
    m = run_point(load_config(overrides), overrides)["metrics"]
    decode_eager = m["eager_steps_by_reason"].get("decode_only_over_max", 0)
    tps = m["spec"]["tokens_per_step"] if "spec" in m else 1.0
    return (f"| {host} | {grid} | {spec} | {rate} | {100 * m['eager_step_fraction']:.1f} % | {decode_eager:,} | "
            f"{tps:.2f} | "
            f"{m['ttft_ms']['p50'] / 1e3:.2f} / {m['ttft_ms']['p99'] / 1e3:.2f} | {m['tpot_ms']['p50']:.2f} |")


def readme_rows() -> list[str]:
    return [row(grid, spec, rate, host) for host in HOSTS for rate in README_RATES for grid, spec in README_ROWS]


def main(every: bool) -> None:
    print(HEADER)
    if not every:
        for line in readme_rows():
            print(line, flush=True)
        return
    for host in HOSTS:
        for rate in ALL_RATES:
            for grid in GRIDS:
                for spec in SPECULATION:
                    print(row(grid, spec, rate, host), flush=True)


if __name__ == "__main__":
    main("--all" in sys.argv[1:])
