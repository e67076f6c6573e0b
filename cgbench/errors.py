"""``ConfigError``: a configuration value is invalid. On the ground floor, importing nothing: the registries
under ``cgbench.config.registry`` raise it without importing the schema they feed, and ``cgbench.safeio``
(a reader of user files, which the config package uses) raises it without importing the config package."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key.

    The message is always one line: control characters and line separators that came in with user
    text (a key or file name holding a newline) are shown escaped (``\\n``)."""

    def __str__(self) -> str:
        return super().__str__().translate(_ESCAPES)


# every character str.splitlines() breaks on, and the other C0 controls, shown as escapes
_ESCAPES = {c: repr(chr(c))[1:-1] for c in [*range(0x20), 0x7F, 0x85, 0x2028, 0x2029]}


def did_you_mean(value: str, choices: list[str] | tuple[str, ...]) -> str:
    """``; did you mean X?`` for the closest choice, or nothing."""
    import difflib

    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
