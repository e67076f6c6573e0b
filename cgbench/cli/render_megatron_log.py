"""What ``cgbench explain --megatron-log`` and ``cgbench calibrate --megatron-log`` print: plain lines and
Rich tables made from their documents (nothing here computes a number they do not hold), and the
progress display of reading a large log."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from cgbench.results.formatting import number, percent


def _shape(s: Any) -> str:
    return "-" if s is None else "(" + ", ".join(str(v) for v in s) + ")"


def _ms(x: Any) -> str:
    return "-" if x is None else f"{x:,.1f} ms"


@contextmanager
def log_progress(path: Path, after_bytes: int = 64 << 20) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr while a log is read: only on a terminal and only for a file of at least
    ``after_bytes`` (a gzip'd file's bytes are its compressed ones); None otherwise (no progress calls)."""
    from cgbench.cli.console import err

    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if not err.is_terminal or size < after_bytes:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("reading the log"), BarColumn(), DownloadColumn(), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task("log", total=size)
        yield lambda done, total: bar.update(task, completed=done, total=total or size)


def _summary_table(r: dict[str, Any]) -> Table:
    table = Table(title=f"rank {r['rank']}: {number(r['steps'])} steps ({r['sampling']})", box=box.SIMPLE_HEAD,
                  show_header=False)
    table.add_column("item")
    table.add_column("value", justify="right")
    streak, waits = r["longest_eager_streak"], r["deferral_like_waits"]
    rows = [
        ("steps logged", f"{number(r['steps'])} (steps {r['first_step']} to {r['last_step']}"
                         + (f", {r['restarts']} restart(s)" if r["restarts"] else "") + ")"),
        ("graphed / eager steps", f"{number(r['graphed_steps'])} / {number(r['eager_steps'])}"),
        ("eager-step fraction", percent(r["eager_step_fraction"])),
        ("time in eager steps", f"{_ms(r['eager_time_ms'])} of {_ms(r['step_time_ms'])} "
                                f"({percent(r['eager_time_fraction'])})"),
        ("decode / prefill / mixed steps", f"{number(r['decode_steps'])} / {number(r['prefill_steps'])} / "
                                           f"{number(r['mixed_steps'])}"),
        ("longest eager streak", f"{number(streak['steps'])} step(s)" + (
            f" (steps {streak['first_step']} to {streak['last_step']})" if streak["steps"] else "")),
        ("deferral-like waits", f"{number(waits['steps'])} step(s), longest {number(waits['longest']['steps'])}"
                                + (f" (steps {waits['longest']['first_step']} to {waits['longest']['last_step']})"
                                   if waits["longest"]["steps"] else "")),
        ("graphs replayed", number(r["graphs_replayed"])),
        ("most waiting / paused", f"{number(r['max_waiting'])} / {number(r['max_paused'])}"),
    ]
    if r.get("spec"):
        s = r["spec"]
        rows.append(("speculative acceptance", f"{percent(s['acceptance'])} ({number(s['accepted'])} of "
                                               f"{number(s['proposed'])} drafts)"))
    for k, v in rows:
        table.add_row(k, v)
    return table


def _reasons_table(r: dict[str, Any]) -> Table:
    table = Table(title="eager steps by reason (real shapes re-matched against the grid)", box=box.SIMPLE_HEAD)
    for col in ("reason", "steps", "time", "shape (T, P, D)", "its steps", "mean", "what the grid lacks"):
        table.add_column(col, justify="right" if col in ("steps", "time", "its steps", "mean") else "left")
    for reason, e in r["eager_by_reason"].items():
        first = True
        for s in e["shapes"]:
            table.add_row(reason if first else "", number(e["steps"]) if first else "",
                          _ms(e["time_ms"]) if first else "", _shape(s["real"]), number(s["steps"]),
                          _ms(s["mean_ms"]), s["detail"])
            first = False
        if e["distinct_shapes"] > len(e["shapes"]):
            table.add_row("", "", "", f"... {e['distinct_shapes'] - len(e['shapes'])} more shape(s)", "", "", "")
    return table


def _what_if_table(r: dict[str, Any]) -> Table:
    table = Table(title="what if: the log's shapes re-matched against", box=box.SIMPLE_HEAD)
    for col in ("alternative", "graphs", "eager steps", "saved", "added", "prompt tokens moved", "deferred",
                "time change"):
        table.add_column(col, justify="left" if col == "alternative" else "right")
    for w in r["what_if"]:
        change = "not priced" if w["time_change_ms"] is None else (
            f"{w['time_change_ms']:+,.1f} ms ({100 * w['time_change_fraction']:+.2f}%)")
        table.add_row(w["label"], number(w["graphs"]), f"{number(w['eager_steps'])} "
                      f"({percent(w['eager_step_fraction'])})", number(w["eager_steps_saved"]),
                      number(w["eager_steps_added"]), number(w["prompt_tokens_moved"]),
                      number(w["requests_deferred"]), change)
    return table


def explain_lines(doc: dict[str, Any], rank: int | None = None) -> list[Any]:
    """Lines (str) and tables of an explanation: the log, the grid, one rank's details, flags, notes."""
    log, grid = doc["log"], doc["grid"]
    formats = ", ".join(f"{k} {number(v)}" for k, v in log["formats"].items())
    skipped = [f"{number(log['other_lines'])} other line(s) skipped"]
    if log["malformed_lines"]:
        ex = log["malformed_examples"][0]
        skipped.append(f"{number(log['malformed_lines'])} malformed step line(s) skipped (first: line {ex['line']})")
    if log["truncated_last_line"]:
        skipped.append("its last line is cut off (skipped)")
    out: list[Any] = [
        f"Megatron log {log['path']}{' (gzip)' if log['gzip'] else ''}: {number(log['lines'])} lines, "
        f"{number(log['step_lines'])} step lines (format {formats}); " + ", ".join(skipped),
        f"ranks: {', '.join(map(str, log['ranks']))}" + (
            f"; emitted by cgbench run --emit-megatron-log (model={log['emitted'].get('model')}, "
            f"cg={log['emitted'].get('grid')})" if log.get("emitted") else ""),
        f"grid: {grid['description']}",
        f"matching: {'strict' if grid['strict'] else 'non-strict'} ({grid['strict_source']})",
        f"prices: {doc['pricing'] or 'none'}",
    ]
    ranks = doc["ranks"]
    if len(ranks) > 1:
        table = Table(title="every rank", box=box.SIMPLE_HEAD)
        for col in ("rank", "steps", "eager steps", "eager time", "longest streak", "deferral-like waits"):
            table.add_column(col, justify="right")
        for r in ranks:
            table.add_row(str(r["rank"]), number(r["steps"]), f"{number(r['eager_steps'])} "
                          f"({percent(r['eager_step_fraction'])})", f"{_ms(r['eager_time_ms'])} "
                          f"({percent(r['eager_time_fraction'])})", number(r["longest_eager_streak"]["steps"]),
                          number(r["deferral_like_waits"]["steps"]))
        out.append(table)
    shown = next((r for r in ranks if r["rank"] == rank), ranks[0]) if rank is not None else ranks[0]
    out.append(_summary_table(shown))
    if shown["eager_by_reason"]:
        out.append(_reasons_table(shown))
    else:
        out.append("no eager step on this rank")
    if shown["what_if"]:
        out.append(_what_if_table(shown))
        out += [f"note ({w['label']}): {w['note']}" for w in shown["what_if"] if w.get("note")]
    out += [f"warning: {f['message']}" for f in doc["flags"]]
    out += [f"note: {n}" for n in doc["notes"]]
    return out


# -------------------------------------------------------------------------------------- calibrate


def calibration_table(lf: Any) -> Table:
    """The fitted parameters of ``calibrate --megatron-log``."""
    table = Table(title=f"Cost model fitted to {lf.digest.label}: {number(lf.fit.steps)} steps in "
                        f"{number(lf.fit.observations)} (shape, graph) observations", box=box.SIMPLE_HEAD)
    for col in ("parameter", "preset", "fitted", "± (1 s.e.)", "range (±2 s.e.)", "note"):
        table.add_column(col, justify="left" if col in ("parameter", "note") else "right")
    for p in lf.fit.parameters:
        sigma = "-" if p.sigma_rel is None else f"{100 * p.sigma_rel:.2f}%"
        rng = "-" if p.low is None else f"{p.low:g} - {p.high:g}"
        fitted = f"{p.value:g}" if p.identified or p.value != p.preset else "(kept)"
        table.add_row(p.key.removeprefix("hardware."), f"{p.preset:g}", fitted, sigma, rng,
                      p.note or ("fitted" if p.identified else ""))
    return table


def residual_table(lf: Any) -> Table:
    table = Table(title="fitted price against logged step time", box=box.SIMPLE_HEAD)
    for col in ("steps", "observations", "logged steps", "median error", "p90 error", "max error"):
        table.add_column(col, justify="left" if col == "steps" else "right")
    for kind, s in lf.fit.residuals.items():
        if kind == "all":
            continue
        table.add_row(kind, number(s["observations"]), number(s["steps"]), percent(s["median_rel_error"]),
                      percent(s["p90_rel_error"]), percent(s["max_rel_error"]))
    a = lf.fit.residuals["all"]
    table.add_row("all (step-weighted RMS)", number(a["observations"]), number(a["steps"]),
                  percent(a["rms_rel_error"]), "", "")
    return table


def host_evidence_table(lf: Any) -> Table | None:
    rows = lf.fit.host_evidence
    if not rows:
        return None
    table = Table(title="host cost: eager steps against the same shape replayed as a graph (the fitted model)",
                  box=box.SIMPLE_HEAD)
    for col in ("real (T, P, D)", "steps", "eager", "as a graph", "eager − graphed", "framework ops",
                "host µs per op"):
        table.add_column(col, justify="left" if col.startswith("real") else "right")
    for e in rows:
        table.add_row(_shape(e["real"]), number(e["steps"]), _ms(e["eager_ms"]), _ms(e["graphed_ms"]),
                      f"{e['difference_ms']:+,.3f} ms", number(e["ops"]),
                      ("at most " if e["bound"] else "") + f"{e['host_us_per_op']:.2f}")
    return table
