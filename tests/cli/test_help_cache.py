"""``cgbench --help`` from the kept text (``cgbench.cli.help_cache``): byte for byte what Typer prints,
piped and on a terminal of each size, and never where the text could differ (other arguments, shell
completion, another environment, stream or code)."""

from __future__ import annotations

import io
import os
import pty
import select
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from cgbench.cli import help_cache
from cgbench.user_cache import ENV_CACHE_DIR

pytestmark = pytest.mark.slow

ENTRY = [sys.executable, "-m", "cgbench"]


def _env(cache: Path | str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE")}
    env.pop("COLUMNS", None)
    return {**env, ENV_CACHE_DIR: str(cache), **extra}


def _piped(args: list[str], env: dict[str, str]) -> bytes:
    return subprocess.run([*ENTRY, *args], env=env, capture_output=True, check=True).stdout


def _on_terminal(args: list[str], env: dict[str, str], rows: int, cols: int) -> bytes:
    """What the command prints on a pseudo-terminal of ``rows`` x ``cols``."""
    import fcntl
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([*ENTRY, *args], env={**env, "TERM": "xterm-256color"}, stdin=follower,
                            stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    out = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower side closed
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=30)
    os.close(leader)
    assert proc.returncode == 0
    return bytes(out)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_piped_help_is_typers_and_is_kept(tmp_path, flag):
    typer_text = _piped([flag], _env("off"))
    assert b"Usage: python -m cgbench" in typer_text
    first = _piped([flag], _env(tmp_path))
    assert list((tmp_path / "help").glob("*.txt"))  # kept
    assert _piped([flag], _env(tmp_path)) == first == typer_text


@pytest.mark.parametrize(("rows", "cols"), [(24, 80), (50, 132)])
def test_terminal_help_is_typers_for_its_size(tmp_path, rows, cols):
    typer_text = _on_terminal(["--help"], _env("off"), rows, cols)
    assert b"\x1b[" in typer_text  # colour on a terminal
    assert _on_terminal(["--help"], _env(tmp_path), rows, cols) == typer_text  # composed and kept
    assert _on_terminal(["--help"], _env(tmp_path), rows, cols) == typer_text  # read back
    assert len(list((tmp_path / "help").glob("*.txt"))) == 1


def test_the_program_name_is_part_of_the_key(tmp_path):
    """The usage line names the program as it was started: ``python -m cgbench`` or ``cgbench``."""
    script = Path(sys.executable).with_name("cgbench")
    if not script.exists():
        pytest.skip("no cgbench console script beside this Python")
    module_text = _piped(["--help"], _env(tmp_path))
    script_text = subprocess.run([str(script), "--help"], env=_env(tmp_path), capture_output=True,
                                 check=True).stdout
    assert b"Usage: python -m cgbench" in module_text and b"Usage: cgbench " in script_text
    again = subprocess.run([str(script), "--help"], env=_env(tmp_path), capture_output=True, check=True).stdout
    assert again == script_text == subprocess.run([str(script), "--help"], env=_env("off"), capture_output=True,
                                                  check=True).stdout


def test_a_kept_text_that_cannot_be_read_is_printed_afresh(tmp_path):
    typer_text = _piped(["--help"], _env("off"))
    _piped(["--help"], _env(tmp_path))
    [entry] = (tmp_path / "help").glob("*.txt")
    entry.write_bytes(b"\xff\xfe not utf-8")
    assert _piped(["--help"], _env(tmp_path)) == typer_text


def test_the_key_follows_what_the_text_depends_on(monkeypatch):
    stream = open(os.devnull, "w")  # noqa: SIM115 - a real descriptor, not a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    key = help_cache.help_key(["--help"], stream)
    assert key is not None and key == help_cache.help_key(["--help"], stream)
    assert help_cache.help_key(["-h"], stream) not in (None, key)
    monkeypatch.setenv("NO_COLOR", "1")
    assert help_cache.help_key(["--help"], stream) not in (None, key)
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("_CGBENCH_COMPLETE", "bash_complete")
    assert help_cache.help_key(["--help"], stream) is None  # completion: Typer's
    monkeypatch.delenv("_CGBENCH_COMPLETE")
    for args in (["run", "--help"], ["--version"], [], ["--help", "--help"]):
        assert help_cache.help_key(args, stream) is None
    monkeypatch.setenv(ENV_CACHE_DIR, "off")
    assert help_cache.help_key(["--help"], stream) is None
    stream.close()


def test_a_changed_module_changes_the_key(tmp_path, monkeypatch):
    """Every file of the installed cgbench counts, by size and time stamp (a command's help text may
    come from any module); here a copy of the package stands for the installed one."""
    import shutil

    package = Path(help_cache.__file__).resolve().parents[1]
    copy = tmp_path / "cgbench"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    monkeypatch.setattr(help_cache, "__file__", str(copy / "cli" / "help_cache.py"))
    stream = open(os.devnull, "w")  # noqa: SIM115
    before = help_cache.help_key(["--help"], stream)
    (copy / "engine" / "core.py").write_text((copy / "engine" / "core.py").read_text() + "\n")
    assert help_cache.help_key(["--help"], stream) != before
    stream.close()


def test_bytes_written_past_the_recording_are_not_replayed():
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    recording = help_cache.Recording(stream)
    recording.write("text")
    with pytest.raises(TypeError):
        recording.write(b"")  # type: ignore[arg-type]  # Click's probe for a binary stream: as the stream's
    recording.buffer.write(b"")
    assert recording.text() == "text"
    recording.buffer.write(b"bytes")  # Click's echo of bytes goes to the buffer: not in the text
    assert recording.text() is None
