"""Write docs/metrics.md from the metric registry (cgbench/results/names.py).

    python scripts/metric_glossary.py          # rewrite the file
    python scripts/metric_glossary.py --check  # exit 1 if the file is not current (used by the tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

from cgbench.results.names import METRICS, SUMMARY_FIELDS

OUT = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def render() -> str:
    lines = [
        "# Metric glossary",
        "",
        "Every key of a result document's `metrics` block. Generated from the registry",
        "(`cgbench/results/names.py`) by `python scripts/metric_glossary.py`; do not edit by hand.",
        "",
        f"A *summary* is a record `{{{', '.join(SUMMARY_FIELDS)}}}` (nearest-rank percentiles); address",
        "one field with a dot (`ttft_ms.p99`). A *keyed* record maps names (reasons, kinds) to counts.",
        "*Deterministic* metrics are step accounting that the `sim` backend reproduces exactly for a",
        "config and seed; *clock* metrics exist only when the backend has a clock; *EP* metrics only with",
        "expert parallelism (`engine.ep_size` > 1). Fractions are stored raw (0..1) and shown as",
        "percentages in tables.",
        "",
        "| metric | unit | better | kind | definition |",
        "|---|---|---|---|---|",
    ]
    for m in METRICS:
        kind = ", ".join(k for k, on in (("summary", m.summary), ("keyed", m.keyed),
                                         ("deterministic", m.deterministic), ("clock", m.needs_clock),
                                         ("EP", m.needs_ep)) if on)
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
