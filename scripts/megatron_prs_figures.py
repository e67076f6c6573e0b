"""Regenerate the tables of docs/megatron-prs.md (python scripts/megatron_prs_figures.py): each row is
one ``cgbench run`` whose exact overrides the row's first cell names."""

from __future__ import annotations

from cgbench.config.compose import load_config
from cgbench.grids.build import build_grid
from cgbench.pipeline import run_point, simulate

POLICIES = ("budget", "megatron", "defer", "megatron_6675", "cover")
GATING_HEADER = ("| `cgbench run` overrides | deferrals (events / requests) | longest wait (iters) | p99 TTFT ms "
                 "| padding | eager steps | snap splits | steps | output tok/s |\n"
                 "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
SIZING_HEADER = ("| `cgbench run` overrides | graphs (decode-only) | decode sizes (requests) | decode padding, "
                 "every batch size | decode-step padding, run | capture s (est.) | TPOT ms p50 / p99 | output tok/s |\n"
                 "|---|--:|---|--:|--:|--:|--:|--:|")


def gating_row(overrides: list[str]) -> str:
    m = simulate(load_config(overrides))  # the run's metrics, without the rest of its document
    return (f"| `{' '.join(overrides)}` | {m['deferral_events']} / {m['deferred_requests']} | "
            f"{m['max_cg_wait_iters']} | {m['ttft_ms']['p99']:,.1f} | {100 * m['padded_token_fraction']:.2f}% | "
            f"{100 * m['eager_step_fraction']:.2f}% | {m['snap_splits']} | {m['steps']} | "
            f"{m['output_throughput_tok_s']:,.0f} |")


TRACES = (("Azure LLM inference 2023 (conversation)", "azure_conv"),
          ("Mooncake FAST'25 (conversation)", "mooncake_conv"))


def trace_tables() -> None:
    """The same gating question on the two shipped production traces, first ten minutes, chunked."""
    for title, preset in TRACES:
        print(f"### Gating, {title}, first 600 s\n\n{GATING_HEADER}")
        for model in ("hybrid", "transformer"):
            for policy in POLICIES:
                print(gating_row([f"model={model}", f"workload={preset}", "workload.window.end_s=600", "cg=megatron",
                                  "engine.chunked_prefill=true", f"policy={policy}"]))
        print()


def gating_tables() -> None:
    for title, extra in (("chat preset (8 req/s)", []), ("chat at 32 req/s (saturated)", ["workload.arrival.rate=32"])):
        print(f"### Gating, {title}\n\n{GATING_HEADER}")
        chunked_values = ("false", "true") if not extra else ("true",)
        for model in ("hybrid", "transformer"):
            for chunked in chunked_values:
                for policy in POLICIES:
                    print(gating_row([f"model={model}", "workload=chat", *extra, "cg=megatron",
                                      f"engine.chunked_prefill={chunked}", f"policy={policy}"]))
        print()


def decode_padding(overrides: list[str]) -> tuple[int, int, list[int], float]:
    """The grid's graph count, its decode-only graphs (count, request sizes) and the mean decode padding
    over every decode batch size 1..max_requests (graph requests / real requests)."""
    cfg = load_config(overrides)
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    sizes = sorted({g.decode_req_count for g in grid.graphs if g.prefill_req_count == 0})
    ratios = [min(s for s in sizes if s >= d) / d for d in range(1, cfg.engine.max_requests + 1)]
    return len(grid.graphs), len(sizes), sizes[::-1], sum(ratios) / len(ratios)


def sizing_row(overrides: list[str]) -> str:
    total, decode, sizes, pad = decode_padding(overrides)
    doc = run_point(load_config(overrides), overrides)
    m = doc["metrics"]
    usage = [u for u in doc["graph_usage"] if u["graph"][1] == 0]
    padded = sum(u["padded_tokens"] for u in usage)
    run_pad = padded / max(1, padded + sum(u["real_tokens"] for u in usage))
    shown = ", ".join(map(str, sizes)) if len(sizes) <= 12 else ", ".join(map(str, sizes[:10])) + ", ..."
    return (f"| `{' '.join(overrides)}` | {total} ({decode}) | {shown} | {pad:.3f}x | {100 * run_pad:.2f}% | "
            f"{doc['capture']['capture_s']:.2f} | {m['tpot_ms']['p50']:.2f} / {m['tpot_ms']['p99']:.2f} | "
            f"{m['output_throughput_tok_s']:,.0f} |")


def sizing_table() -> None:
    print(f"### Sizing: `cg.distribution` (#6667)\n\n{SIZING_HEADER}")
    for model in ("hybrid", "transformer"):
        for extra in ([], ["engine.max_requests=40"], ["engine.max_requests=40", "engine.tp_size=8"]):
            for dist in ("exponential", "hybrid", "linear"):
                print(sizing_row([f"model={model}", "workload=chat", "cg=megatron", *extra,
                                  f"cg.distribution={dist}"]))
    print()


COVERAGE_HEADER = ("| `cgbench run` overrides | graphs | eager steps | eager reasons | padding | p99 TTFT ms "
                   "| TPOT ms p50 | capture s (est.) | output tok/s |\n|---|--:|--:|---|--:|--:|--:|--:|--:|")


def coverage_row(overrides: list[str]) -> str:
    doc = run_point(load_config(overrides), overrides)
    m = doc["metrics"]
    reasons = ", ".join(f"{k} {v}" for k, v in m["eager_steps_by_reason"].items()) or "-"
    return (f"| `{' '.join(overrides)}` | {m['num_graphs']} | {100 * m['eager_step_fraction']:.2f}% | {reasons} | "
            f"{100 * m['padded_token_fraction']:.2f}% | {m['ttft_ms']['p99']:,.1f} | {m['tpot_ms']['p50']:.2f} | "
            f"{doc['capture']['capture_s']:.2f} | {m['output_throughput_tok_s']:,.0f} |")


def coverage_table() -> None:
    print(f"### Coverage: the #5797 cap (no `cg.all_prefills`)\n\n{COVERAGE_HEADER}")
    for model in ("hybrid", "transformer"):
        for chunked in ("false", "true"):
            for cap in (["cg.cuda_graph_max_tokens=256"], []):
                print(coverage_row([f"model={model}", "workload=chat", "cg=megatron_no_all_prefills", *cap,
                                    f"engine.chunked_prefill={chunked}"]))
    print()


RULES_HEADER = ("| `cgbench run` overrides | outcome | completed / failed | pauses | evictions | TTFT ms p50 / p99 "
                "| steps | output tok/s |\n|---|---|--:|--:|--:|--:|--:|--:|")


def rules_row(overrides: list[str]) -> str:
    m = simulate(load_config(overrides))
    r = m["requests"]
    failed = f"{r['failed']}" + (f" ({', '.join(f'{k} {v}' for k, v in r['failed_by_reason'].items())})"
                                 if r["failed"] else "")
    ttft = m["ttft_ms"]
    ttft_text = f"{ttft['p50']:,.1f} / {ttft['p99']:,.1f}" if ttft and ttft.get("count") else "-"
    return (f"| `{' '.join(overrides)}` | {m['outcome']} | {r['completed']} / {failed} | {r['paused_events']} | "
            f"{r['evicted_events']} | {ttft_text} | {m['steps']} | {m['output_throughput_tok_s']:,.0f} |")


def rules_kv_table() -> None:
    """#5995 under a tight KV pool: the same memory (engine=kv_tight: 600 blocks, plus a paused budget),
    0.19.2's carved-out paused partition against main's shared pool with a retention budget."""
    print(f"### Rule sets: #5995 under a tight KV pool (`engine=kv_tight`)\n\n{RULES_HEADER}")
    for model in ("hybrid", "transformer"):
        for paused in ("0", "50", "200"):
            for chunked in ("false", "true"):
                for rules in ("0.19.2", "main"):
                    print(rules_row([f"model={model}", "engine=kv_tight", f"engine.paused_blocks={paused}",
                                     f"engine.chunked_prefill={chunked}", f"engine.megatron_rules={rules}"]))
    print()


ARRIVAL = ["model=transformer", "workload=small", "workload.num_requests=4", "workload.prompt_len.dist=fixed",
           "workload.prompt_len.value=8", "workload.output_len.dist=fixed", "engine.block_size=256",
           "engine.kv_blocks=1", "engine.max_requests=4", "engine.max_tokens=512", "engine.max_sequence_length=512"]


def rules_arrival_table() -> None:
    """#5950 at the arrival check: four 8-token prompts in a one-block pool (256-token blocks), the
    output length at the exact fit of ``prompt + (G - 1) + spec`` and one token past it."""
    print(f"### Rule sets: #5950 at arrival (a one-block pool)\n\n{RULES_HEADER}")
    for spec, output in (("0", 249), ("0", 250), ("2", 247), ("2", 248)):
        for rules in ("0.19.2", "main"):
            print(rules_row([*ARRIVAL, f"workload.output_len.value={output}", f"workload.output_len.max={output}",
                             f"engine.num_speculative_tokens={spec}", f"engine.megatron_rules={rules}"]))
    print()


if __name__ == "__main__":
    gating_tables()
    trace_tables()
    sizing_table()
    coverage_table()
    rules_kv_table()
    rules_arrival_table()
