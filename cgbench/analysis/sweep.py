"""Sweeps: plan (expand + validate every point), run (in-process or in worker processes), index.

A sweep directory holds one result JSON per point plus ``sweep.json``, the index of the points
(overrides, file name, status, headline metrics), and ``summary.csv``. One directory holds one
sweep: the default is a new directory per sweep (``<out_dir>/sweeps/<time>_<name>``), and a named
directory that already holds a sweep is only reused by ``--resume`` of that same sweep. Every file
is written atomically, so a killed sweep leaves only complete files and ``--resume`` finishes it.

Axes: ``cgbench sweep k=a,b ...`` sweeps exactly the axes given, over the base config. A named
sweep (``sweep=NAME``, or no axes at all: the default sweep) brings its ``params`` as axes, and a
command-line axis replaces that sweep's axis of the same key.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cgbench.analysis.fingerprint import config_fingerprint, fingerprint_of
from cgbench.analysis.sweep_lock import SweepLock, is_locked
from cgbench.config.overrides import override_key, override_value
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.results.names import lookup
from cgbench.safeio import inside, make_folders, remove_folders, safe_name

INDEX_NAME = "sweep.json"
INDEX_KIND = "cgbench-sweep"

# Metrics copied into sweep.json for each point (dotted = nested key); absent ones are skipped.
HEADLINE = ("outcome", "steps", "eager_steps", "eager_step_fraction", "deferral_events", "deferred_requests",
            "max_cg_wait_iters", "max_queue_wait_iters", "snap_splits", "starvation_warnings", "ttft_ms.p50",
            "ttft_ms.p99", "tpot_ms.p50", "output_throughput_tok_s", "makespan_s")

DONE, FAILED, PENDING = "done", "failed", "pending"
SUMMARY_CSV = "summary.csv"
# Where an axis came from (shown by --dry-run, recorded in sweep.json).
FROM_CLI, FROM_REPEAT = "command line", "--repeat"


@dataclass(frozen=True)
class SweepPoint:
    index: int
    overrides: tuple[str, ...]
    file: str
    params: dict[str, str] = field(compare=False)  # the varying keys -> value, for tables and plots
    cfg: BenchConfig = field(compare=False, repr=False)
    fingerprint: str = field(default="", compare=False)  # of the resolved config (cgbench.analysis.fingerprint)


@dataclass
class SweepPlan:
    name: str
    out_dir: Path
    points: list[SweepPoint]
    axes: dict[str, list[str]]  # every key -> its values in sweep order (one value = fixed)
    repeat: int
    jobs: int = 1  # sweep.jobs: the default for --jobs
    hydra_overrides: list[str] = field(default_factory=list)  # hydra.* / hydra/*: only for a launcher
    sweep_args: list[str] = field(default_factory=list)  # Hydra sweep overrides whose product is `points`
    axis_sources: dict[str, str] = field(default_factory=dict)  # key -> where the axis came from
    default_out: bool = False  # out_dir was chosen here (a new folder), not given with --out
    claimed: bool = False  # claim_out_dir() has checked and created out_dir
    lock: SweepLock | None = field(default=None, repr=False)  # held from claim_out_dir() to release_out_dir()
    notes: list[str] = field(default_factory=list)  # one line each, for the user (stale index, reruns)

    @property
    def varying(self) -> list[str]:
        return [k for k, v in self.axes.items() if len(v) > 1]


@dataclass
class PointResult:
    point: SweepPoint
    status: str  # done | failed | pending
    metrics: dict[str, Any] = field(default_factory=dict)  # headline metrics
    wall_s: float = 0.0
    error: str | None = None
    reused: bool = False  # --resume found a complete file
    fingerprint: str | None = None  # the config fingerprint its result was computed from (done points)


@dataclass
class SweepOutcome:
    plan: SweepPlan
    results: list[PointResult]
    interrupted: bool = False
    index_path: Path | None = None
    signal_name: str = "SIGINT"  # what interrupted it (SIGINT: exit 130, SIGTERM: exit 143)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)


# ---------------------------------------------------------------------------------------------- plan


def _is_sweep_selector(key: str) -> bool:
    return key == "sweep" or key.startswith("sweep.")


def _is_hydra(key: str) -> bool:
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


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


def _sweep_settings(selectors: list[str]):
    from cgbench.config.compose import compose_dict

    return compose_dict(selectors).sweep


def _axes_from(config_params: dict[str, Any] | None, cli: list[str],
               sweep_name: str) -> tuple[list[str], dict[str, str]]:
    """The sweep's axes and where each came from. Without a named sweep (``config_params`` None)
    the axes are exactly the command line's. With one, its axes come first (in their order); a
    command-line axis replaces the sweep's axis of the same key in place, others are appended."""
    from cgbench.config.compose import sweep_overrides_from_config

    axes: dict[str, str] = {}
    sources: dict[str, str] = {}
    params = {str(k): _axis_value(f"sweep.params.{k}", v) for k, v in (config_params or {}).items()}
    for o in sweep_overrides_from_config(params):
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
    from omegaconf import ListConfig

    if not isinstance(value, (list, tuple, ListConfig)):
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
    out = []
    for p in points:
        rest = [o for o in p if override_key(o) != "seed"]
        out.extend(rest + [f"seed={base_seed + r}"] for r in range(repeat))
    return out


def plan_sweep(overrides: list[str] | None = None, *, repeat: int | None = None, out_dir: Path | None = None,
               allow_hydra: bool = False, on_progress: Callable[[int, int], None] | None = None) -> SweepPlan:
    """Expand the sweep (the command line's axes, or a named sweep's axes with command-line axes
    replacing those of the same key) and compose and validate every point before anything runs.
    ``on_progress(done, total)`` is told after each composed point. Raises ConfigError naming the point."""
    from cgbench.config.compose import expand_sweep, load_config

    given = list(overrides or [])
    selectors = [o for o in given if _is_sweep_selector(override_key(o))]
    hydra = [o for o in given if _is_hydra(override_key(o))]
    cli = [o for o in given if o not in selectors and o not in hydra]
    if hydra and not allow_hydra:
        raise ConfigError(f"{override_key(hydra[0])}: hydra.* overrides only apply with --launcher")
    settings = _sweep_settings(selectors)
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

    expanded = expand_sweep(sweep_args)
    if reps > 1:
        seeds = {o for p in expanded for o in p if override_key(o) == "seed"}
        if len(seeds) > 1:
            raise ConfigError("seed: is swept and --repeat adds seeds too; use one or the other")
        base_seed = _compose_point(load_config, expanded[0], 0, len(expanded)).seed
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
        cfg = _compose_point(load_config, p, i, len(expanded))
        params = {k: override_value(o) for o in p if (k := override_key(o)) in varying}
        points.append(SweepPoint(i, key, point_file_name(p), params, cfg, config_fingerprint(cfg)))
        if on_progress is not None:
            on_progress(i + 1, len(expanded))

    if int(settings.jobs) < 1:  # the sweep file's default for --jobs: name the key that set it
        raise ConfigError(f"sweep.jobs: must be >= 1, got {settings.jobs}")
    if out_dir is not None:
        where = Path(out_dir)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        where = Path(points[0].cfg.out_dir) / "sweeps" / f"{stamp}_{name}"
    return SweepPlan(name=name, out_dir=where, points=points, axes=axes, repeat=reps,
                     jobs=int(settings.jobs), hydra_overrides=hydra, sweep_args=sweep_args,
                     axis_sources={k: sources.get(k, FROM_CLI) for k in axes}, default_out=out_dir is None)


def _compose_point(load: Callable[[list[str]], BenchConfig], overrides: list[str], i: int, n: int) -> BenchConfig:
    try:
        return load(list(overrides))
    except ConfigError as e:
        raise ConfigError(f"point {i + 1}/{n} ({' '.join(overrides) or 'defaults'}): {e}") from None


# ---------------------------------------------------------------------------------------------- results


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in HEADLINE:
        value = lookup(metrics, name)
        if value is not None:
            out[name] = value
    return out


def complete_result(path: Path, overrides: tuple[str, ...]) -> dict[str, Any] | None:
    """The result document at ``path`` if it is a readable result of exactly these overrides."""
    from cgbench.results.document import load_result

    try:
        doc = load_result(path)
    except ConfigError:
        return None
    return doc if tuple(doc.get("overrides") or ()) == tuple(overrides) else None


def execute_point(cfg: BenchConfig, overrides: tuple[str, ...], path: Path) -> tuple[dict[str, Any], float]:
    """Run one point, write its JSON atomically; (headline metrics, wall seconds)."""
    from cgbench.pipeline import run_point
    from cgbench.results.document import write_json_atomic

    t0 = time.perf_counter()
    doc = run_point(cfg, list(overrides))
    write_json_atomic(path, doc)
    return headline(doc["metrics"]), time.perf_counter() - t0


def _describe(e: BaseException) -> str:
    return str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"


def index_document(plan: SweepPlan, results: list[PointResult], *, status: str, created_at: str,
                   jobs: int, launcher: str | None) -> dict[str, Any]:
    from cgbench.results.document import provenance

    doc = provenance()
    doc.update({
        "kind": INDEX_KIND, "name": plan.name, "created_at": created_at,
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"), "status": status,
        "axes": plan.axes, "axis_sources": plan.axis_sources, "repeat": plan.repeat, "jobs": jobs, "launcher": launcher,
        "pid": os.getpid(), "host": socket.gethostname(),
        "counts": {s: sum(r.status == s for r in results) for s in (DONE, FAILED, PENDING)},
        "points": [{
            "index": r.point.index, "overrides": list(r.point.overrides), "params": r.point.params,
            "file": r.point.file, "status": r.status, "reused": r.reused, "wall_s": round(r.wall_s, 3),
            "error": r.error, "metrics": r.metrics, "fingerprint": r.fingerprint if r.status == DONE else None,
        } for r in results],
    })
    return doc


def load_index(sweep_dir: Path) -> dict[str, Any]:
    """Read ``sweep.json`` of a sweep directory (ConfigError if missing or malformed).

    Every point's ``file`` must name a file inside the folder. An index that says ``running`` while
    no process holds the folder's lock (or, without a lock file, whose PID on this host is gone)
    belongs to a killed sweep: it is returned with status ``interrupted`` and a ``stale`` line."""
    from cgbench.safeio import read_json

    path = Path(sweep_dir) / INDEX_NAME
    if not path.is_file():
        raise ConfigError(f"{sweep_dir}: not a sweep directory (no {INDEX_NAME})")
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("kind") != INDEX_KIND or not isinstance(doc.get("points"), list):
        raise ConfigError(f"{path}: not a cgbench sweep index")
    from cgbench.results.document import SCHEMA_VERSION

    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    for i, p in enumerate(doc["points"]):
        if not isinstance(p, dict) or not isinstance(p.get("file"), str) or not isinstance(p.get("overrides"), list):
            raise ConfigError(f"{path}: points[{i}] needs 'file' and 'overrides'")
        inside(sweep_dir, p["file"], f"{path}: points[{i}].file")
    if doc.get("status") == "running" and not running_sweep_alive(Path(sweep_dir), doc):
        doc["status"] = "interrupted"
        doc["stale"] = stale_line(path, doc, "`cgbench sweep --resume --out` with the same arguments finishes it")
    return doc


def stale_line(path: Path, doc: dict[str, Any], then: str) -> str:
    """The one line that reports a ``running`` index left by a killed sweep."""
    pid = doc.get("pid")
    who = f"PID {pid}" if isinstance(pid, int) and not isinstance(pid, bool) else "its process"
    return f"{path}: said 'running', but the sweep that wrote it ({who}) is gone: it was killed (interrupted); {then}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def running_sweep_alive(sweep_dir: Path, doc: dict[str, Any]) -> bool:
    """Whether the sweep that wrote a ``running`` index is still running: its lock is held, or (no lock
    file: an older sweep) its PID lives on this host. Unknown (another host, no PID) counts as alive."""
    locked = is_locked(sweep_dir)
    if locked is not None:
        return locked
    pid = doc.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or doc.get("host") != socket.gethostname():
        return True
    return _pid_alive(pid)


# ---------------------------------------------------------------------------------------------- folder


def _holds_results(d: Path) -> bool:
    return d.is_dir() and (any(d.glob("*.json")) or (d / INDEX_NAME).exists())


def check_resume_target(plan: SweepPlan) -> None:
    """``--resume`` into a folder that holds another sweep would mix two sweeps in one index: refused."""
    index_path = plan.out_dir / INDEX_NAME
    if not index_path.is_file():
        return
    try:
        index = load_index(plan.out_dir)
    except ConfigError:
        return  # a half-written folder of a killed sweep: the points' own files decide what is kept
    if index.get("stale") or index.get("status") == "running":
        # we hold the folder's lock now, so a "running" index has no live writer: it was killed
        plan.notes.append(stale_line(plan.out_dir / INDEX_NAME, index, "resuming it"))
    theirs = {tuple(p["overrides"]) for p in index["points"]}
    ours = {p.overrides for p in plan.points}
    if theirs != ours:
        common = len(theirs & ours)
        raise ConfigError(f"--resume: {plan.out_dir} holds another sweep ({len(theirs)} points, {common} in "
                          f"common with this one's {len(ours)}); resume with the arguments that started it, "
                          "or sweep into a new folder")


def claim_out_dir(plan: SweepPlan, *, resume: bool = False) -> Path:
    """Create the sweep's folder, never sharing one with another sweep.

    A default folder (``<out_dir>/sweeps/<time>_<name>``) that exists already (two sweeps started in
    the same second) gets a ``-2``, ``-3``... suffix. A folder given with ``--out`` that already
    holds results is refused unless ``resume`` (and then only for the same sweep).

    The folder's lock (``sweep.lock``) is taken before anything is checked or written and held until
    ``release_out_dir``: a second sweep into the same folder is refused naming the holder's PID."""
    if plan.claimed:
        return plan.out_dir
    if plan.default_out and not resume:
        base, n = plan.out_dir, 1
        while True:
            try:
                plan.out_dir.mkdir(parents=True, exist_ok=False)
                plan.lock = SweepLock(plan.out_dir).acquire()
                break
            except FileExistsError:
                n += 1
                plan.out_dir = base.with_name(f"{base.name}-{n}")
            except OSError as e:
                raise ConfigError(f"cannot create {plan.out_dir}: {e.strerror or e}") from e
    else:
        existed = plan.out_dir.is_dir()
        if not resume and _holds_results(plan.out_dir) and is_locked(plan.out_dir) is not True:
            _refuse_used_folder(plan)
        created = _make_folder(plan.out_dir)
        try:
            lock = SweepLock(plan.out_dir).acquire()
        except ConfigError:
            remove_folders(created)
            raise
        try:
            if resume:
                check_resume_target(plan)
            elif _holds_results(plan.out_dir):
                _refuse_used_folder(plan)
        except ConfigError:
            lock.discard()
            if not existed:
                remove_folders(created)
            raise
        plan.lock = lock
    plan.claimed = True
    return plan.out_dir


def _refuse_used_folder(plan: SweepPlan) -> None:
    raise ConfigError(f"--out {plan.out_dir}: already holds a sweep or results; pass --resume to finish "
                      "that sweep, or choose a new folder (without --out each sweep gets its own)")


def _make_folder(d: Path) -> list[Path]:
    """Create ``d`` and its missing parents; returns what was created (deepest first)."""
    try:
        return make_folders(d)
    except OSError as e:
        raise ConfigError(f"--out {d}: {e.strerror or e}") from e


def release_out_dir(plan: SweepPlan) -> None:
    """Drop the folder's lock (the sweep has written its index)."""
    if plan.lock is not None:
        plan.lock.release()
        plan.lock = None


# ---------------------------------------------------------------------------------------------- summary


def summary_columns(plan: SweepPlan) -> list[str]:
    """The summary's columns: the varying axes (or ``overrides``), status, file, headline metrics."""
    return [*(plan.varying or ["overrides"]), "status", "file", *HEADLINE]


def summary_records(plan: SweepPlan, results: list[PointResult]) -> list[dict[str, Any]]:
    """One record per point in sweep order: the summary's columns with raw values (fractions 0..1)."""
    keys = plan.varying
    out = []
    for r in results:
        rec: dict[str, Any] = {k: r.point.params.get(k, "") for k in keys} if keys else \
            {"overrides": " ".join(r.point.overrides)}
        rec["status"] = "kept" if r.reused else r.status
        rec["file"] = r.point.file
        for name in HEADLINE:
            rec[name] = r.metrics.get(name)
        out.append(rec)
    return out


def summary_csv(plan: SweepPlan, results: list[PointResult]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=summary_columns(plan), lineterminator="\n")
    w.writeheader()
    for rec in summary_records(plan, results):
        w.writerow({k: "" if v is None else v for k, v in rec.items()})
    return buf.getvalue()


def write_summary_csv(outcome: SweepOutcome) -> Path:
    """``summary.csv`` next to ``sweep.json``: every point's axes, status and headline metrics."""
    from cgbench.safeio import write_text_atomic

    return write_text_atomic(outcome.plan.out_dir / SUMMARY_CSV, summary_csv(outcome.plan, outcome.results))


# ---------------------------------------------------------------------------------------------- run


class _Index:
    """Keeps sweep.json current: rewritten (atomically) after every finished point."""

    def __init__(self, plan: SweepPlan, results: list[PointResult], jobs: int, launcher: str | None) -> None:
        self.plan, self.results, self.jobs, self.launcher = plan, results, jobs, launcher
        self.created_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.path = plan.out_dir / INDEX_NAME

    def write(self, status: str) -> Path:
        from cgbench.results.document import write_json_atomic

        doc = index_document(self.plan, self.results, status=status, created_at=self.created_at,
                             jobs=self.jobs, launcher=self.launcher)
        return write_json_atomic(self.path, doc)


def final_status(results: list[PointResult], interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    if any(r.status == FAILED for r in results):
        return "failed"
    return "complete" if all(r.status == DONE for r in results) else "incomplete"


def recorded_fingerprints(out_dir: Path) -> dict[tuple[str, ...], str]:
    """What an earlier run of the sweep in ``out_dir`` recorded: overrides -> the fingerprint of the
    config its done point was computed from (empty when there is no readable index)."""
    try:
        index = load_index(out_dir)
    except ConfigError:
        return {}
    return {tuple(str(o) for o in p["overrides"]): p["fingerprint"] for p in index["points"]
            if p.get("status") == DONE and isinstance(p.get("fingerprint"), str)}


def reusable_result(path: Path, overrides: tuple[str, ...], fingerprint: str,
                    recorded: dict[tuple[str, ...], str]) -> tuple[dict[str, Any] | None, str | None]:
    """``--resume``: the result at ``path`` if it is complete and was computed from the same resolved
    config (the index's recorded fingerprint, else the one of the result's own ``config``); else
    (None, why it runs again), or (None, None) when there is no usable file."""
    doc = complete_result(path, overrides)
    if doc is None:
        return None, None
    old = recorded.get(tuple(overrides))
    if old is None and isinstance(doc.get("config"), dict):
        old = fingerprint_of(doc["config"])
    if old == fingerprint:
        return doc, None
    was = old[:12] if old else "none recorded"
    return None, f"its config changed since it ran (fingerprint {was} -> {fingerprint[:12]}): running it again"


def resume_decisions(plan: SweepPlan) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Point index -> its reusable result, and point index -> why its existing result is not reused."""
    recorded = recorded_fingerprints(plan.out_dir)
    kept: dict[int, dict[str, Any]] = {}
    rerun: dict[int, str] = {}
    for i, p in enumerate(plan.points):
        doc, why = reusable_result(plan.out_dir / p.file, p.overrides, p.fingerprint, recorded)
        if doc is not None:
            kept[i] = doc
        elif why is not None:
            rerun[i] = why
    return kept, rerun


def point_label(point: SweepPoint) -> str:
    return " ".join(point.overrides) or "defaults"


class SweepTerminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (the index says ``interrupted``); the command exits 143."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``SweepTerminated`` (a KeyboardInterrupt) in the main thread, so a terminated
    sweep is handled like Ctrl-C."""
    if not _main_thread():
        yield
        return

    def stop(signum, frame):
        raise SweepTerminated()

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done, then interrupt as usual."""
    if not _main_thread():
        yield
        return
    caught: list[int] = []
    saved = [(s, signal.signal(s, lambda signum, frame: caught.append(signum)))
             for s in (signal.SIGINT, signal.SIGTERM)]
    try:
        yield
    finally:
        for s, old in saved:
            signal.signal(s, old)
    if caught:
        raise SweepTerminated() if caught[0] == signal.SIGTERM else KeyboardInterrupt()


def run_sweep(plan: SweepPlan, *, jobs: int = 1, resume: bool = False,
              on_start: Callable[[int], None] | None = None,
              on_done: Callable[[PointResult], None] | None = None,
              on_note: Callable[[str], None] | None = None) -> SweepOutcome:
    """Run every point not already complete (with ``resume``: a result whose config fingerprint
    changed runs again, and ``on_note`` is told so in one line); ``jobs > 1`` uses worker processes.
    ``on_start(n)`` is told how many points will run, ``on_done`` gets each finished point.

    Ctrl-C or SIGTERM stops the sweep: finished points keep their files, sweep.json records which
    finished, and the outcome says ``interrupted`` (KeyboardInterrupt is not re-raised). The folder's
    lock is held until sweep.json and summary.csv are written."""
    if jobs < 1:
        raise ConfigError(f"--jobs: must be >= 1, got {jobs}")
    claim_out_dir(plan, resume=resume)
    try:
        with sigterm_interrupts():
            return _run_claimed(plan, jobs, resume, on_start, on_done, on_note)
    finally:
        release_out_dir(plan)


def _run_claimed(plan: SweepPlan, jobs: int, resume: bool, on_start: Callable[[int], None] | None,
                 on_done: Callable[[PointResult], None] | None,
                 on_note: Callable[[str], None] | None) -> SweepOutcome:
    results = [PointResult(p, PENDING) for p in plan.points]
    index = _Index(plan, results, jobs, None)
    notes = list(plan.notes)
    kept, rerun = resume_decisions(plan) if resume else ({}, {})
    todo: list[int] = []
    for i, p in enumerate(plan.points):
        if i in kept:
            results[i] = PointResult(p, DONE, headline(kept[i]["metrics"]), reused=True, fingerprint=p.fingerprint)
        else:
            todo.append(i)
            if i in rerun:
                notes.append(f"point {i + 1}/{len(plan.points)} ({point_label(p)}): {rerun[i]}")
    for note in notes:
        if on_note is not None:
            on_note(note)
    interrupted, signal_name = False, "SIGINT"
    try:
        index.write("running")
        if on_start is not None:
            on_start(len(todo))

        def finish(i: int, r: PointResult) -> None:
            results[i] = r
            index.write("running")
            if on_done is not None:
                on_done(r)

        if jobs == 1 or len(todo) <= 1:
            _run_serial(plan, todo, finish)
        else:
            _run_parallel(plan, todo, min(jobs, len(todo)), finish)
    except KeyboardInterrupt as e:
        interrupted = True
        signal_name = "SIGTERM" if isinstance(e, SweepTerminated) else "SIGINT"
    # a second signal while the final index is written must not leave it saying "running"
    saved = [(s, signal.signal(s, signal.SIG_IGN)) for s in (signal.SIGINT, signal.SIGTERM)] if _main_thread() else []
    try:
        path = index.write(final_status(results, interrupted))
        outcome = SweepOutcome(plan, results, interrupted, path, signal_name)
        write_summary_csv(outcome)
    finally:
        for s, old in saved:
            signal.signal(s, old)
    return outcome


def _run_serial(plan: SweepPlan, todo: list[int], finish: Callable[[int, PointResult], None]) -> None:
    from cgbench.analysis.workers import InterruptWatch

    with InterruptWatch() as ctrl_c:
        for i in todo:
            p = plan.points[i]
            t0 = time.perf_counter()
            try:
                metrics, wall = execute_point(p.cfg, p.overrides, plan.out_dir / p.file)
            except Exception as e:  # one broken point must not lose the rest of the sweep
                if ctrl_c.hit:  # Ctrl-C inside a library that turned it into another error
                    raise KeyboardInterrupt from None
                finish(i, PointResult(p, FAILED, wall_s=time.perf_counter() - t0, error=_describe(e)))
            else:
                finish(i, PointResult(p, DONE, metrics, wall, fingerprint=p.fingerprint))


def _run_parallel(plan: SweepPlan, todo: list[int], jobs: int,
                  finish: Callable[[int, PointResult], None]) -> None:
    # spawn, not fork: the parent may run Rich's refresh thread, and fork with threads is unsafe.
    ctx = multiprocessing.get_context("spawn")
    from cgbench.analysis.workers import worker_init

    pool: ProcessPoolExecutor | None = None
    running: dict[Future, int] = {}
    try:
        with _signals_deferred():  # a worker stopped while it is spawned would print the parent's broken pipe
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=worker_init,
                                       initargs=(os.getpid(),))
            for i in todo:
                p = plan.points[i]
                running[pool.submit(execute_point, p.cfg, p.overrides, plan.out_dir / p.file)] = i
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = running.pop(fut)
                p = plan.points[i]
                try:
                    metrics, wall = fut.result()
                except Exception as e:
                    finish(i, PointResult(p, FAILED, error=_describe(e)))
                else:
                    finish(i, PointResult(p, DONE, metrics, wall, fingerprint=p.fingerprint))
    except BaseException:
        # Interrupted: drop queued points and stop the busy workers now rather than after their point
        # (their partial work is lost; the atomic writes leave no partial files).
        if pool is not None:
            busy = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in busy:
                proc.terminate()
        raise
    if pool is not None:
        pool.shutdown(wait=True)
