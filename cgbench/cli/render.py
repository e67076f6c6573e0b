"""Rich tables for humans (the JSON is the machine-readable artifact)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from cgbench.results.formatting import percent as _pct


def _lat(d: dict[str, float] | None, unit: str) -> str:
    if not d or not d.get("count"):
        return "-"
    return f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} {unit}"


def run_title(doc: dict[str, Any]) -> str:
    c = doc["config"]
    return (f"cgbench run: model={c['model']['name']} ({c['model']['kind']}) cg={c['cg']['kind']} "
            f"policy={c['policy']['name']} workload={c['workload']['name']} "
            f"chunked={c['engine']['chunked_prefill']} backend={c['backend']['name']}")


def run_table(doc: dict[str, Any]) -> Table:
    m = doc["metrics"]
    t = Table(title=run_title(doc), box=box.SIMPLE_HEAVY, title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    reasons = ", ".join(f"{k} {v}" for k, v in m["eager_steps_by_reason"].items()) or "-"
    worst = m["max_cg_wait_request"]
    rows: list[tuple[str, str]] = [
        ("outcome", m["outcome"] + (f" ({m['diagnosis']})" if m["diagnosis"] else "")),
        ("graphs captured / gating active", f"{m['num_graphs']} / {'yes' if m['gating_active'] else 'no'}"),
        ("steps (graphed / eager)", f"{m['steps']} ({m['graphed_steps']} / {m['eager_steps']})"),
        ("eager-step fraction", _pct(m["eager_step_fraction"])),
        ("eager steps by reason", reasons),
        ("eager-token fraction", _pct(m["eager_token_fraction"])),
        ("padded-token fraction (graphed)", _pct(m["padded_token_fraction"])),
        ("deferral events / deferred requests", f"{m['deferral_events']} / {m['deferred_requests']}"),
        ("longest wait (cg_wait_iters)",
         f"{m['max_cg_wait_iters']} iters" + (f" (request {worst})" if worst is not None else "")),
        ("max queue wait", f"{m['max_queue_wait_iters']} iters (p50 {m['queue_wait_iters']['p50']:g}, "
                           f"p99 {m['queue_wait_iters']['p99']:g})"),
        ("snap splits / starvation warnings", f"{m['snap_splits']} / {m['starvation_warnings']}"),
        ("TTFT steps p50 / p99 / max", _lat(m["ttft_steps"], "")),
        ("requests completed / failed", f"{m['requests']['completed']} / {m['requests']['failed']}"
         + (f" {m['requests']['failed_by_reason']}" if m["requests"]["failed"] else "")),
        ("paused / evicted events", f"{m['requests']['paused_events']} / {m['requests']['evicted_events']}"),
    ]
    if "ttft_ms" in m:
        rows += [
            ("TTFT ms p50 / p99 / max", _lat(m["ttft_ms"], "")),
            ("TTFT ms, deferred requests", _lat(m["ttft_ms_deferred"], "")),
            ("TPOT ms p50 / p99 / max", _lat(m["tpot_ms"], "")),
            ("ITL ms p50 / p99 / max", _lat(m["itl_ms"], "")),
            ("E2E ms p50 / p99 / max", _lat(m["e2e_ms"], "")),
            ("output / total throughput", f"{m['output_throughput_tok_s']:,.0f} / "
                                          f"{m['total_throughput_tok_s']:,.0f} tok/s"),
            ("makespan", f"{m['makespan_s']:.3f} s"),
            ("time in eager steps", f"{m['eager_time_s']:.3f} s ({_pct(m['eager_time_fraction'])})"),
            ("goodput", f"{m['goodput_req_s']:.2f} req/s ({_pct(m['goodput_fraction'])} of requests)"),
        ]
    br = doc.get("backend_report")
    if br and br.get("cuda_graphs") is None:
        rows.append(("note", f"no CUDA graphs on {br['device']}: every step ran eager; 'graphed' counts the steps "
                             "a captured graph would have served"))
    elif br:
        cg = br["cuda_graphs"]
        rows.append(("CUDA graphs captured / replayed steps",
                     f"{cg['captured']} ({cg['grid_shapes_covered']} of {cg['grid_shapes']} grid shapes"
                     + (f"; {cg['stop_reason']}" if cg["stop_reason"] else "") + f") / {br['steps_replayed']}"))
    for name, value in rows:
        t.add_row(name, value)
    return t


def graph_usage_table(doc: dict[str, Any], limit: int = 40) -> Table:
    used = [g for g in doc["graph_usage"] if g["hits"]]
    used.sort(key=lambda g: -g["hits"])
    t = Table(title=f"graph usage ({len(used)} of {len(doc['graph_usage'])} graphs hit)", box=box.SIMPLE_HEAVY,
              title_justify="left")
    for col in ("graph [T, P, D]", "hits", "real tokens", "padded tokens", "padding"):
        t.add_column(col, justify="right")
    for g in used[:limit]:
        total = g["real_tokens"] + g["padded_tokens"]
        t.add_row(str(g["graph"]), str(g["hits"]), str(g["real_tokens"]), str(g["padded_tokens"]),
                  _pct(g["padded_tokens"] / total) if total else "-")
    for reason, n in doc["metrics"]["eager_steps_by_reason"].items():
        t.add_row(f"eager: {reason}", str(n), "", "", "")
    return t
