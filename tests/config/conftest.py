"""What the tests of the kept compositions share: a cache folder of their own, and a spy that records
whether each read found its entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cgbench.config import compose_cache
from cgbench.user_cache import ENV_CACHE_DIR


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The kept compositions' folder, under this test's own cache root."""
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    return tmp_path / "cache" / "compose"


@pytest.fixture
def found_by(monkeypatch) -> Callable[[str], list[bool]]:
    """``found_by("read")``: a list that ``compose_cache.read`` (or the reader named) appends to, True
    where a read found its entry."""

    def spy_on(name: str) -> list[bool]:
        found: list[bool] = []
        real = getattr(compose_cache, name)

        def spy(key):
            kept = real(key)
            found.append(kept is not None)
            return kept

        monkeypatch.setattr(compose_cache, name, spy)
        return found

    return spy_on
