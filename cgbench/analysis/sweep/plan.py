"""Planning a sweep: expand its axes into points and compose and validate every point before
anything runs.

Axes: ``cgbench sweep k=a,b ...`` sweeps exactly the axes given, over the base config. A named
sweep (``sweep=NAME``, or no axes at all: the default sweep) brings its ``params`` as axes, and a
command-line axis replaces that sweep's axis of the same key. The points are composed through one
``cgbench.config.compose.Composer``: Hydra composes once per distinct set of group selections. The same
command line planned again reads its settings, axes and points back (``cgbench.config.kept_sweeps``),
each point checked as a fresh composition is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cgbench.analysis.sweep.fingerprint import config_fingerprint
from cgbench.config.kept_sweeps import KeptSweep, SweepSettings
from cgbench.config.overrides import override_key, override_value
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.safeio import safe_name

if TYPE_CHECKING:
    from cgbench.analysis.sweep.lock import SweepLock

# Where an axis came from (shown by --dry-run, recorded in sweep.json).
FROM_CLI, FROM_REPEAT = "command line", "--repeat"


@dataclass(frozen=True)
class SweepPoint:
    index: int
    overrides: tuple[str, ...]
    file: str
    params: dict[str, str] = field(compare=False)  # the varying keys -> value, for tables and plots
    cfg: BenchConfig = field(compare=False, repr=False)
    fingerprint: str = field(default="", compare=False)  # of the resolved config (cgbench.analysis.sweep.fingerprint)


@dataclass
class SweepPlan:
    name: str
    out_dir: Path
    points: list[SweepPoint]
    axes: dict[str, list[str]]  # every key -> its values in sweep order (one value = fixed)
    repeat: int
    jobs: int = 1  # sweep.jobs: the default for --jobs
    sweep_args: list[str] = field(default_factory=list)  # Hydra sweep overrides whose product is `points`
    axis_sources: dict[str, str] = field(default_factory=dict)  # key -> where the axis came from
    default_out: bool = False  # out_dir was chosen here (a new folder), not given with --out
    claimed: bool = False  # claim_out_dir() has checked and created out_dir
    lock: SweepLock | None = field(default=None, repr=False)  # held from claim_out_dir() to release_out_dir()
    notes: list[str] = field(default_factory=list)  # one line each, for the user (stale index, reruns)
    # known before anything runs, one line each: gating off and why, points that run the same steps
    # (``gating``); printed and written into sweep.json
    warnings: list[str] = field(default_factory=list)

    @property
    def varying(self) -> list[str]:
        return [k for k, v in self.axes.items() if len(v) > 1]


def point_label(point: SweepPoint) -> str:
    return " ".join(point.overrides) or "defaults"


def _is_sweep_selector(key: str) -> bool:
    return key == "sweep" or key.startswith("sweep.")


def point_file_name(overrides: Iterable[str]) -> str:
    """Readable and short: ``model-hybrid_policy-budget_cg-dense__1a2b3c4d.json``.

    The hash covers the exact override strings, so two different points never share a file even
    when the readable part is truncated or sanitised to the same text."""
    ovr = list(overrides)
    parts = []
    for o in ovr:
        key = override_key(o).rsplit(".", 1)[-1].replace("/", "-")
        value = re.sub(r"[^A-Za-z0-9.+-]+", "-", override_value(o)).strip("-.")
        parts.append(f"{key}-{value}" if value else key)
    readable = re.sub(r"[^A-Za-z0-9._+-]+", "-", "_".join(parts))[:80].rstrip("._-") or "point"
    digest = hashlib.sha1("\n".join(ovr).encode()).hexdigest()[:8]
    return f"{readable}__{digest}.json"


def _sweep_settings(selectors: list[str]) -> SweepSettings:
    from omegaconf import OmegaConf

    from cgbench.config.compose import compose_dict, has_interpolation

    node = compose_dict(selectors, kept=True).sweep
    plain = OmegaConf.to_container(node, resolve=False)
    if has_interpolation(plain):  # resolved where it is read, as before; never kept
        return SweepSettings(str(node.name), node.repeat, node.jobs, node.params, keepable=False)
    return SweepSettings(str(plain["name"]), plain["repeat"], plain["jobs"], plain["params"])


def _expand(sweep_args: list[str]) -> list[list[str]]:
    from cgbench.config.compose import expand_sweep

    return expand_sweep(sweep_args)


def _axes_from(config_params: dict[str, Any] | None, cli: list[str],
               sweep_name: str) -> tuple[list[str], dict[str, str]]:
    """The sweep's axes and where each came from. Without a named sweep (``config_params`` None)
    the axes are exactly the command line's. With one, its axes come first (in their order); a
    command-line axis replaces the sweep's axis of the same key in place, others are appended."""
    axes: dict[str, str] = {}
    sources: dict[str, str] = {}
    params = {str(k): _axis_value(f"sweep.params.{k}", v) for k, v in (config_params or {}).items()}
    for o in (f"{k}={v}" for k, v in params.items()):  # sweep.params as override strings
        axes[override_key(o)] = o
        sources[override_key(o)] = f"sweep {sweep_name}"
    given: set[str] = set()
    for o in cli:
        key = override_key(o)
        if key in given:
            raise ConfigError(f"{key}: given more than once on the command line (one value or a comma list)")
        given.add(key)
        if key in axes:
            sources[key] = f"{FROM_CLI} (replaces sweep {sweep_name}'s {override_value(axes[key])})"
        else:
            sources[key] = FROM_CLI
        axes[key] = o
    return list(axes.values()), sources


_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./+-]+")


def _axis_value(key: str, value: Any) -> str:
    """A sweep file's axis as Hydra sweep text: ``a,b`` stays as written, and a YAML list
    (``model: [transformer, hybrid]``) is one value per element, not one list value."""
    if type(value).__module__.startswith("omegaconf"):  # a sweep file's node read where it is used
        from omegaconf import ListConfig

        value = list(value) if isinstance(value, ListConfig) else value
    if not isinstance(value, (list, tuple)):
        return str(value)
    if len(value) == 0:
        raise ConfigError(f"{key}: an empty list has no values to sweep")
    items = []
    for v in value:
        if isinstance(v, bool) or v is None:
            items.append(str(v).lower() if v is not None else "null")
        elif isinstance(v, (int, float, str)):
            text = str(v)
            items.append(text if _PLAIN_VALUE.fullmatch(text) else
                         "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'")
        else:
            raise ConfigError(f"{key}: list elements must be plain values (a nested list or mapping cannot be "
                              "one point's value)")
    return ",".join(items)


def _uses_sweep_file(selectors: list[str], cli: list[str]) -> bool:
    """A named sweep's axes apply when one is named (``sweep=NAME`` or ``sweep.params.*``) or when
    nothing else is given (the default sweep); ``sweep.name/repeat/jobs`` alone do not name one."""
    named = any(override_key(o) == "sweep" or override_key(o).startswith("sweep.params") for o in selectors)
    return named or not cli


def _derived_name(sweep_args: list[str]) -> str:
    """A folder name for a command-line sweep: its swept keys (``policy-cg``), else ``point``."""
    keys = [override_key(o).rsplit(".", 1)[-1] for o in sweep_args if "," in override_value(o)
            or override_value(o).startswith(("range(", "glob(", "choice("))]
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", "-".join(keys))[:60].strip("-.")
    return name or "point"


def _with_repeats(points: list[list[str]], repeat: int, base_seed: int) -> list[list[str]]:
    """Each point repeated with seeds base_seed, base_seed+1, ... as a trailing ``seed=`` override."""
    if repeat <= 1:
        return points
    out: list[list[str]] = []
    for p in points:
        rest = [o for o in p if override_key(o) != "seed"]
        out.extend(rest + [f"seed={base_seed + r}"] for r in range(repeat))
    return out


def plan_sweep(overrides: list[str] | None = None, *, repeat: int | None = None, out_dir: Path | None = None,
               on_progress: Callable[[int, int], None] | None = None,
               launch: Callable[[list[str]], list[str]] | None = None) -> SweepPlan:
    """Expand the sweep (the command line's axes, or a named sweep's axes with command-line axes
    replacing those of the same key) and compose and validate every point before anything runs.
    ``on_progress(done, total)`` is told after each composed point. ``launch``: a point's overrides ->
    the overrides it runs (``--megatron-args``: the launch line's translation first, the point's own
    winning); the point keeps its own for its file name and labels. Raises ConfigError naming the point."""
    from cgbench.config.override_checks import check_override_keys

    given = list(overrides or [])
    check_override_keys(given)  # hydra.* (the old launcher settings) is refused here, naming the new spelling
    selectors = [o for o in given if _is_sweep_selector(override_key(o))]
    cli = [o for o in given if o not in selectors]
    kept = KeptSweep(given)  # this command line's plan as an earlier run composed it: no Hydra then
    settings = kept.settings(selectors, _sweep_settings)
    from_file = _uses_sweep_file(selectors, cli)
    sweep_args, sources = _axes_from(dict(settings.params) if from_file else None, cli, str(settings.name))
    if from_file or any(override_key(o) == "sweep.name" for o in selectors):
        name = str(settings.name)
    else:
        name = _derived_name(sweep_args)
    safe_name(name, "sweep.name")
    reps = settings.repeat if repeat is None else repeat
    if reps < 1:
        raise ConfigError(f"--repeat: must be >= 1, got {reps}")

    expanded = kept.expansion(sweep_args, _expand)
    if reps > 1:
        seeds = {o for p in expanded for o in p if override_key(o) == "seed"}
        if len(seeds) > 1:
            raise ConfigError("seed: is swept and --repeat adds seeds too; use one or the other")
        base_seed = _compose_point(kept, _launched(launch, expanded[0], 0, len(expanded)), 0, len(expanded)).seed
        expanded = _with_repeats(expanded, reps, base_seed)
        sweep_args = [o for o in sweep_args if override_key(o) != "seed"]
        sweep_args.append("seed=" + ",".join(str(base_seed + r) for r in range(reps)))
        sources["seed"] = FROM_REPEAT

    axes: dict[str, list[str]] = {}
    for p in expanded:
        for o in p:
            values = axes.setdefault(override_key(o), [])
            if override_value(o) not in values:
                values.append(override_value(o))
    varying = [k for k, v in axes.items() if len(v) > 1]

    points, seen = [], set()
    for i, p in enumerate(expanded):
        key = tuple(p)
        if key in seen:
            raise ConfigError(f"point {i + 1}: {' '.join(p)} appears twice in the sweep")
        seen.add(key)
        ran = _launched(launch, p, i, len(expanded))
        cfg = _compose_point(kept, ran, i, len(expanded))
        params = {k: override_value(o) for o in p if (k := override_key(o)) in varying}
        points.append(SweepPoint(i, tuple(ran), point_file_name(p), params, cfg, config_fingerprint(cfg)))
        if on_progress is not None:
            on_progress(i + 1, len(expanded))
    kept.keep()

    from cgbench.analysis.sweep.gating import gating_warnings, identical_policy_refusal, point_gating

    status = point_gating(points)
    refusal = identical_policy_refusal(points, varying, status)
    if refusal is not None:
        raise ConfigError(refusal)
    if int(settings.jobs) < 1:  # the sweep file's default for --jobs: name the key that set it
        raise ConfigError(f"sweep.jobs: must be >= 1, got {settings.jobs}")
    if out_dir is not None:
        where = Path(out_dir)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        where = Path(points[0].cfg.out_dir) / "sweeps" / f"{stamp}_{name}"
    return SweepPlan(name=name, out_dir=where, points=points, axes=axes, repeat=reps,
                     jobs=int(settings.jobs), sweep_args=sweep_args,
                     axis_sources={k: sources.get(k, FROM_CLI) for k in axes}, default_out=out_dir is None,
                     warnings=gating_warnings(points, varying, status))


def _launched(launch: Callable[[list[str]], list[str]] | None, overrides: list[str], i: int, n: int) -> list[str]:
    if launch is None:
        return list(overrides)
    try:
        return launch(list(overrides))
    except ConfigError as e:
        raise ConfigError(f"point {i + 1}/{n} ({' '.join(overrides) or 'defaults'}): {e}") from None


def _check_listed_graphs(cfg: BenchConfig) -> None:
    """A grid given as a list (``cg=explicit``) or built by a plug-in is checked as ``run`` checks it,
    before anything runs (a generated built-in grid is valid by construction, and cheap to skip)."""
    from cgbench.grids.build import build_grid
    from cgbench.grids.registry import BUILDERS

    if cfg.cg.kind == "explicit" or cfg.cg.kind not in BUILDERS:
        build_grid(cfg.cg, cfg.engine, cfg.model)


def _compose_point(kept: KeptSweep, overrides: list[str], i: int, n: int) -> BenchConfig:
    try:
        cfg = kept.point(list(overrides))
        _check_listed_graphs(cfg)
        return cfg
    except ConfigError as e:
        raise ConfigError(f"point {i + 1}/{n} ({' '.join(overrides) or 'defaults'}): {e}") from None
