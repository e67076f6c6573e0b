"""``cgbench sweep --resume DIR`` without the arguments that started the sweep: the plan is rebuilt
from the folder's index (``sweep.json`` records every point's overrides, the axes and where each came
from), each point composed again, so its fingerprint is today's config's (a point whose config changed
still runs again). With arguments, ``plan_sweep`` plans them and ``--resume`` checks they are the
folder's sweep (``folder.check_resume_target``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from cgbench.analysis.sweep.fingerprint import config_fingerprint
from cgbench.analysis.sweep.folder import INDEX_NAME, load_index
from cgbench.analysis.sweep.plan import SweepPlan, SweepPoint, point_file_name
from cgbench.config.kept_sweeps import KeptSweep
from cgbench.config.overrides import override_key, override_value
from cgbench.config.schema import ConfigError


def has_index(out_dir: Path) -> bool:
    return (Path(out_dir) / INDEX_NAME).is_file()


def plan_from_folder(out_dir: Path, on_progress: Callable[[int, int], None] | None = None) -> SweepPlan:
    """The sweep recorded in ``out_dir``'s index, its points composed again (ConfigError naming a point
    that no longer composes, e.g. a --config-dir option not given this time)."""
    index = load_index(out_dir)
    recorded = [tuple(str(o) for o in p["overrides"]) for p in index["points"]]
    axes = {str(k): [str(v) for v in vals] for k, vals in (index.get("axes") or {}).items()}
    varying = {k for k, v in axes.items() if len(v) > 1}
    kept = KeptSweep([json.dumps(p) for p in recorded], source="index")  # the same points resumed again: no Hydra
    points = []
    for i, ovr in enumerate(recorded):
        try:
            cfg = kept.point(list(ovr))
        except ConfigError as e:
            raise ConfigError(f"--resume {out_dir}: point {i + 1}/{len(recorded)} ({' '.join(ovr) or 'defaults'}): "
                              f"{e}") from None
        params = {k: override_value(o) for o in ovr if (k := override_key(o)) in varying}
        points.append(SweepPoint(i, ovr, point_file_name(ovr), params, cfg, config_fingerprint(cfg)))
        if on_progress is not None:
            on_progress(i + 1, len(recorded))
    if not points:
        raise ConfigError(f"--resume {out_dir}: its index lists no points")
    kept.keep()
    repeat, jobs = index.get("repeat"), index.get("jobs")
    return SweepPlan(name=str(index.get("name") or "sweep"), out_dir=Path(out_dir), points=points, axes=axes,
                     repeat=repeat if isinstance(repeat, int) and repeat >= 1 else 1,
                     jobs=jobs if isinstance(jobs, int) and jobs >= 1 else 1,
                     axis_sources={str(k): str(v) for k, v in (index.get("axis_sources") or {}).items()})
