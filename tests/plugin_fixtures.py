"""The example plug-in of ``examples/plugins/defer_then_guard``, made visible in process: its
entry points stand in for installed metadata (the installed wheel is tested in
``tests/cli/test_plugin_wheel.py``)."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from cgbench.config.registry import plugins
from cgbench.config.registry.policies import PolicySpec

# two plug-ins whose build goes wrong: it raises, or it returns no policy at all
RAISING = PolicySpec("raising", build=lambda options: 1 // 0)
NOT_A_POLICY = PolicySpec("not_a_policy", build=lambda options: object())

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugins" / "defer_then_guard"
ENTRY_POINTS = {
    "policies": {"defer_then_guard": "cgbench_defer_then_guard:POLICY", "broken": "cgbench_no_such_module:POLICY",
                 "not_a_spec": "cgbench_defer_then_guard:DeferThenGuardOptions",
                 "raising": "tests.plugin_fixtures:RAISING", "not_a_policy": "tests.plugin_fixtures:NOT_A_POLICY"},
    "grids": {"pow2_decode": "cgbench_defer_then_guard:GRID"},
    "workloads": {"ramp": "cgbench_defer_then_guard:ARRIVAL"},
}


@pytest.fixture
def example_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example plug-in (and two broken ones) as if installed."""
    monkeypatch.syspath_prepend(str(EXAMPLE))

    def points(family: str) -> dict[str, EntryPoint]:
        group = plugins.ENTRY_POINT_GROUPS[family]
        return {n: EntryPoint(n, v, group) for n, v in ENTRY_POINTS[family].items()}

    monkeypatch.setattr(plugins, "_entry_points", points)
    plugins.clear_caches()
    yield
    plugins.clear_caches()


@pytest.fixture
def hostile_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The misbehaving plug-ins of ``tests.hostile_plugins`` as if installed."""
    from tests.hostile_plugins import HOSTILE

    def points(family: str) -> dict[str, EntryPoint]:
        group = plugins.ENTRY_POINT_GROUPS[family]
        return {n: EntryPoint(n, v, group) for n, v in HOSTILE[family].items()}

    monkeypatch.setattr(plugins, "_entry_points", points)
    plugins.clear_caches()
    yield
    plugins.clear_caches()
