"""``cgbench run --sensitivity``: the table of what the run's conclusion depends on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from cgbench.results.formatting import significant

_NAMES = {"output_throughput_tok_s": "output tok/s", "ttft_ms.p99": "TTFT p99", "tpot_ms.p50": "TPOT p50",
          "e2e_ms.p99": "E2E p99"}


def sensitivity_table(block: dict[str, Any], subject: str = "this run") -> Table:
    """One row per comparison and decision metric: the winner at the configured prices, the ranges
    under which it flips, and the break-even host time per op. ``subject``: what side a is."""
    how = ("re-priced: the steps do not depend on the price" if block["method"] == "repriced"
           else f"re-run at every price: {block['why_rerun']}")
    ratio = block.get("eager_graphed_ratio")
    title = f"Sensitivity ({how}; {subject}'s steps eager / graphed: {ratio if ratio is not None else '-'}x)"
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in (f"{subject} versus", "metric", "winner", "flips within its range under", "break-even host us/op"):
        table.add_column(col)
    for comp in block["comparisons"]:
        evens = {e["metric"]: e for e in comp["break_even"]}
        name = versus_name(comp)
        for metric, label in _NAMES.items():
            won = {"a": subject, "b": name, "tie": "tie"}[comp["point_winner"][metric]]
            flips = [p["key"] for p in comp["parameters"]
                     if p.get("metrics", {}).get(metric, {}).get("flips")]
            shown = _break_even(evens.get(metric) or {})
            table.add_row(name, label, won, ", ".join(flips) or "none", shown)
    return table


def versus_name(comp: dict[str, Any]) -> str:
    """A comparison's short name (``gating off``, ``your launch line``, ...; an older block: its label's head)."""
    return comp.get("name") or comp["b"].split(" (")[0]


def sensitivity_baselines(block: dict[str, Any]) -> list[str]:
    """One line per comparison: what it is and the overrides that run it; then the baselines not compared."""
    lines = []
    for comp in block["comparisons"]:
        ran = f" [{' '.join(comp['overrides'])}]" if comp.get("overrides") else ""
        lines.append(f"versus {versus_name(comp)}: {comp['b']}{ran}")
    return lines + [f"not compared: {n}" for n in block.get("notes") or []]


def _break_even(even: dict[str, Any]) -> str:
    value = even.get("host_op_us")
    if value is None:
        return "-"
    ratio = even.get("eager_graphed_ratio")
    return f"{significant(value, 3)}" + (f" (eager/graphed {ratio}x)" if ratio is not None else "")


def sensitivity_ranges(block: dict[str, Any]) -> list[str]:
    """One line per uncertain parameter: its configured value, range and source."""
    return [f"{p['key']}: {_setting(p['point'])} in [{_setting(p['low'])}, {_setting(p['high'])}] ({p['source']})"
            for p in block["parameters"]]


def _setting(v: Any) -> str:
    return v if isinstance(v, str) else significant(v, 4)


def sweep_sensitivity_table(folder: Path, points: list[tuple[str, str]]) -> Table:
    """One row per finished point and comparison: the decision metrics whose winner flips within the
    ranges, and the break-even host time per op of output throughput."""
    table = Table(title="Sensitivity per point (details in each point's JSON, under sensitivity)",
                  box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("point", "versus", "throughput winner", "flips within the ranges", "throughput break-even host us/op"):
        table.add_column(col)
    for file, label in points:
        block = json.loads((folder / file).read_text(encoding="utf-8")).get("sensitivity")
        if block is None:  # kept by --resume from a sweep without --sensitivity
            table.add_row(label, "-", "-", "no sensitivity block: this point ran without --sensitivity", "-")
            continue
        for comp in block.get("comparisons", []):
            won = {"a": "this point", "b": versus_name(comp), "tie": "tie"}[
                comp["point_winner"]["output_throughput_tok_s"]]
            flipped = sorted({f.split(" under ")[0] for f in comp["flips"]})
            even = next((e for e in comp["break_even"] if e["metric"] == "output_throughput_tok_s"), {})
            table.add_row(label, versus_name(comp), won, ", ".join(_NAMES.get(m, m) for m in flipped) or "none",
                          _break_even(even))
    return table
