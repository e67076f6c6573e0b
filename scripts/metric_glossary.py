"""Write docs/metrics.md from the metric registry (cgbench/results/names.py).

    python scripts/metric_glossary.py          # rewrite the file
    python scripts/metric_glossary.py --check  # exit 1 if the file is not current (used by the tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

from cgbench.results.names import METRICS, PERCENTILE_METHOD, SUMMARY_FIELDS

OUT = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def render() -> str:
    lines = [
        "# Metric glossary",
        "",
        "Every key of a result document's `metrics` block. Generated from the registry",
        "(`cgbench/results/names.py`) by `python scripts/metric_glossary.py`; do not edit by hand.",
        "",
        f"A *summary* is a record `{{{', '.join(SUMMARY_FIELDS)}}}` over the values of one latency (or",
        "iteration count); address one field with a dot (`ttft_ms.p99`). `count` is how many values,",
        "`std` the population standard deviation (divided by n). A *keyed* record maps names (reasons,",
        "kinds) to counts. *Deterministic* metrics are step accounting that the `sim` backend reproduces",
        "exactly for a config and seed; *clock* metrics exist only when the backend has a clock; *EP*",
        "metrics only with expert parallelism (`engine.ep_size` > 1), *DP* ones only with data parallelism",
        "(`engine.dp_size` > 1); *per rank* ones are lists, one value per rank; *spec* metrics only with",
        "speculative decoding (`engine.num_speculative_tokens` > 0, docs/speculative.md). Fractions are",
        "stored raw (0..1) and shown as percentages in tables.",
        "",
        "## Percentiles",
        "",
        f"cgbench's percentiles are **{PERCENTILE_METHOD}**: the p-th percentile of n ascending values is the",
        "value at 1-based rank ceil(p / 100 * n) (at least 1). It is always a value that was observed: one",
        "request's TTFT, a whole number of iterations, which the simulator reproduces exactly and a reader",
        "can find in the per-request records. The *interpolated* percentile (numpy's default `linear`,",
        "used by several serving benchmarks) takes the fractional rank (n - 1) * p / 100 + 1 and blends",
        "the two neighbouring values. The two agree on large samples of smooth data; on small samples",
        "or where the tail has few values they differ: for the values 1, 2, ..., 10 the nearest-rank",
        "p90 is 9 and p99 is 10 (the maximum), the interpolated ones 9.1 and 9.91. Compare a cgbench",
        "percentile with another tool's only when both name the same method, or when n is large.",
        "`itl_ms` is a histogram of inter-token gaps: its statistics weight each gap by how often it",
        "occurred, with the same nearest rank over the expanded values.",
        "",
        "## Metrics",
        "",
        "| metric | unit | better | kind | definition |",
        "|---|---|---|---|---|",
    ]
    for m in METRICS:
        kind = ", ".join(k for k, on in (("summary", m.summary), ("keyed", m.keyed),
                                         ("deterministic", m.deterministic), ("clock", m.needs_clock),
                                         ("EP", m.needs_ep), ("DP", m.needs_dp), ("spec", m.needs_spec),
                                         ("per rank", m.per_rank), ("prefix caching", m.needs_prefix)) if on)
        lines.append(f"| `{m.name}` | {m.unit} | {m.better} | {kind or '-'} | {m.description} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is not current: run python scripts/metric_glossary.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
