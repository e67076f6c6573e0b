"""A sweep's plan kept across processes: the same ``cgbench sweep`` command line run again (a re-run, a
``--resume``, the same grid of points under another ``--out``) reads back its settings, its expansion
and every point's composition instead of importing and running Hydra.

One entry per command line (or, for ``--resume DIR`` with no arguments, per list of points its index
records), keyed by ``compose_cache.tree_state`` (the config code, the installed
composers, the bytes of every YAML file on the search path) and the sweep's overrides. Each part is kept
beside the input it was computed from (the sweep selectors, the swept axes, each point's overrides) and
used only when that input is the same again, so a plan that now asks for something else composes that
part afresh. What is kept is a fresh composition's output, never an error: every check after the
composition runs again on each point read back (``cgbench.config.load.check_read_back``: the override
keys, the working directory, the paths, validation and limits, the unread keys, the model file). Not
kept: a point composed under a plug-in's schema or with a plug-in policy, a point or sweep file whose
tree holds an interpolation, and a plan of more than ``MAX_PLAN_BYTES``.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cgbench.config import compose_cache
from cgbench.config.schema import BenchConfig

if TYPE_CHECKING:
    from cgbench.config.compose import Composer

FORMAT = 1
MAX_PLAN_BYTES = 32 << 20  # ~8,000 points of the default model; a larger sweep composes afresh


@dataclass(frozen=True)
class SweepSettings:
    """The ``sweep`` node of the config: its name, ``repeat``, ``jobs`` and axes (``params``: plain
    values when ``keepable``; else the composed node, read only where the axes are used)."""

    name: str
    repeat: int
    jobs: int
    params: Any
    keepable: bool = True


class KeptSweep:
    """One ``plan_sweep``'s view of its kept plan: each part read back when its input matches, else
    computed by the caller's function and noted; ``keep()`` writes the plan once every point composed."""

    def __init__(self, overrides: Sequence[str], source: str = "command line") -> None:
        """``overrides``: the command line's (``source``), or each point's as a folder's index records
        them (``source="index"``: ``--resume DIR`` with no arguments)."""
        state = compose_cache.tree_state(())
        key = ["cgbench-sweep-plan", source, *overrides]
        self._key = None if state is None else compose_cache.key_in(state, key)
        self._old = self._read() if self._key is not None else {}
        self._new: dict[str, Any] = {"format": FORMAT, "points": {}}
        self._changed = False
        self._keepable = True
        self._keyed_models: dict[str, bool] = {}  # model -> its file is in the trees the key digests
        self._composer: Composer | None = None  # for the points not kept, made at the first of them

    def _read(self) -> dict[str, Any]:
        assert self._key is not None
        kept = compose_cache.read_sweep(self._key)
        if kept is None:
            return {}
        if not (isinstance(kept, dict) and kept.get("format") == FORMAT and isinstance(kept.get("points"), dict)):
            compose_cache.forget(self._key, "sweep")  # written by another version: composed afresh
            return {}
        return kept

    def settings(self, selectors: list[str], compose: Callable[[list[str]], SweepSettings]) -> SweepSettings:
        old = self._old.get("settings")
        if old is not None and old[0] == selectors:
            from cgbench.safeio import require_cwd

            require_cwd()  # what a composition would have met first
            name, repeat, jobs, params = old[1]
            settings = SweepSettings(name, repeat, jobs, params)
        else:
            settings = compose(selectors)
            self._changed = True
            if not settings.keepable:
                self._keepable = False
        self._new["settings"] = (list(selectors), (settings.name, settings.repeat, settings.jobs, settings.params))
        return settings

    def expansion(self, sweep_args: list[str], expand: Callable[[list[str]], list[list[str]]]) -> list[list[str]]:
        old = self._old.get("expansion")
        if old is not None and old[0] == sweep_args:
            points = old[1]
        else:
            points = expand(sweep_args)
            self._changed = True
        self._new["expansion"] = (list(sweep_args), points)
        return [list(p) for p in points]

    def point(self, overrides: list[str]) -> BenchConfig:
        """The point's config: read back and checked, or composed by the process's ``Composer`` (one
        for the whole plan: a point an earlier command of this process composed is reused)."""
        key = tuple(overrides)
        data = self._old.get("points", {}).get(key)
        if isinstance(data, bytes):
            try:
                typed = compose_cache.typed_config(data)
            except Exception:  # noqa: BLE001 - a foreign entry: composed afresh
                typed = None
            if typed is not None:
                from cgbench.config.load import check_read_back
                from cgbench.config.registry.plugin_files import plugin_folders

                with plugin_folders(()):
                    cfg = check_read_back(typed, overrides, (), self._keyed_models)
                self._new["points"][key] = data
                return cfg
        if self._composer is None:
            from cgbench.config.compose import shared_composer

            self._composer = shared_composer()
        cfg, data = self._composer.load_recorded(overrides)
        self._changed = True
        if data is not None:
            self._new["points"][key] = data
        return cfg

    def keep(self) -> None:
        """Write the plan when a part of it was computed here (not when all of it was read back)."""
        if self._key is None or not self._changed or not self._keepable:
            return
        data = pickle.dumps(self._new)
        if len(data) <= MAX_PLAN_BYTES:
            compose_cache.write(self._key, data, kind="sweep")
