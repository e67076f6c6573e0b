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
