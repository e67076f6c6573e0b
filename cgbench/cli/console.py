"""The consoles every command prints to.

On a terminal Rich sizes tables to the window. When output is piped (CI logs, ``| tee``) Rich
would assume 80 columns and truncate headers and values to ``e…``; there the console is wide
instead, so every header and value is printed whole.

User text (paths, override values, file contents quoted in an error) is never interpreted: the
consoles are built with Rich markup, emoji codes and highlighting off, so a string printed or put
in a table cell or title is printed as it is (``[b]`` stays ``[b]``, ``:100:`` stays ``:100:``).
Colour is only ever ours: a ``Text`` (``styled``) or a ``style=`` argument, never markup inside a
string that could also hold user text.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

PIPED_WIDTH = 240  # wide enough for every table cgbench prints
LENIENT = "cgbench-lenient"


def _lenient(error: UnicodeError) -> tuple[str | bytes, int]:
    """An output stream's encoding errors under a non-UTF-8 locale (``LC_ALL=C``): a command-line
    path's undecodable bytes (``surrogateescape``'s surrogates) are written back as they came, so the
    path is printed verbatim; any other character the stream cannot encode as ``\\x..`` escapes."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    chunk = error.object[error.start:error.end]
    if all(0xDC80 <= ord(c) <= 0xDCFF for c in chunk):
        return bytes(ord(c) - 0xDC00 for c in chunk), error.end
    return chunk.encode("ascii", "backslashreplace").decode("ascii"), error.end


def lenient_streams() -> None:
    """stdout and stderr never raise for a character their encoding lacks (a non-ASCII path, a µ
    of ours, under the C locale); a UTF-8 stream is left as it is."""
    import codecs

    try:
        codecs.lookup_error(LENIENT)
    except LookupError:
        codecs.register_error(LENIENT, _lenient)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=LENIENT)


def piped_width(stream: TextIO) -> int | None:
    """None on a terminal (Rich follows the window); otherwise a width no table or help text of
    cgbench is truncated or wrapped at (``COLUMNS`` when it is wider)."""
    try:
        if stream.isatty():
            return None
        return max(PIPED_WIDTH, int(os.environ.get("COLUMNS", "0") or 0))
    except (AttributeError, ValueError):
        return PIPED_WIDTH


class _ResultConsole(Console):
    """The stdout console: a command's result follows the reports held until its input was accepted."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        print_held()
        super().print(*objects, **kwargs)


def make_console(stderr: bool = False) -> Console:
    """A console on which no string is read as markup or emoji codes."""
    stream = sys.stderr if stderr else sys.stdout
    kind = Console if stderr else _ResultConsole
    return kind(stderr=stderr, width=piped_width(stream), markup=False, emoji=False, highlight=False)


def styled(text: str, style: str) -> Text:
    """``text`` in ``style`` (``"bold red"``), as a Text: the text itself is never parsed."""
    return Text(text, style=style)


lenient_streams()
out = make_console()
err = make_console(stderr=True)


def print_line(console: Console, *parts: str | Text) -> None:
    """One line made of plain strings and ``styled`` pieces, never wrapped (paths and commands stay
    whole for copying)."""
    console.print(Text.assemble(*parts), soft_wrap=True)


def print_plain_line(console: Console, text: str | Text) -> None:
    """One line, never wrapped. Where the console renders plain text (not a terminal, no colour, not
    recording or quiet) a line of printable ASCII is exactly what Rich would write, so it is written
    to the console's file directly: a sweep's log line a point costs 1 µs, not Rich's 70 µs of
    rendering. Anything else (a tab, a control or wide character, colour) goes through Rich. Either way
    the text is verbatim: no markup, emoji code or highlighting, as on every console of this module."""
    plain = text if isinstance(text, str) else text.plain
    if (plain.isascii() and plain.isprintable() and not console.is_terminal and console.color_system is None
            and not console.record and not console.quiet):
        console.file.write(plain + "\n")
        console.file.flush()
        return
    console.print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """One line on stderr: ``error: <message>``, the message printed verbatim."""
    print_line(err, styled("error:", "bold red"), " ", message)


def print_warning(message: str) -> None:
    """One line on stderr: ``warning: <message>``, verbatim."""
    print_line(err, styled("warning:", "yellow"), " ", message)


# Reports a command prints only once its input is accepted (the --megatron-args translation): a
# refusal stays one line, and the report shows when the work starts or the command ends.
_held: list[str] = []


def print_when_accepted(text: str) -> None:
    """Hold ``text`` for stderr until ``print_held`` (the work starts, or the command succeeds);
    ``drop_held`` forgets it (the command refused its input)."""
    _held.append(text)


def print_held() -> None:
    while _held:
        err.print(_held.pop(0), end="", highlight=False, markup=False, soft_wrap=True)


def drop_held() -> None:
    _held.clear()


def help_width() -> int | None:
    """The width of ``--help``: ``TERMINAL_WIDTH`` when set (Typer's own setting), else the
    terminal's, else (piped) ``piped_width``, so no option's help is cut to ``…``."""
    explicit = os.environ.get("TERMINAL_WIDTH", "")
    if explicit.isdigit():
        return int(explicit)
    return piped_width(sys.stdout)
