"""``cgbench --help`` as it was last printed here, without importing Typer, Rich or a command.

Typer's Rich help costs about 0.3 s a call (the imports of every command module, Typer and Rich, then
the rendering), for a text that only changes with the code and the terminal. So the entry point
(``cgbench.cli.entry``) prints the text a previous ``cgbench --help`` printed when nothing it depends on
has changed, and otherwise lets Typer print it and keeps what it printed. The key holds all the text
depends on: the arguments and the program's name, every file of the installed cgbench (by size and time stamp), Typer's,
Rich's and Click's installed files, the Python version, stdout's kind (a terminal, its size, its
encoding) and the environment variables Rich and Typer read (colour, width, terminal kind). Shell
completion (``_CGBENCH_COMPLETE``, Typer's and the shells' variables) never takes this path.

Where: the ``help`` folder of ``cgbench.user_cache`` (``CGBENCH_CACHE_DIR=off`` turns it off)."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from cgbench import __version__
from cgbench.user_cache import cache_folder, installed_stamp, read_entry, tree_files, write_entry

HELP_ARGS = (("--help",), ("-h",))
MAX_ENTRIES = 32
_SUFFIX = ".txt"
# what Rich and Typer read to decide colour, width and the terminal's kind
_ENV = ("TERM", "COLORTERM", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "PY_COLORS", "TTY_COMPATIBLE",
        "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "TERMINAL_WIDTH", "GITHUB_ACTIONS",
        "DATABRICKS_RUNTIME_VERSION", "CLICOLOR", "CLICOLOR_FORCE")
_ENV_PREFIXES = ("TYPER_", "_TYPER", "CGBENCH_", "LC_", "LANG", "PYTHONIOENCODING")


def completing() -> bool:
    """Whether a shell asks for completions (Click's ``_CGBENCH_COMPLETE``, Typer's, bash's)."""
    return any(k.endswith("_COMPLETE") or k.startswith(("_TYPER_COMPLETE", "COMP_")) for k in os.environ)


def help_key(args: Sequence[str], stream: TextIO) -> str | None:
    """The key of the help ``args`` print on ``stream`` now, or None where it is not kept."""
    if tuple(args) not in HELP_ARGS or completing() or cache_folder("help") is None:
        return None
    try:
        main = sys.modules.get("__main__")  # the program's name in the usage line: `cgbench`, `python -m cgbench`
        program = f"{sys.argv[0]}\0{getattr(main, '__package__', None)}\0{sys.executable}"
        h = hashlib.sha256(f"cgbench-help 1 {__version__} {sys.version} {list(args)}\0{program}".encode())
        for rel, path in tree_files(Path(__file__).resolve().parents[1]):  # by size and time stamp: cheap
            st = os.stat(path)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        h.update(installed_stamp(("typer", "rich", "click")).encode())
        tty = stream.isatty()
        size = tuple(os.get_terminal_size(stream.fileno())) if tty else ()
        h.update(f"{tty}\0{size}\0{getattr(stream, 'encoding', '')}\0".encode())
        for k in sorted(os.environ):
            if k in _ENV or k.startswith(_ENV_PREFIXES):
                h.update(f"{k}={os.environ[k]}\0".encode())
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor: not kept
        return None
    return h.hexdigest()


def kept_help(key: str) -> str | None:
    """The help kept under ``key``, or None."""
    folder = cache_folder("help")
    data = read_entry(folder / (key + _SUFFIX)) if folder is not None else None
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def keep_help(key: str, text: str) -> None:
    folder = cache_folder("help")
    if folder is not None and text:
        write_entry(folder / (key + _SUFFIX), text.encode("utf-8"), MAX_ENTRIES)


class Recording:
    """A text stream standing for ``stream`` (same terminal, size and encoding, to Rich) that also keeps
    what is written through it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.parts: list[str] = []
        self.whole = True  # False once something was written that the text does not hold

    def write(self, text: str) -> int:
        if isinstance(text, str):
            self.parts.append(text)
        elif text:
            self.whole = False
        return self._stream.write(text)  # bytes raise here, as on the stream: Click probes with b""

    @property
    def buffer(self) -> Any:
        """The stream's binary buffer, watched: bytes written there are not in the text."""
        return _Watched(self._stream.buffer, self)

    def text(self) -> str | None:
        """What was written, or None where it cannot be replayed."""
        return "".join(self.parts) if self.whole else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Watched:
    """A binary buffer whose writes make its recording not replayable."""

    def __init__(self, buffer: Any, recording: Recording) -> None:
        self._buffer = buffer
        self._recording = recording

    def write(self, data: bytes) -> int:
        if data:
            self._recording.whole = False
        return self._buffer.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buffer, name)
