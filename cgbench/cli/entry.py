"""The ``cgbench`` console script and ``python -m cgbench``: ``cgbench --help`` from the help kept by
the last identical call (``cgbench.cli.help_cache``), everything else through the Typer app
(``cgbench.cli.app.main``, imported only then)."""

from __future__ import annotations

import sys


def main() -> None:
    from cgbench.cli.help_cache import Recording, help_key, keep_help, kept_help

    args = sys.argv[1:]
    key = help_key(args, sys.stdout) if len(args) == 1 else None
    if key is None:
        _app()
        return
    text = kept_help(key)
    if text is not None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:  # `cgbench --help | head`: the reader left
            sys.exit(141)
        return
    stdout, recording = sys.stdout, Recording(sys.stdout)
    sys.stdout = recording  # type: ignore[assignment]  # Rich writes the help through it
    try:
        _app()
    except SystemExit as e:
        text = recording.text()
        if e.code in (None, 0) and text is not None:
            keep_help(key, text)
        raise
    finally:
        sys.stdout = stdout


def _app() -> None:
    from cgbench.cli.app import main as app_main

    app_main()
