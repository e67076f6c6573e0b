"""What ``cgbench grid`` prints: a grid's graphs in stored order and what they cover."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from cgbench.grids.coverage import Coverage
from cgbench.grids.lookup import Grid
from cgbench.grids.megatron import FamilySizing
from cgbench.grids.shapes import BatchShape, kind_of
from cgbench.results.formatting import percent as _pct


def grid_json(grid: Grid, capture: dict | None = None, families: tuple[FamilySizing, ...] = ()) -> dict:
    """``{"graphs": [[T, P, D], ...], "token_counts": [...]}`` in stored order, the capture estimate
    (``cgbench.backends.sim.capture.grid_capture_estimate``) under ``capture`` when given, and the
    generator's families with their sizing (``cgbench.grids.megatron.family_sizing``) under ``families``."""
    doc: dict = {"graphs": [list(g) for g in grid.graphs], "token_counts": list(grid.token_counts or [])}
    if capture is not None:
        doc["capture"] = capture
    if families:
        doc["families"] = [{"family": f.family, "distribution": f.distribution, "cap": f.cap,
                            "token_sizes": list(f.token_sizes), "prefill_counts": list(f.prefill_counts)}
                           for f in families]
    return doc


def family_of(g: BatchShape, families: tuple[FamilySizing, ...]) -> str:
    """The generator family a graph came from, with its sizing: P > 0 graphs come from the
    prefill/mixed token sizes, decode-only graphs from the decode ones."""
    name = "prefill/mixed" if g.prefill_req_count > 0 else "decode-only"
    return next((f"{name} ({f.distribution})" for f in families if f.family == name), name)


def _sizes(values: set[int]) -> str:
    return ", ".join(str(v) for v in sorted(values, reverse=True)) or "-"


def graphs_table(grid: Grid, families: tuple[FamilySizing, ...] = ()) -> Table:
    t = Table(title=f"Captured graphs: {grid.name} (stored order)")
    cols = ("#", "T", "P", "D", "kind") + (("family",) if families else ())
    for col in cols:
        t.add_column(col, justify="left" if col in ("kind", "family") else "right")
    for i, g in enumerate(grid.graphs):
        cells = [str(i), str(g.token_count), str(g.prefill_req_count), str(g.decode_req_count), kind_of(g)]
        t.add_row(*cells, *((family_of(g, families),) if families else ()))
    return t


def family_line(f: FamilySizing) -> str:
    """One family's sizing in a line: distribution, cap, token sizes (and prefill counts)."""
    line = f"{f.distribution}, cap {f.cap}: {_sizes(set(f.token_sizes))}"
    if f.prefill_counts:
        line += f"; P = {', '.join(str(p) for p in f.prefill_counts)}"
    return line


def summary_table(grid: Grid, families: tuple[FamilySizing, ...] = ()) -> Table:
    t = Table(title=f"Grid summary: {grid.name}", show_header=False)
    t.add_column("key")
    t.add_column("value")
    counts = grid.counts_by_kind()
    t.add_row("graphs", str(len(grid.graphs)))
    for kind, n in counts.items():
        t.add_row(f"  {kind}", str(n))
    t.add_row("matching", "strict (hybrid)" if grid.strict else "non-strict")
    if grid.exact_decode:
        t.add_row("decode batches", "exact batch size only (no padding)")
    t.add_row("token sizes", _sizes(set(grid.token_counts or [])))
    t.add_row("  prefill/mixed", _sizes({g.token_count for g in grid.graphs if g.prefill_req_count > 0}))
    t.add_row("  decode-only", _sizes({g.token_count for g in grid.graphs if g.prefill_req_count == 0}))
    for f in families:
        t.add_row(f"sizing: {f.family}", family_line(f))
    return t


def coverage_table(cov: Coverage) -> Table:
    t = Table(title=(f"Coverage of reachable steps (max_requests {cov.max_requests}, max_tokens "
                     f"{cov.max_tokens}, msl {cov.max_sequence_length}, spec {cov.num_speculative_tokens})"))
    t.add_column("states")
    t.add_column("covered", justify="right")
    t.add_column("total", justify="right")
    t.add_column("fraction", justify="right")
    mode = "strict" if cov.strict else "non-strict"
    t.add_row("decode-only", str(cov.decode_covered), str(cov.decode_states), _pct(cov.decode_fraction))
    t.add_row(f"mixed/prefill ({mode}, this grid)", str(cov.mixed_covered), str(cov.mixed_states),
              _pct(cov.mixed_fraction))
    t.add_row("all (strict matching)", str(cov.decode_covered + cov.mixed_covered_strict), str(cov.states),
              _pct(cov.strict_fraction))
    t.add_row("all (non-strict matching)", str(cov.decode_covered + cov.mixed_covered_non_strict),
              str(cov.states), _pct(cov.non_strict_fraction))
    for reason, n in cov.misses_by_reason.items():
        t.add_row(f"miss: {reason}", str(n), str(cov.states), _pct(n / cov.states if cov.states else 0.0))
    return t


def holes_table(cov: Coverage) -> Table:
    t = Table(title="Example holes (real steps that run eager)")
    t.add_column("real [T]: P + D")
    t.add_column("reason")
    t.add_column("why")
    for h in cov.holes:
        t.add_row(str(h.shape), h.reason, h.explanation or "")
    return t


def capture_table(capture: dict) -> Table:
    """Estimated capture time, graph pool and the device-memory check."""
    mem = capture["memory_gb"]
    verdict = ("fits", "") if capture["fits"] else ("does not fit", "bold red")
    t = Table(title=Text.assemble(f"Capture cost (estimate, tp {capture['tp_size']}): ", verdict), show_header=False)
    t.add_column("item")
    t.add_column("value", justify="right")
    t.add_row("capture time", f"{capture['capture_s']:.2f} s for {capture['graphs']} graphs")
    t.add_row("graph pool (shared)", f"{capture['graph_pool_gb']:.2f} GB")
    for key, label in (("weights", "weights"), ("kv_cache", "KV cache pool"), ("mamba_state", "Mamba state"),
                       ("activations", "eager activations (max step)"), ("graph_pool", "graph pool")):
        t.add_row(f"  {label}", f"{mem[key]:.2f} GB")
    t.add_row("total / device", f"{mem['total']:.2f} / {mem['device']:.0f} GB")
    return t


def grid_table(grid: Grid, cov: Coverage, capture: dict | None = None,
               families: tuple[FamilySizing, ...] = ()) -> list[Table]:
    """The graphs in stored order (with the generator family each came from), a summary (with each
    family's sizing), the coverage, example holes and the capture cost."""
    tables = [graphs_table(grid, families), summary_table(grid, families), coverage_table(cov)]
    if cov.holes:
        tables.append(holes_table(cov))
    if capture is not None:
        tables.append(capture_table(capture))
    return tables
