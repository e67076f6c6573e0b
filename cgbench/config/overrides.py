"""Reading Hydra override strings (``+model=x``, ``~cg.graphs``, ``model=a,b``) without Hydra."""

from __future__ import annotations


def override_key(override: str) -> str:
    """``+model=x`` / ``~cg.graphs`` / ``model=a,b`` -> ``model`` / ``cg.graphs`` / ``model``."""
    return override.partition("=")[0].lstrip("+~").strip()


def override_value(override: str) -> str:
    """The text after the first ``=`` (empty when there is none)."""
    return override.partition("=")[2]


def split_override(override: str) -> tuple[str, str]:
    return override_key(override), override_value(override)


def overrides_by_key(overrides: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``{key: value}`` for a list of overrides (a later one wins)."""
    return dict(split_override(o) for o in overrides)


def _unquoted_non_ascii(value: str) -> bool:
    """Whether ``value`` holds a non-ASCII character and is not one quoted string (Hydra's lexer
    reads non-ASCII characters only inside quotes)."""
    v = value.strip()
    quoted = len(v) >= 2 and v[0] in "'\"" and v[-1] == v[0]
    return not quoted and any(ord(c) > 127 for c in v)


def quoting_advice(overrides: list[str] | tuple[str, ...]) -> str | None:
    """For the first override whose value Hydra's override grammar cannot lex (a non-ASCII character
    outside quotes: a path named in another script), one line saying how to quote it."""
    for o in overrides:
        key, value = split_override(o)
        if _unquoted_non_ascii(value):
            quoted = f"'{value}'" if "'" not in value else f'"{value}"' if '"' not in value else \
                "'" + value.replace("'", "\\'") + "'"
            return (f"{key}: Hydra's override grammar reads non-ASCII characters only inside quotes: "
                    f"quote it: {o.partition('=')[0]}={quoted}")
    return None
