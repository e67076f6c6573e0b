"""The runs of ``cgbench advise``: each candidate grid is a plain ``cgbench run`` of the given
overrides plus its ``cg`` overrides. ``Evaluator`` composes them (once per set of group selections,
``cgbench.config.compose.Composer``) and runs them on the sweep's executors (in this process, or in
a pool of worker processes with ``jobs > 1``; results in submission order, so the same as one
worker), and keeps each result for ``--resume``. A kept result is reused only when the config it
ran has the same fingerprint (``cgbench.analysis.sweep.fingerprint``: the resolved config and the
contents of its input files): a changed workload, trace or default reruns it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cgbench.analysis.advise.demand import shape_counts
from cgbench.analysis.sweep.executors import Executor, Outcome, Task, local_executor
from cgbench.config.schema import BenchConfig, ConfigError

RUN_KIND = "cgbench-advise-run"


def evaluate(cfg: BenchConfig, overrides: tuple[str, ...], want_shapes: bool) -> dict[str, Any]:
    """One candidate: a plain run of ``overrides`` (composed as ``cfg``; an executor's task)."""
    from cgbench.pipeline import run_point

    doc = run_point(cfg, list(overrides), trace=want_shapes)
    rec = {"kind": RUN_KIND, "overrides": list(overrides), "metrics": doc["metrics"],
           "graph_usage": doc["graph_usage"]}
    if want_shapes:
        rec["shapes"] = shape_counts(doc["steps"])
    return rec


def progress_of(say: Callable[[str, int | None], None]) -> Callable[[str, bool], None]:
    """An ``Evaluator``'s ``on_done`` that shows each finished run's label as progress."""
    return lambda label, reused: say(label, None)


def _failed(overrides: tuple[str, ...], error: str) -> dict[str, Any]:
    return {"kind": RUN_KIND, "overrides": list(overrides), "graph_usage": [],
            "metrics": {"outcome": "failed", "diagnosis": error}}


class Evaluator:
    """Runs candidates (in worker processes when ``jobs > 1``), keeps each result under
    ``out_dir/runs/`` and, with ``resume``, reuses a kept result of the same overrides."""

    def __init__(self, jobs: int, out_dir: Path | None, resume: bool,
                 on_done: Callable[[str, bool], None] | None = None, executor: Executor | None = None) -> None:
        from cgbench.config.compose import shared_composer

        self.jobs, self.out_dir, self.resume, self.on_done = jobs, out_dir, resume, on_done
        self.executor = executor if executor is not None else local_executor(jobs)
        self._composer = shared_composer()
        self.ran = self.reused = 0

    def path(self, overrides: tuple[str, ...]) -> Path | None:
        if self.out_dir is None:
            return None
        digest = hashlib.sha256("\n".join(overrides).encode()).hexdigest()[:16]
        return self.out_dir / "runs" / f"{digest}.json"

    def _kept(self, overrides: tuple[str, ...], want_shapes: bool, fingerprint: str) -> dict[str, Any] | None:
        path = self.path(overrides)
        if not self.resume or path is None or not path.is_file():
            return None
        from cgbench.safeio import read_json

        try:
            rec = read_json(path)
        except ConfigError:
            return None
        ok = (isinstance(rec, dict) and rec.get("kind") == RUN_KIND and rec.get("overrides") == list(overrides)
              and rec.get("fingerprint") == fingerprint
              and isinstance(rec.get("metrics"), dict) and (not want_shapes or "shapes" in rec))
        return rec if ok else None

    def _store(self, rec: dict[str, Any]) -> None:
        path = self.path(tuple(rec["overrides"]))
        if path is not None:
            from cgbench.results.document import write_json_atomic

            write_json_atomic(path, rec)

    def run(self, jobs: list[tuple[str, tuple[str, ...], bool]],
            requested_by: Callable[[int], str | None] | None = None) -> list[tuple[dict[str, Any], bool]]:
        """``[(label, overrides, want_shapes)]`` -> ``[(record, reused)]`` in the same order.

        A job whose config is refused (composing it or building its run raises ConfigError) is a failed
        record (a candidate grid the search made up), unless ``requested_by(i)`` names the option of
        the user's request that made job ``i`` (a re-check's ``--check-workload``): then the refusal
        is the user's bad input, raised naming that option once every job has ended."""
        from cgbench.analysis.sweep.executors import describe
        from cgbench.analysis.sweep.fingerprint import config_fingerprint

        out: list[tuple[dict[str, Any], bool] | None] = [None] * len(jobs)
        fingerprints: dict[int, str] = {}
        tasks = []
        for i, (label, ovr, shapes) in enumerate(jobs):
            try:
                cfg = self._composer.load(list(ovr))
            except ConfigError as e:  # a candidate whose grid is refused is a failed run, not a failed search
                if requested_by is not None and requested_by(i) is not None:
                    raise ConfigError(f"{requested_by(i)}: {label} is refused: {e}") from None
                out[i] = (self._finish(label, _failed(ovr, describe(e))), False)
                continue
            fingerprint = config_fingerprint(cfg)
            rec = self._kept(ovr, shapes, fingerprint)
            if rec is not None:
                out[i] = (rec, True)
                self.reused += 1
                if self.on_done:
                    self.on_done(label, True)
                continue
            fingerprints[i] = fingerprint
            tasks.append(Task(i, (cfg, ovr, shapes)))

        refusals: dict[int, str] = {}

        def finished(o: Outcome) -> None:
            label, ovr, _ = jobs[o.key]
            if o.refused and requested_by is not None and requested_by(o.key) is not None:
                refusals[o.key] = f"{requested_by(o.key)}: {label} is refused: {o.error}"
            # the fingerprint of the config it ran: --resume reuses the record only while it holds
            rec = {**o.value, "fingerprint": fingerprints[o.key]} if o.ok else _failed(ovr, o.error or "")
            out[o.key] = (self._finish(label, rec), False)

        self.executor.run(evaluate, tasks, finished)
        if refusals:
            kept = (f" (the runs so far are kept in {self.out_dir}: change the option and add --resume)"
                    if self.out_dir is not None and self.ran else "")
            raise ConfigError(refusals[min(refusals)] + kept)
        return [o for o in out if o is not None]

    def _finish(self, label: str, rec: dict[str, Any]) -> dict[str, Any]:
        if rec["metrics"]["outcome"] != "failed":  # a failed run is retried by --resume
            self._store(rec)
        self.ran += 1
        if self.on_done:
            self.on_done(label, False)
        return rec

    def close(self, *, abort: bool = False) -> None:
        self.executor.close(abort=abort)
