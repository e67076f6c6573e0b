"""How every command ends on bad input: one line on stderr and exit code 2 (a missing optional
dependency names its install command); Ctrl-C exits 130 with nothing written. Commands print
through the consoles re-exported here.

Two layers give the same line: ``user_errors`` around a command's body (ConfigError, a missing
optional module), and ``OneLineUsageErrors``, the app's command group, for what Click refuses
while parsing the command line (an unknown option, ``--jobs 0``, a missing argument), which
Typer would otherwise print as a boxed usage message."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer._click import exceptions as click_errors  # typer >= 0.26 vendors Click: its exceptions
from typer._click.globals import get_current_context
from typer.core import TyperGroup

from cgbench.cli.console import err, out, print_error
from cgbench.errors import ConfigError
from cgbench.results.extras import OPTIONAL_DEPS, install_hint

__all__ = ["OPTIONAL_DEPS", "OneLineUsageErrors", "err", "out", "print_error", "usage_line", "user_errors"]


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input -> one clear line on stderr and exit code 2; a missing optional dependency -> its
    install command, exit 2; Ctrl-C -> exit 130, nothing written. A command starts with no
    declared inputs (``cgbench.safeio.declare_inputs``)."""
    from cgbench.cli.console import drop_held, print_held
    from cgbench.safeio import reset_inputs

    reset_inputs()
    drop_held()
    try:
        yield
    except ConfigError as e:
        drop_held()
        print_error(_suggested(str(e)))
        raise typer.Exit(2) from None
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in OPTIONAL_DEPS:
            raise
        drop_held()
        print_error(f"{top} is not installed (an optional dependency): {install_hint(OPTIONAL_DEPS[top])}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        drop_held()
        err.print("interrupted: nothing was written")
        raise typer.Exit(130) from None
    except (typer.Exit, SystemExit) as e:  # a command's own exit: 2 has printed its one line
        code = e.exit_code if isinstance(e, typer.Exit) else e.code
        if code == 2:
            drop_held()
        else:
            print_held()
        raise
    except OSError as e:
        if e.errno not in _PATH_ERRNOS or not e.filename:
            raise
        # a user's path that no file system call can take (pathlib's exists() raises these)
        drop_held()
        print_error(f"{e.filename}: {_PATH_ERRNOS[e.errno]}")
        raise typer.Exit(2) from None
    print_held()


_PATH_ERRNOS = {errno.ENAMETOOLONG: "file name too long", errno.ELOOP: "too many levels of symbolic links"}


def _suggested(message: str) -> str:
    """The message with the nearest option or key (``cgbench.config.suggest``); the message as it
    is if finding one fails, so an error line is never lost to a second error."""
    from cgbench.config.suggest import with_suggestion

    try:
        return with_suggestion(message, _command_config_dirs())
    except Exception:
        return message


def _command_config_dirs() -> list[Any]:
    """The ``--config-dir`` folders of the running command (none outside a command)."""
    ctx = get_current_context(silent=True)
    return list((ctx.params.get("config_dirs") if ctx is not None else None) or [])


def usage_line(e: click_errors.UsageError) -> str:
    """A refused command line as one line: ``--jobs: 0 is not in the range x>=1 (see cgbench sweep
    --help)``; Click's own words, with the option named first for a bad value."""
    message = " ".join(e.format_message().split())
    if isinstance(e, click_errors.BadParameter) and not isinstance(e, click_errors.MissingParameter):
        name = _param_name(e)
        if name:
            message = f"{name}: {' '.join(str(e.message).split())}"
    where = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
    return f"{message}{where}"


def _param_name(e: click_errors.BadParameter) -> str:
    if e.param_hint is not None:
        hint = e.param_hint
        return hint if isinstance(hint, str) else " / ".join(hint)
    param = e.param
    if param is None:
        return ""
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    if param.param_type_name == "option" and (longs or param.opts):
        return (longs or param.opts)[0]
    return (param.human_readable_name or "").upper()


FILE_OUT_COMMANDS = ("run", "calibrate", "report")  # their --out is a file (the others' a folder)


def folder_for_a_file(args: list[str]) -> str | None:
    """The one line for a file ``--out`` written as a folder (a trailing slash), which the path type
    would silently strip (``--out newdir/`` wrote a file named ``newdir``); else None."""
    command = next((a for a in args if not a.startswith("-")), None)
    if command not in FILE_OUT_COMMANDS:
        return None
    for i, a in enumerate(args):
        if a in ("--out", "-o") and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--out="):
            value = a[len("--out="):]
        else:
            continue
        if value.endswith(("/", os.sep)) and value.strip("/" + os.sep):
            return (f"--out: {value} names a folder (its trailing slash); cgbench {command} --out takes a file "
                    f"path, e.g. {value}{'result.json' if command != 'report' else 'report.html'} (see "
                    f"cgbench {command} --help)")
    return None


def _help_width_set() -> Any:
    """Typer's Rich help module, its width set to ``help_width()`` (imported only where help or
    Typer's own messages are printed)."""
    from typer import rich_utils

    from cgbench.cli.console import help_width

    rich_utils.MAX_WIDTH = help_width()
    return rich_utils


class OneLineUsageErrors(TyperGroup):
    """The app's group: a usage error anywhere on the command line is ``error: <one line>`` on
    stderr and exit code 2; everything else (help, completion, exit codes) is Typer's."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        if not argv or {"-h", "--help"} & set(argv):  # help is rendered: Typer's Rich help (60 ms to import)
            _help_width_set()
        folder = folder_for_a_file(argv)
        if folder is not None:
            print_error(folder)
            sys.exit(2)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as e:  # bare `cgbench`: the help, as before
            _help_width_set().rich_format_error(e)
            sys.exit(e.exit_code)
        except click_errors.UsageError as e:
            print_error(usage_line(e))
            sys.exit(2)
        except click_errors.ClickException as e:
            print_error(e.format_message())
            sys.exit(e.exit_code)
        except typer.Abort:
            _help_width_set().rich_abort_error()
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)
