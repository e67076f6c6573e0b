"""What a plug-in entry is before it is loaded: one record for both routes in (installed entry
points, ``plugins.py``; a config folder's ``plugins.yaml``, ``plugin_files.py``), and the error a
plug-in raises. Imports nothing of cgbench but the error type, so both readers can share it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cgbench.errors import ConfigError

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
