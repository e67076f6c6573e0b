"""What ``cgbench run`` prints: one list of (row label, value) pairs, rendered as a Rich table, a
Markdown table, CSV or JSON (``--format``). Values use the shared formatter: integers as integers,
fractions as percentages; JSON and CSV keep the raw values of the result file."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from cgbench.config.labels import header
from cgbench.engine.kv_rules import DEFAULT_RULES, MEGATRON_RULES
from cgbench.results.formatting import goodput_text, metric_value
from cgbench.results.formatting import number as _num
from cgbench.results.formatting import percent as _pct
from cgbench.results.names import flatten


def _lat(d: dict[str, float] | None, name: str) -> str:
    if not d or not d.get("count"):
        return "-"
    return " / ".join(metric_value(f"{name}.{k}", _whole(d[k])) for k in ("p50", "p99", "max"))


def _whole(x: Any) -> Any:
    """13.0 -> 13: a whole-number float (an iteration count's percentile) prints as an integer."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _counts(d: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {_num(v)}" for k, v in (d or {}).items()) or "-"


def run_title(doc: dict[str, Any]) -> str:
    """The run's header line: its config labels, the Megatron rule set it ran under and the host cost
    that priced it (result files from before ``labels.host_cost`` have none)."""
    labels = doc.get("labels")
    c = doc["config"]
    calibration = (doc.get("environment") or {}).get("calibration")
    fitted = f" cost model: {calibration}" if calibration else ""  # a log calibration names its log
    if labels:
        host = f" host: {labels['host_cost']}" if labels.get("host_cost") else ""
        return "cgbench run: " + header(labels) + rules_part(c) + host + fitted
    return (f"cgbench run: model={c['model']['name']} policy={c['policy']['name']} "
            f"workload={c['workload']['name']} backend={c['backend']['name']}" + rules_part(c) + fitted)


def rules_part(config: dict[str, Any]) -> str:
    """``" rules: megatron-core 0.19.2"``: the rule set (``engine.megatron_rules``; result files from
    before the key ran under 0.19.2's)."""
    name = config.get("engine", {}).get("megatron_rules", DEFAULT_RULES)
    rules = MEGATRON_RULES.get(name)
    return f" rules: {rules.label if rules is not None else name}"


def _captured(doc: dict[str, Any]) -> str:
    """The grid's graphs, or on a real engine how many of them it captured (``0 of 33`` on a CPU)."""
    n = doc["metrics"]["num_graphs"]
    br = doc.get("backend_report")
    if not br:
        return _num(n)
    covered = (br.get("cuda_graphs") or {}).get("grid_shapes_covered", 0)
    return _num(n) if covered == n else f"{_num(covered)} of {_num(n)}"


def gating_text(doc: dict[str, Any]) -> str:
    """``yes — why`` / ``no — why`` (a result from before the ``gating`` block: yes or no alone)."""
    g = doc.get("gating")
    active = doc["metrics"]["gating_active"]
    return ("yes" if active else "no") + (f" — {g['reason']}" if g else "")


def run_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The run table's rows, every value formatted for a human."""
    m = doc["metrics"]
    worst = m["max_cg_wait_request"]
    req = m["requests"]
    rows: list[tuple[str, str]] = [
        ("outcome", m["outcome"] + (f" ({m['diagnosis']})" if m["diagnosis"] else "")),
        ("graphs captured / gating active", f"{_captured(doc)} / {gating_text(doc)}"),
        ("steps (graphed / eager)", f"{_num(m['steps'])} ({_num(m['graphed_steps'])} / {_num(m['eager_steps'])})"),
        ("eager-step fraction", _pct(m["eager_step_fraction"])),
        ("eager steps by reason", _counts(m["eager_steps_by_reason"])),
        ("eager-token fraction", _pct(m["eager_token_fraction"])),
        ("padded-token fraction (graphed)", _pct(m["padded_token_fraction"])),
        ("deferral events / deferred requests", f"{_num(m['deferral_events'])} / {_num(m['deferred_requests'])}"),
        ("admitted despite a graph miss", _num(m["eager_admissions"])),
        ("longest wait for a graph (cg_wait_iters)",
         f"{_num(m['max_cg_wait_iters'])} iters" + (f" (request {worst})" if worst is not None else "")),
        ("queue wait iters p50 / p99 / max", f"{_lat(m['queue_wait_iters'], 'queue_wait_iters')}"),
        ("snap splits / starvation warnings", f"{_num(m['snap_splits'])} / {_num(m['starvation_warnings'])}"),
        ("TTFT steps p50 / p99 / max", _lat(m["ttft_steps"], "ttft_steps")),
        ("requests completed / failed", f"{_num(req['completed'])} / {_num(req['failed'])}"
         + (f" ({_counts(req['failed_by_reason'])})" if req["failed"] else "")),
        ("paused / evicted events", f"{_num(req['paused_events'])} / {_num(req['evicted_events'])}"),
    ]
    if "ttft_ms" in m:
        rows += [
            ("TTFT ms p50 / p99 / max", _lat(m["ttft_ms"], "ttft_ms")),
            ("TTFT ms (deferred) p50 / p99 / max", _lat(m["ttft_ms_deferred"], "ttft_ms_deferred")),
            ("TPOT ms p50 / p99 / max", _lat(m["tpot_ms"], "tpot_ms")),
            ("ITL ms p50 / p99 / max", _lat(m["itl_ms"], "itl_ms")),
            ("E2E ms p50 / p99 / max", _lat(m["e2e_ms"], "e2e_ms")),
            ("output / total throughput (tok/s)",
             f"{_num(m['output_throughput_tok_s'], 0)} / {_num(m['total_throughput_tok_s'], 0)}"),
            ("makespan (s)", _num(m["makespan_s"], 3)),
            ("time in eager steps (s)", f"{_num(m['eager_time_s'], 3)} ({_pct(m['eager_time_fraction'])})"),
            ("goodput (req/s)", goodput_text(m)),
        ]
    load = m.get("load")
    if load:  # open-loop arrivals: what the workload offered, and what was served of it
        rows.append(("offered / served output (tok/s)",
                     f"{_num(load['offered_output_tok_s'], 0)} / {_num(load['served_output_tok_s'], 0)} "
                     f"({_pct(load['served_fraction'])}; drain {_num(load['drain_s'])} s, "
                     f"backlog {_num(load['backlog_s'])} s)"))
    br = doc.get("backend_report")
    if br and br.get("cuda_graphs") is None:
        served = m["eager_steps_by_reason"].get("not_captured", 0)
        rows.append(("note", f"no CUDA graphs on {br['device']}: none of the grid's {_num(m['num_graphs'])} graphs "
                             f"was captured and every step ran eager ({_num(served)} not_captured: the steps a "
                             "graph would have served on a GPU); admission still follows the grid"))
    elif br:
        cg = br["cuda_graphs"]
        rows.append(("CUDA graphs captured / replayed steps",
                     f"{cg['captured']} ({cg['grid_shapes_covered']} of {cg['grid_shapes']} grid shapes"
                     + (f"; {cg['stop_reason']}" if cg["stop_reason"] else "") + f") / {br['steps_replayed']}"))
    warnings = doc.get("warnings") or []
    rows.append(("health", "ok" if not warnings else f"{len(warnings)} warning{'s' if len(warnings) > 1 else ''}"))
    for w in warnings:
        rows.append((f"warning: {w['code']}", w["message"]))  # the explanation goes to stderr and the JSON
    return rows


def _rich_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]],
                right: Sequence[bool]) -> Table:
    # cells are plain strings: the consoles (cgbench.cli.console) never read them as markup
    t = Table(title=title or None, box=box.SIMPLE_HEAVY, title_justify="left")
    for col, r in zip(columns, right, strict=True):
        t.add_column(col, justify="right" if r else "left", overflow="fold")
    for row in rows:
        t.add_row(*(str(c) for c in row))
    return t


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", "<br>")

    lines = [f"**{cell(title)}**", ""] if title else []
    lines.append("| " + " | ".join(cell(c) for c in columns) + " |")
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return buf.getvalue()


def run_table(doc: dict[str, Any]) -> Table:
    """The rows as a Rich table; its title (``run_title``) is printed on its own line by the caller,
    so a narrow table never wraps the labels."""
    return _rich_table(None, ("metric", "value"), run_rows(doc), (False, True))


def run_output(doc: dict[str, Any], fmt: str, result_path: str | None = None) -> str | Table:
    """The run's stdout in ``fmt``: a Rich table, or text (Markdown, JSON, CSV)."""
    if fmt == "table":
        return run_table(doc)
    if fmt == "markdown":
        return markdown_table(("metric", "value"), run_rows(doc), run_title(doc))
    if fmt == "json":
        return json.dumps({"labels": doc.get("labels"), "warnings": doc.get("warnings", []),
                           "metrics": doc["metrics"], "result": result_path}) + "\n"
    # csv: one header row and one value row (labels then every metric, raw), so runs concatenate
    labels = {f"labels.{k}": v for k, v in (doc.get("labels") or {}).items()}
    flat = dict(flatten(doc["metrics"]))
    flat["warnings"] = ";".join(w["code"] for w in doc.get("warnings", []))
    cols = [*labels, *flat]
    return csv_text(cols, [[_csv_value(v) for v in (*labels.values(), *flat.values())]])


def _csv_value(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return "" if v is None else v


def graph_usage_rows(doc: dict[str, Any], limit: int = 40) -> tuple[list[str], list[list[str]]]:
    used = [g for g in doc["graph_usage"] if g["hits"]]
    used.sort(key=lambda g: -g["hits"])
    rows = []
    for g in used[:limit]:
        total = g["real_tokens"] + g["padded_tokens"]
        rows.append([str(g["graph"]), _num(g["hits"]), _num(g["real_tokens"]), _num(g["padded_tokens"]),
                     _pct(g["padded_tokens"] / total) if total else "-"])
    for reason, n in doc["metrics"]["eager_steps_by_reason"].items():
        rows.append([f"eager: {reason}", _num(n), "", "", ""])
    return ["graph [T, P, D]", "hits", "real tokens", "padded tokens", "padding"], rows


def graph_usage_table(doc: dict[str, Any], limit: int = 40) -> Table:
    used = sum(1 for g in doc["graph_usage"] if g["hits"])
    cols, rows = graph_usage_rows(doc, limit)
    return _rich_table(f"graph usage ({used} of {len(doc['graph_usage'])} graphs hit)", cols, rows,
                       [True] * len(cols))
