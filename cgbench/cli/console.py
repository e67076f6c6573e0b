"""The consoles every command prints to.

On a terminal Rich sizes tables to the window. When output is piped (CI logs, ``| tee``) Rich
would assume 80 columns and truncate headers and values to ``e…``; there the console is wide
instead, so every header and value is printed whole. User text is never read as Rich markup.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPED_WIDTH = 240  # wide enough for every table cgbench prints


def _width(stream) -> int | None:
    if stream.isatty():
        return None  # Rich follows the terminal
    return max(PIPED_WIDTH, int(os.environ.get("COLUMNS", "0") or 0))


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    try:
        width = _width(stream)
    except (AttributeError, ValueError):
        width = PIPED_WIDTH
    return Console(stderr=stderr, width=width, highlight=False)


out = make_console()
err = make_console(stderr=True)


def print_error(message: str) -> None:
    """One line on stderr: ``error: <message>``, the message printed verbatim (no markup)."""
    err.print("[bold red]error:[/bold red] ", end="", soft_wrap=True)
    err.print(message, markup=False, soft_wrap=True)


def print_warning(message: str) -> None:
    """One line on stderr: ``warning: <message>``, verbatim."""
    err.print("[yellow]warning:[/yellow] ", end="", soft_wrap=True)
    err.print(message, markup=False, soft_wrap=True)
