"""What a plug-in entry is before it is loaded: one record for both routes in (installed entry
points, ``plugins.py``; a config folder's ``plugins.yaml``, ``plugin_files.py``), and the error a
plug-in raises, and the one call boundary every call into a plug-in's code goes through
(``foreign``, ``at_most``). Imports nothing of cgbench but the error type, so both readers can share it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, TypeVar

from cgbench.errors import ConfigError

T = TypeVar("T")

ENTRY_POINT_GROUPS = {"policies": "cgbench.policies", "grids": "cgbench.grids", "workloads": "cgbench.workloads"}


class PluginError(ConfigError):
    """A plug-in could not be loaded or is not a valid entry; the message names it."""


@dataclass(frozen=True)
class PluginSource:
    """Where one plug-in entry comes from, loaded only when asked: an installed entry point or a
    ``plugins.yaml`` node. ``origin`` says where, for messages (``describe``); ``called`` names what
    the entry's own ``name`` must equal; ``arguments`` tells apart two nodes of one target."""

    name: str
    group: str
    value: str
    origin: str
    called: str = "the entry point's name"
    arguments: str = ""
    declared: bool = False  # by a user's plugins.yaml (not an installed distribution)
    loader: Callable[[], object] = field(default=lambda: None, compare=False, repr=False)

    def load(self) -> object:
        return self.loader()


def one_line(e: BaseException) -> str:
    """A foreign error as ``Type: message`` on one line: the root of a chain of causes (Hydra wraps
    an import error in two layers of its own)."""
    seen = {id(e)}
    while e.__cause__ is not None and id(e.__cause__) not in seen:
        e = e.__cause__
        seen.add(id(e))
    try:
        text = " ".join(str(e).split())
    except BaseException:  # a foreign exception whose __str__ raises too
        text = "(its message could not be read)"
    return f"{type(e).__name__}: {text}"[:300]


def foreign(where: str | Callable[[], str], what: str, fn: Callable[..., T], *args: Any,
            passes: tuple[type[BaseException], ...] = ()) -> T:
    """``fn(*args)``, a plug-in's code: anything it raises but ``KeyboardInterrupt`` (``SystemExit``,
    ``GeneratorExit``, any ``BaseException`` subclass, any ``Exception``) is one ``PluginError``
    ``WHERE: WHAT: Type: message`` (WHAT: ``build failed``, ...). ``passes``: what the plug-in's contract lets it raise
    (a policy's ``check`` raises ``ConfigError``). ``where`` may be a function giving it, asked only on
    failure (naming a plug-in's source reads the installed metadata)."""
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except PluginError:
        raise
    except BaseException as e:
        if passes and isinstance(e, passes):
            raise
        raise PluginError(f"{where if isinstance(where, str) else where()}: {what}: {one_line(e)}") from None


def at_most(where: str, what: str, values: Any, limit: int) -> list[Any]:
    """The first ``limit`` + 1 items of what a plug-in returned (a list, a generator, an endless
    iterator: never read past the one that shows it is too many), read through ``foreign``; a
    string (a sequence of characters, never a plug-in's list) or no iterable at all is refused."""
    if isinstance(values, (str, bytes, bytearray)) or values is None:
        raise PluginError(f"{where}: {what}: returned a {type(values).__name__}, not a list of values")
    return foreign(where, what, lambda: list(islice(iter(values), limit + 1)))


def shown(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width``, for a message about what a plug-in returned (its type's name
    if its own ``__repr__`` fails)."""
    try:
        text = repr(value)
    except KeyboardInterrupt:
        raise
    except BaseException:
        text = f"a {type(value).__name__}"
    return text if len(text) <= width else text[:width - 3] + "..."
