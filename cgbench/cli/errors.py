"""How every command ends on bad input: one line on stderr and exit code 2 (a missing optional
dependency names its install command); Ctrl-C exits 130 with nothing written. Commands print
through the consoles re-exported here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from cgbench.cli.console import err, out, print_error
from cgbench.config.schema import ConfigError

__all__ = ["OPTIONAL_DEPS", "err", "out", "print_error", "user_errors"]

OPTIONAL_DEPS = {"torch": "torch", "matplotlib": "plot"}


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input -> one clear line on stderr and exit code 2; a missing optional dependency -> its
    install command, exit 2; Ctrl-C -> exit 130, nothing written."""
    try:
        yield
    except ConfigError as e:
        print_error(str(e))
        raise typer.Exit(2) from None
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in OPTIONAL_DEPS:
            raise
        print_error(f"{top} is not installed (an optional dependency): pip install 'cgbench[{OPTIONAL_DEPS[top]}]'")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("interrupted: nothing was written", highlight=False)
        raise typer.Exit(130) from None
