"""Opening a trace file: a regular file (``cgbench.safeio``'s rules) of at most ``MAX_TRACE_BYTES``,
gzip'd or not (told by its first two bytes, whatever its name), read line by line as UTF-8, each
line at most ``MAX_LINE_CHARS`` characters, so that a trace of any length is read in bounded
memory. The size limit is far above ``safeio.MAX_FILE_BYTES`` (a file read whole): a trace
streams, and a week of production traffic is a few GB."""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from cgbench.errors import ConfigError
from cgbench.safeio import MAX_LINE_CHARS, describe_missing, kind_of

GZIP_MAGIC = b"\x1f\x8b"
MAX_TRACE_BYTES = 8 * 2**30
# a gzip'd trace expands ~5-10x; more than this is a bomb, not a trace (a million-row trace is ~35 MB)
MAX_DECOMPRESSED_BYTES = 4 * MAX_TRACE_BYTES
_COMPRESSED_SUFFIXES = (".gz", ".gzip")


def container_suffix(path: Path) -> str:
    """The suffix that names the container (``.csv``, ``.jsonl``), a compression suffix skipped."""
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and suffixes[-1] in _COMPRESSED_SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


class _Limited(io.RawIOBase):
    """A binary stream that refuses to yield more than ``limit`` bytes (a gzip bomb)."""

    def __init__(self, inner: io.BufferedIOBase, limit: int, label: str) -> None:
        self._inner, self._left, self._label = inner, limit, label

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        data = self._inner.read(min(len(b), self._left + 1))
        if len(data) > self._left:
            raise ConfigError(f"{self._label}: decompresses to more than {MAX_DECOMPRESSED_BYTES:,} bytes")
        self._left -= len(data)
        b[:len(data)] = data
        return len(data)


def _open_binary(path: Path, label: str, key: str = "workload.trace") -> io.BufferedReader:
    """``key``: the option or config key an error names first."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer would block forever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{key}: {label}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{key}: {label}: {describe_missing(path, 'a regular file')}") from None
    except OSError as e:
        raise ConfigError(f"{key}: {label}: cannot read: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ConfigError(f"{key}: {label}: is {kind_of(st.st_mode)}, not a regular file")
    if st.st_size > MAX_TRACE_BYTES:
        os.close(fd)
        raise ConfigError(f"{key}: {label}: is {st.st_size:,} bytes, more than the "
                          f"{MAX_TRACE_BYTES:,}-byte limit")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def is_gzip(path: Path, label: str, key: str = "workload.trace") -> bool:
    with _open_binary(path, label, key) as f:
        return f.read(2) == GZIP_MAGIC


def count_lines(path: Path, label: str) -> int:
    """Lines of an uncompressed file (newlines + 1), counted in 1 MiB chunks without decoding."""
    newlines = 0
    with _open_binary(path, label) as f:
        while chunk := f.read(1 << 20):
            newlines += chunk.count(b"\n")
    return newlines + 1


def file_size(path: Path, label: str, key: str = "workload.trace") -> int:
    """The file's size in bytes (as stored: compressed for a gzip'd file)."""
    with _open_binary(path, label, key) as f:
        return os.fstat(f.fileno()).st_size


LINE_CHECK_EVERY = 1 << 16  # lines between two calls of trace_lines' line_bound


def trace_lines(path: Path, label: str, key: str = "workload.trace",
                consumed: list[int] | None = None,
                line_bound: Callable[[int], None] | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for every line of the file (newlines kept, as ``csv`` wants them).
    ``key``: the option or config key an error names first; ``consumed``: a one-item list kept at the
    bytes of the file read so far (compressed bytes for a gzip'd file), for a progress display;
    ``line_bound``: called with the count of lines read every ``LINE_CHECK_EVERY`` lines (blank
    ones included), to refuse as it reads the lines a plain file's count refuses before reading (a
    gzip'd file's lines are known only once decompressed)."""
    raw = _open_binary(path, label, key)
    try:
        binary: io.BufferedIOBase = raw
        if raw.peek(2)[:2] == GZIP_MAGIC:
            binary = io.BufferedReader(_Limited(gzip.GzipFile(fileobj=raw), MAX_DECOMPRESSED_BYTES, label))
        # utf-8-sig: spreadsheets often write a byte-order mark before the CSV header
        text = io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")
        lineno = 0
        while True:
            try:
                line = text.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError:
                raise ConfigError(f"{key}: {label}:{lineno + 1}: cannot read: not a UTF-8 text "
                                  "file") from None
            except (gzip.BadGzipFile, EOFError, zlib.error) as e:
                raise ConfigError(f"{key}: {label}: cannot read: a damaged gzip file ({e or 'truncated'})") \
                    from None
            if not line:
                return
            lineno += 1
            if not lineno % LINE_CHECK_EVERY:
                if consumed is not None:
                    consumed[0] = raw.tell()
                if line_bound is not None:
                    line_bound(lineno)
            if len(line) > MAX_LINE_CHARS:
                raise ConfigError(f"{label}:{lineno}: line longer than {MAX_LINE_CHARS:,} characters")
            yield lineno, line
    finally:
        raw.close()
