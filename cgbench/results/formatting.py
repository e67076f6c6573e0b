"""One number formatter for every table: integers as integers, fractions as percentages, other
floats to a few significant digits. JSON keeps the raw values; the unit is in the metric registry."""

from __future__ import annotations

from typing import Any

from cgbench.results.names import FRACTION, metric


def percent(x: Any, digits: int = 2) -> str:
    """0.0171 -> '1.71%'; anything that is not a number -> '-'."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-"
    return f"{100.0 * x:.{digits}f}%"


def number(x: Any, digits: int = 2) -> str:
    """An int as an int (thousands separated); a float to ``digits`` decimals; else '-'."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-" if x is None or not isinstance(x, (str, bool)) else str(x)
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15 and digits == 0):
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def compact(x: Any, digits: int = 1) -> str:
    """A number for a narrow table: 1,234 / 12.3k / 4.6M (a float under 10,000 to ``digits``
    decimals); anything that is not a number -> '-'."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-"
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.1f}M"
    if a >= 1e4:
        return f"{x / 1e3:.1f}k"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def significant(x: Any, digits: int = 6) -> str:
    """Compare-style: ints exactly, floats to ``digits`` significant digits, other values as text."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.{digits}g}"


def metric_value(name: str, x: Any, digits: int = 2) -> str:
    """A metric's value as a table shows it: fractions as percentages, by the registry's unit."""
    m = metric(name)
    if m is not None and m.unit == FRACTION:
        return percent(x, digits)
    return number(x, digits)


def goodput_text(metrics: dict[str, Any]) -> str:
    """``1.23 (97.50% of requests; slo ttft_ms<=500)``, or ``n/a (no SLO set)``: a run without an SLO
    has no goodput (``slo.*`` unset; a result from before ``goodput_slo`` existed shows its numbers)."""
    rate, share, slo = metrics.get("goodput_req_s"), metrics.get("goodput_fraction"), metrics.get("goodput_slo")
    if rate is None or slo == "none":
        return "n/a (no SLO set)"
    return f"{number(rate)} ({percent(share)} of requests" + (f"; slo {slo})" if slo else ")")
