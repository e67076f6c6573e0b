"""``print_plain_line`` writes what Rich writes, for any line: the direct write of a printable ASCII
line on a plain console (piped, no colour) and Rich's rendering of everything else give the same
bytes as ``Console.print`` does."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from cgbench.cli.console import print_plain_line

_PIECES = st.sampled_from(list("ab :[]/=%,.()-") + ["\t", "\r", "\x07", "é", "界", ":smile:", "[b]"])
_LINES = st.lists(_PIECES, max_size=30).map("".join) | st.text(max_size=40)


def _console(**kw) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=80, force_terminal=False, color_system=None, **kw), buf


def _rich(text, **kw) -> str:
    console, buf = _console(**kw)
    console.print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)
    return buf.getvalue()


def _ours(text, **kw) -> str:
    console, buf = _console(**kw)
    print_plain_line(console, text)
    return buf.getvalue()


@settings(max_examples=300, deadline=None)
@given(_LINES, st.booleans())
def test_a_line_is_written_as_rich_writes_it(line, styled) -> None:
    text = Text.assemble("[1/2] ", (line, "red")) if styled else line
    assert _ours(text) == _rich(text)
    assert _ours(text, emoji=True, markup=True) == _rich(text)  # verbatim whatever the console's defaults


def test_a_recording_console_still_records() -> None:
    console, buf = _console(record=True)
    print_plain_line(console, "[3/200] seed=2: eager 0.00%")
    assert console.export_text() == "[3/200] seed=2: eager 0.00%\n" == buf.getvalue()
