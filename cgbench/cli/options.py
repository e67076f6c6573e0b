"""Command-line options shared by several commands, defined once."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

ConfigDirs = Annotated[Optional[list[Path]], typer.Option(
    "--config-dir", "-cd", help="Also search DIR for config options (DIR/model/my70b.yaml -> model=my70b); "
    "repeatable. CGBENCH_CONFIG_DIR does the same.", show_default=False)]


@contextmanager
def config_dirs_for_children(dirs: Sequence[Path]) -> Iterator[None]:
    """``--config-dir`` for a command whose configs are composed further away, in worker processes
    too (``advise``): the folders are checked (one ``--config-dir`` error line) and added to
    ``CGBENCH_CONFIG_DIR`` for the command's duration, which every composition reads."""
    from cgbench.config.paths import ENV_CONFIG_DIR, user_config_dirs

    if not dirs:
        yield
        return
    user_config_dirs(dirs)  # a missing folder is named as --config-dir, before anything runs
    before = os.environ.get(ENV_CONFIG_DIR)
    os.environ[ENV_CONFIG_DIR] = os.pathsep.join([*filter(None, [before]), *(str(Path(d).resolve()) for d in dirs)])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_CONFIG_DIR, None)
        else:
            os.environ[ENV_CONFIG_DIR] = before


@contextmanager
def config_folders(dirs: Sequence[Path] | None) -> Iterator[None]:
    """``--config-dir`` for a command that runs its configs in process: their ``plugins.yaml``
    stay in effect after composing, while the config's parts are built and run."""
    from cgbench.config.registry.plugin_files import plugin_folders

    with plugin_folders(list(dirs or [])):
        yield


MegatronArgs = Annotated[Optional[str], typer.Option(
    "--megatron-args", metavar="ARGS|@FILE", help="Megatron-LM launch arguments ('--hidden-size 4096 ...', or "
    "@FILE) translated into overrides first (printed on stderr); overrides typed here win. See "
    "cgbench docs megatron-args.", show_default=False)]


def with_launch_line(value: str | None, overrides: list[str], config_dirs: Sequence[Path] | None = None, *,
                     compose_with: list[str] | None = None) -> list[str]:
    """``--megatron-args``, the same on every command: the translated overrides first, the typed
    ones after (they win), and the translation printed on stderr once the command's input is accepted
    (``megatron_args.with_megatron_args``, ``console.print_when_accepted``).
    ``compose_with``: one point's overrides, when ``overrides`` are a sweep's."""
    if value is None:
        return list(overrides)
    from cgbench.cli.console import print_when_accepted
    from cgbench.config.megatron_args import with_megatron_args

    ovr, translation = with_megatron_args(value, list(overrides), config_dirs=list(config_dirs or []),
                                          compose_with=compose_with)
    print_when_accepted(translation)  # a later refusal of the command line stays its one line
    return ovr
def complete_override(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of an override (``cgbench --install-completion``): ``model=<TAB>`` lists the
    group's options (shipped and in the folders of ``--config-dir`` and ``$CGBENCH_CONFIG_DIR``,
    ``+experiment=`` their experiments), ``engine.<TAB>`` the keys of that record, a bare word the groups
    and the top-level keys."""
    from cgbench.config.completion import override_completions

    dirs = [str(d) for d in (ctx.params.get("config_dirs") or [])]
    try:
        return override_completions(incomplete, dirs)
    except Exception:  # noqa: BLE001 - a completion that fails offers nothing, never a traceback in the shell
        return []
