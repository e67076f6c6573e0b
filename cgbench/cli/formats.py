"""The ``--format`` values of the commands and the one check every command makes of them."""

from __future__ import annotations

from collections.abc import Sequence

from cgbench.errors import ConfigError

FORMATS = ("table", "markdown", "json", "csv")  # run, grid, schedule, sweep, compare
TABLE_OR_JSON = ("table", "json")  # cost, advise


def check_format(fmt: str, allowed: Sequence[str] = FORMATS) -> str:
    """``fmt`` when it is one of ``allowed``; otherwise one ConfigError line (exit 2)."""
    if fmt not in allowed:
        raise ConfigError(f"--format: {fmt!r} is not one of {', '.join(allowed)}")
    return fmt
