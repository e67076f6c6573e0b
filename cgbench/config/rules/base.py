"""The two forms every rule takes: a condition on a key, and a value among choices."""

from __future__ import annotations

from typing import Any

from cgbench.errors import ConfigError


def require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


def check_choice(value: Any, choices: tuple[str, ...], key: str) -> None:
    require(value in choices, key, f"{value!r} is not one of {', '.join(choices)}")
