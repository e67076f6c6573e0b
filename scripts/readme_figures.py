"""Regenerate the policy-comparison tables in README.md, the no-graphs rows next to them, and the
where-graphs-win table (python scripts/readme_figures.py)."""

from __future__ import annotations

from cgbench.config.compose import load_config
from cgbench.pipeline import run_point

HEADER = ("| grid, policy | steps | eager steps | eager reasons | deferrals (events / requests) | longest wait (iters) "
          "| TTFT ms p50 / p99 | TPOT ms p50 | output tok/s |\n|---|---|---|---|---|---|---|---|---|")


def metrics(overrides: list[str]) -> dict:
    return run_point(load_config(overrides), overrides)["metrics"]


def row(overrides: list[str], label: str) -> str:
    m = metrics(overrides)
    reasons = ", ".join(f"{k} {v}" for k, v in m["eager_steps_by_reason"].items()) or "-"
    return (f"| {label} | {m['steps']} | {m['eager_steps']} ({100 * m['eager_step_fraction']:.2f}%) | {reasons} | "
            f"{m['deferral_events']} / {m['deferred_requests']} | {m['max_cg_wait_iters']} | "
            f"{m['ttft_ms']['p50']:.0f} / {m['ttft_ms']['p99']:.0f} | {m['tpot_ms']['p50']:.1f} | "
            f"{m['output_throughput_tok_s']:,.0f} |")


def table(title: str, base: list[str], policies: tuple[str, ...]) -> None:
    print(f"{title}: cgbench run {' '.join(base)} cg=... policy=...\n{HEADER}")
    print(row([*base, "cg=none", "policy=budget"], "`cg=none` (no graphs)"))
    for p in policies:
        print(row([*base, "cg=megatron", f"policy={p}"], f"`cg=megatron`, `{p}`"))
    print()


CHAT = ["workload=chat", "workload.num_requests=2000", "engine.chunked_prefill=true"]
WHERE = [
    ("all at once, prefill-heavy (`workload=default`)", ["model=hybrid"]),
    ("all at once, prefill-heavy (`workload=default`)", ["model=transformer"]),
    ("Poisson chat, chunked (`workload=chat`, 2,000 req)", ["model=hybrid", *CHAT]),
    ("Poisson chat, chunked (`workload=chat`, 2,000 req)", ["model=transformer", *CHAT]),
    ("decode-heavy (`workload=decode_heavy`)", ["model=hybrid", "workload=decode_heavy"]),
    ("decode-heavy (`workload=decode_heavy`)", ["model=transformer", "workload=decode_heavy"]),
    ("decode-heavy, light load (`workload=decode_heavy workload.num_requests=16`)",
     ["model=transformer", "workload=decode_heavy", "workload.num_requests=16"]),
]


def where_graphs_win(hardware: str) -> None:
    print(f"where graphs win ({hardware}): cg=none vs cg=megatron policy=budget\n"
          "| workload | model | tok/s, no graphs | tok/s, megatron grid | graphs' gain | TPOT ms p50 (none / grid) "
          "| TTFT ms p99 (none / grid) |\n|---|---|---:|---:|---:|---:|---:|")
    for label, base in WHERE:
        ovr = [*base, f"hardware={hardware}"]
        none = metrics([*ovr, "cg=none", "policy=budget"])
        grid = metrics([*ovr, "cg=megatron", "policy=budget"])
        a, b = none["output_throughput_tok_s"], grid["output_throughput_tok_s"]
        print(f"| {label} | {base[0].split('=')[1]} | {a:,.0f} | {b:,.0f} | {100 * (b - a) / a:+.1f}% | "
              f"{none['tpot_ms']['p50']:.1f} / {grid['tpot_ms']['p50']:.1f} | "
              f"{none['ttft_ms']['p99']:.0f} / {grid['ttft_ms']['p99']:.0f} |")
    print()


def padded_slots(hardware: str) -> None:
    """The hybrid rows of where-graphs-win under both padded-slot assumptions (model.padded_slot_cost)."""
    print(f"padded request slots ({hardware}): graphs' gain for the hybrid, cg=none vs cg=megatron policy=budget\n"
          "| workload | gain, `padded_slot_cost=shared` (default) | gain, `padded_slot_cost=full` | TPOT ms p50 "
          "(grid: shared / full) |\n|---|---:|---:|---:|")
    for label, base in WHERE:
        if base[0] != "model=hybrid":
            continue
        ovr = [*base, f"hardware={hardware}"]
        none = metrics([*ovr, "cg=none", "policy=budget"])["output_throughput_tok_s"]
        cells = []
        tpot = []
        for slot in ("shared", "full"):
            m = metrics([*ovr, "cg=megatron", "policy=budget", f"model.padded_slot_cost={slot}"])
            cells.append(f"{100 * (m['output_throughput_tok_s'] - none) / none:+.1f}%")
            tpot.append(f"{m['tpot_ms']['p50']:.1f}")
        print(f"| {label} | {cells[0]} | {cells[1]} | {' / '.join(tpot)} |")
    print()


if __name__ == "__main__":
    table("headline", ["model=hybrid"], ("budget", "megatron", "defer"))
    table("transformer", ["model=transformer"], ("budget", "megatron"))
    table("chat", ["model=hybrid", *CHAT], ("budget", "megatron", "defer", "wait_timeout"))
    where_graphs_win("h100")
    where_graphs_win("a100")
    padded_slots("h100")
    padded_slots("a100")
