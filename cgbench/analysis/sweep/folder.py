"""A sweep's folder: its lock, its index (``sweep.json``), ``summary.csv`` and what ``--resume`` keeps.

One folder holds one sweep: the default is a new folder per sweep (``<out_dir>/sweeps/<time>_<name>``),
and a named folder that already holds a sweep is only reused by ``--resume`` of that same sweep.
Every file is written atomically, so a killed sweep leaves only complete files. ``--resume`` finds
each point's file by its overrides (never through the index) and keeps it when its config
fingerprint is unchanged, so the index may lag behind the point files without losing anything:
``IndexWriter`` rewrites it at bounded intervals while points finish, and once at the end.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cgbench.analysis.sweep.fingerprint import fingerprint_of
from cgbench.analysis.sweep.lock import SweepLock, host_name, is_locked
from cgbench.analysis.sweep.plan import SweepPlan, SweepPoint
from cgbench.config.schema import ConfigError
from cgbench.results.health import flag_codes
from cgbench.results.names import lookup
from cgbench.safeio import inside, make_folders, remove_folders

INDEX_NAME = "sweep.json"
INDEX_KIND = "cgbench-sweep"
SUMMARY_CSV = "summary.csv"

# Metrics copied into sweep.json for each point (dotted = nested key); absent ones are skipped.
HEADLINE = ("outcome", "steps", "eager_steps", "eager_step_fraction", "deferral_events", "deferred_requests",
            "max_cg_wait_iters", "max_queue_wait_iters", "snap_splits", "starvation_warnings", "ttft_ms.p50",
            "ttft_ms.p99", "tpot_ms.p50", "output_throughput_tok_s", "makespan_s")

DONE, FAILED, PENDING = "done", "failed", "pending"


@dataclass
class PointResult:
    point: SweepPoint
    status: str  # done | failed | pending
    metrics: dict[str, Any] = field(default_factory=dict)  # headline metrics
    wall_s: float = 0.0
    error: str | None = None
    reused: bool = False  # --resume found a complete file
    fingerprint: str | None = None  # the config fingerprint its result was computed from (done points)
    health: list[str] | None = None  # the codes of its result's warnings, in order (done points)
    columns: dict[str, Any] = field(default_factory=dict)  # the metrics ``sweep --columns`` named


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in HEADLINE:
        value = lookup(metrics, name)
        if value is not None:
            out[name] = value
    return out


def point_summary(doc: dict[str, Any], columns: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a finished point reports to the sweep: its headline metrics, its health flags and the
    values of the metrics ``columns`` names (None where the run has none)."""
    return {"metrics": headline(doc["metrics"]), "health": flag_codes(doc),
            "columns": {name: lookup(doc["metrics"], name) for name in columns}}


def final_status(results: list[PointResult], interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    if any(r.status == FAILED for r in results):
        return "failed"
    return "complete" if all(r.status == DONE for r in results) else "incomplete"


# ---------------------------------------------------------------------------------------------- index


def _point_entry(r: PointResult) -> dict[str, Any]:
    return {"index": r.point.index, "overrides": list(r.point.overrides), "params": r.point.params,
            "file": r.point.file, "status": r.status, "reused": r.reused, "wall_s": round(r.wall_s, 3),
            "error": r.error, "metrics": r.metrics, "fingerprint": r.fingerprint if r.status == DONE else None,
            "health": r.health if r.status == DONE else None}


def index_document(plan: SweepPlan, results: list[PointResult], *, status: str, created_at: str,
                   jobs: int, executor: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    from cgbench.results.document import provenance

    doc = provenance()
    doc.update({
        "kind": INDEX_KIND, "name": plan.name, "created_at": created_at,
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"), "status": status,
        "axes": plan.axes, "axis_sources": plan.axis_sources, "repeat": plan.repeat, "jobs": jobs,
        "executor": executor, "pid": os.getpid(), "host": host_name(),
        "counts": {s: sum(r.status == s for r in results) for s in (DONE, FAILED, PENDING)},
        "points": [_point_entry(r) for r in results],
    })
    if plan.warnings:  # known before it ran (cgbench.analysis.sweep.gating)
        doc["warnings"] = list(plan.warnings)
    doc.update(extra or {})  # an executor's record (``slurm``: its submissions, cgbench.analysis.sweep.slurm)
    return doc


class IndexWriter:
    """Keeps ``sweep.json`` current. ``write`` rewrites it (atomically); ``point_done`` does so only
    when ``interval_s`` has passed since the last write and at least ``SHARE`` times as long as that
    write took, so a sweep of many quick points neither rewrites an index of n entries n times nor
    spends more than about 1/SHARE of its time on it. What the index has not caught up with yet is on
    disk in the point files, which ``--resume`` reads first."""

    SHARE = 20

    def __init__(self, plan: SweepPlan, results: list[PointResult], jobs: int, executor: str,
                 interval_s: float = 1.0) -> None:
        self.plan, self.results, self.jobs, self.executor = plan, results, jobs, executor
        self.interval_s = interval_s
        self.created_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.path = plan.out_dir / INDEX_NAME
        self.extra: dict[str, Any] = {}  # more top-level keys (an executor's record)
        self._last = float("-inf")
        self._cost = 0.0  # seconds the last write took
        self.writes = 0

    def write(self, status: str) -> Path:
        from cgbench.results.document import write_json_atomic

        t0 = time.monotonic()
        doc = index_document(self.plan, self.results, status=status, created_at=self.created_at,
                             jobs=self.jobs, executor=self.executor, extra=self.extra)
        path = write_json_atomic(self.path, doc, clean=False, layout="lines")  # run_sweep cleaned the folder once
        self._last = time.monotonic()
        self._cost = self._last - t0
        self.writes += 1
        return path

    def point_done(self) -> None:
        if time.monotonic() - self._last >= max(self.interval_s, self.SHARE * self._cost):
            self.write("running")


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
        _check_point_types(path, i, p)
    from cgbench.results.read_checked import SWEEP, check_document

    check_document(doc, SWEEP, path)
    if doc.get("status") == "running" and not running_sweep_alive(Path(sweep_dir), doc):
        doc["status"] = "interrupted"
        doc["stale"] = stale_line(path, doc, "`cgbench sweep --resume --out` with the same arguments finishes it")
    return doc


# the JSON type of each key a point of the index may hold (what compare, plot and --resume read)
_POINT_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "params": ((dict,), "an object"), "status": ((str,), "a string"), "error": ((str, type(None)), "a string or null"),
    "metrics": ((dict,), "an object"), "reused": ((bool,), "true or false"),
    "wall_s": ((int, float), "a number"), "fingerprint": ((str, type(None)), "a string or null"),
    "health": ((list, type(None)), "a list of flag codes or null"),
}


def _check_point_types(path: Path, i: int, p: dict[str, Any]) -> None:
    """A hand-edited index: every value a reader uses has its JSON type (else one line naming it)."""
    for j, o in enumerate(p["overrides"]):
        if not isinstance(o, str):
            raise ConfigError(f"{path}: points[{i}].overrides[{j}] must be a string, got {type(o).__name__}")
    for key, (kinds, words) in _POINT_TYPES.items():
        if key in p and (not isinstance(p[key], kinds) or (kinds != (bool,) and isinstance(p[key], bool))):
            raise ConfigError(f"{path}: points[{i}].{key} must be {words}, got {type(p[key]).__name__}")
    for k, v in (p.get("params") or {}).items():
        if not isinstance(v, str):
            raise ConfigError(f"{path}: points[{i}].params.{k} must be a string, got {type(v).__name__}")


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
    if not isinstance(pid, int) or isinstance(pid, bool) or doc.get("host") != host_name():
        return True
    return _pid_alive(pid)


# ---------------------------------------------------------------------------------------------- resume


def complete_result(path: Path, overrides: tuple[str, ...]) -> dict[str, Any] | None:
    """The result document at ``path`` if it is a readable result of exactly these overrides."""
    from cgbench.results.document import load_result

    try:
        doc = load_result(path)
    except ConfigError:
        return None
    return doc if tuple(doc.get("overrides") or ()) == tuple(overrides) else None


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


def summary_columns(plan: SweepPlan, columns: tuple[str, ...] | None = None) -> list[str]:
    """The summary's columns: the varying axes (or ``overrides``), status, health, file, then the
    metrics: ``columns`` (``sweep --columns``), else the headline metrics."""
    return [*(plan.varying or ["overrides"]), "status", "health", "file", *(HEADLINE if columns is None else columns)]


def summary_records(plan: SweepPlan, results: list[PointResult],
                    columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """One record per point in sweep order: the summary's columns with raw values (fractions 0..1;
    ``health``: the flag codes, [] when healthy, None for a point that did not finish)."""
    keys = plan.varying
    out = []
    for r in results:
        rec: dict[str, Any] = {k: r.point.params.get(k, "") for k in keys} if keys else \
            {"overrides": " ".join(r.point.overrides)}
        rec["status"] = "kept" if r.reused else r.status
        rec["health"] = r.health
        rec["file"] = r.point.file
        for name in HEADLINE if columns is None else columns:
            rec[name] = r.metrics[name] if name in r.metrics else r.columns.get(name)
        out.append(rec)
    return out


def health_text(codes: list[str] | None) -> str:
    """``ok``, the flag codes joined by ``;`` (the run CSV's separator), or "" (no result)."""
    if codes is None:
        return ""
    return ";".join(codes) or "ok"


def summary_csv(plan: SweepPlan, results: list[PointResult], columns: tuple[str, ...] | None = None) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=summary_columns(plan, columns), lineterminator="\n")
    w.writeheader()
    for rec in summary_records(plan, results, columns):
        rec["health"] = health_text(rec["health"])
        w.writerow({k: "" if v is None else v for k, v in rec.items()})
    return buf.getvalue()


def write_summary_csv(plan: SweepPlan, results: list[PointResult]) -> Path:
    """``summary.csv`` next to ``sweep.json``: every point's axes, status and headline metrics."""
    from cgbench.safeio import write_text_atomic

    return write_text_atomic(plan.out_dir / SUMMARY_CSV, summary_csv(plan, results))
