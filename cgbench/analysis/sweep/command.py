"""``cgbench sweep`` below its command line: the options checked against each other, the plan, the checks
made before anything runs, the folder claimed, the run and the export. ``cgbench.cli.sweep`` parses the
options, shows the progress and prints what comes back (``SweepHooks``).

One ``ExitStack`` holds the clean-ups: a warm worker pool is stopped at once when anything before the run
fails (and released when a dry run ends), and the folder's lock is dropped however the run ends.
Imports stay inside the functions: the pool's workers start while this process imports the planner."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from cgbench.config.schema import ConfigError

if TYPE_CHECKING:
    from cgbench.analysis.sweep.executors import Executor
    from cgbench.analysis.sweep.plan import SweepPlan
    from cgbench.analysis.sweep.run import SweepOutcome

EXECUTORS = ("local", "slurm")
# the Hydra launchers that --launcher used to name, and what replaces each
_OLD_LAUNCHERS = {"basic": "the default (--executor local --jobs 1)", "joblib": "--jobs N (local worker processes)",
                  "submitit_local": "--jobs N (local worker processes)",
                  "submitit_slurm": "--executor slurm, with --slurm KEY=VALUE for its settings"}

PlanFn = Callable[..., "SweepPlan"]  # called with on_progress=(done, total) -> None


@dataclass(frozen=True)
class SweepRequest:
    """What ``cgbench sweep`` was asked (``cgbench sweep --help`` says what each option does)."""

    overrides: tuple[str, ...] = ()
    out_dir: Path | None = None
    jobs: int | None = None
    repeat: int | None = None
    resume: bool = False
    dry_run: bool = False
    executor: str | None = None
    detach: bool = False
    slurm: tuple[str, ...] = ()
    launcher: str | None = None
    config_dirs: tuple[Path, ...] = ()
    export_dir: Path | None = None
    sensitivity: bool = False
    megatron_args: str | None = None
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepHooks:
    """What the command line does around the work."""

    plan: Callable[[PlanFn], SweepPlan]  # plan the sweep, showing how far the composing got
    planned: Callable[[SweepPlan, str | None], None]  # the launch line's translation (or None), the warnings
    say: Callable[[str], None]  # one line on stderr
    run: Callable[..., SweepOutcome]  # (plan, jobs, resume, executor, outputs=...) with its progress shown
    export_formats: Callable[[], tuple[str, ...]]  # --export-format, parsed once the sweep will run


@dataclass(frozen=True)
class DryRun:
    """``--dry-run``: the plan, checked, and the SLURM settings it would submit with."""

    plan: SweepPlan
    resume: bool
    slurm: dict[str, Any] | None


@dataclass(frozen=True)
class SweepDone:
    """A sweep that ran (finished, interrupted or submitted); ``export_notes``: None without an export."""

    outcome: SweepOutcome
    export_notes: list[str] | None


class SweepLaunchLine:
    """``sweep --megatron-args``: every point runs the launch line's translation with its own overrides
    winning (``megatron_args.with_megatron_args``, one point at a time: the KV sizing reads each
    point's model); ``text`` is the translation to print, point 1's, with the axes that replace
    translated keys named."""

    def __init__(self, value: str, config_dirs: list[Path]) -> None:
        from cgbench.config.megatron_args import read_launch_text, translate

        self.value, self.config_dirs = value, config_dirs
        self.line = read_launch_text(value)
        t = translate(self.line)
        t.check()  # a bad line is one --megatron-args error, before any point
        self.translated = t.overrides
        self.first: str | None = None

    def __call__(self, point: list[str]) -> list[str]:
        from cgbench.config.megatron_args import with_megatron_args

        ovr, text = with_megatron_args(self.value, point, config_dirs=self.config_dirs)
        if self.first is None:
            self.first = text
        return ovr

    def text(self, plan: SweepPlan) -> str:
        from cgbench.config.overrides import override_key

        shown = [ln for ln in (self.first or "").splitlines()
                 if not (ln.startswith("  yours wins   ") and override_key(ln.split()[2]) in plan.varying)]
        lines = [*shown, "  (point 1's translation; every point is translated the same way, its own overrides "
                 "winning)"]
        for key in plan.varying:
            hit = [o for o in self.translated if override_key(o) in (key, f"{key}.") or
                   override_key(o).partition(".")[0] == key]
            if hit:
                lines.append(f"  axis wins    {key}={','.join(plan.axes[key])} (a sweep axis: each point's value "
                             f"replaces the translated {' '.join(hit)})")
        return "\n".join(lines) + "\n"


def refuse_launcher(launcher: str) -> None:
    instead = _OLD_LAUNCHERS.get(launcher, "--jobs N (local worker processes) or --executor slurm")
    raise ConfigError(f"--launcher {launcher}: Hydra launchers are replaced by cgbench's executors: use {instead} "
                      "(see cgbench docs sweeps)")


def resume_folder(overrides: list[str], out_dir: Path | None, resume: bool) -> tuple[list[str], Path | None]:
    """``cgbench sweep --resume DIR``: a lone argument that is no override (no ``=``) but a sweep folder
    is the folder to finish, as ``--out DIR``."""
    if resume and out_dir is None and len(overrides) == 1 and "=" not in overrides[0] \
            and Path(overrides[0]).is_dir():
        return [], Path(overrides[0])
    return overrides, out_dir


def recorded_executor(out_dir: Path | None, resume: bool, executor: str | None,
                      slurm: tuple[str, ...]) -> tuple[str, dict[str, Any], int | None] | None:
    """A resumed SLURM sweep's (executor, settings, jobs), when neither --executor nor --slurm is given."""
    if not resume or out_dir is None or executor not in (None, "slurm"):
        return None
    from cgbench.analysis.sweep.slurm import resume_executor

    return resume_executor(out_dir)


def planner(overrides: list[str], *, repeat: int | None, out_dir: Path | None, resume: bool,
            launch: SweepLaunchLine | None) -> PlanFn:
    """The plan to make: ``--resume`` with no overrides, the one recorded in the folder."""
    from functools import partial

    from cgbench.analysis.sweep.resume import has_index, plan_from_folder
    from cgbench.analysis.sweep.run import plan_sweep

    if resume and not overrides and repeat is None and out_dir is not None and has_index(out_dir):
        return partial(plan_from_folder, out_dir)
    return partial(plan_sweep, overrides, repeat=repeat, out_dir=out_dir, launch=launch)


def check_outputs(plan: SweepPlan, megatron_args: str | None = None) -> None:
    """Before any point runs: the files the points read (traces, calibration tables, a
    ``--megatron-args @FILE``) are the command's inputs, and the sweep's own files (index, summary,
    every point's result) replace none of them (``cgbench.safeio.declare_inputs``)."""
    from cgbench import safeio
    from cgbench.analysis.sweep.fingerprint import input_paths
    from cgbench.analysis.sweep.folder import INDEX_NAME, SUMMARY_CSV

    seen: set[tuple[str, str]] = set()
    if megatron_args is not None and megatron_args.startswith("@"):
        safeio.declare_inputs({"--megatron-args": megatron_args[1:]})
        seen.add(("--megatron-args", megatron_args[1:]))
    for point in plan.points:
        for key, path in input_paths(point.cfg).items():
            if (key, path) not in seen:
                seen.add((key, path))
                safeio.declare_inputs({key: path})
    if not seen:
        return
    for name in (INDEX_NAME, SUMMARY_CSV):
        safeio.check_writable(plan.out_dir / name, "--out")
    for point in plan.points:
        safeio.check_not_input(plan.out_dir / point.file, "--out")


def warm_pool(jobs: int | None, executor: str, dry_run: bool) -> Executor | None:
    """With ``--jobs N`` (N > 1) on this machine, the pool's workers start while the points are
    planned (their imports overlap the compositions)."""
    if jobs is None or jobs < 2 or executor != "local" or dry_run:
        return None
    from cgbench.analysis.sweep.executors import LocalPool

    pool = LocalPool(jobs)
    pool.warm(["cgbench.analysis.sweep.run", "cgbench.pipeline"])
    return pool


def slurm_executor(plan: SweepPlan, settings: dict[str, Any], jobs: int | None, say: Callable[[str], None],
                   detach: bool = False, resume: bool = False) -> Executor:
    from cgbench.analysis.sweep.executor_slurm import SlurmExecutor, slurm_folder
    from cgbench.analysis.sweep.slurm import measured_point_s

    return SlurmExecutor(slurm_folder(plan.out_dir), settings, parallelism=jobs, job_name=f"cgbench-{plan.name}",
                         say=say, detach=detach, point_s=measured_point_s(plan.out_dir) if resume else None)


def _stopped_on_error(pool: Executor) -> Callable[[type[BaseException] | None, BaseException | None,
                                                  TracebackType | None], bool]:
    """An exit callback: the pool stopped now on an error (or an interrupt), released otherwise (a pool the
    run has closed already is left as it is)."""

    def exit_(kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> bool:
        pool.close(abort=kind is not None)
        return False

    return exit_


def _check_executor_options(req: SweepRequest, executor: str, out_dir: Path | None) -> None:
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: {executor!r} is not one of {', '.join(EXECUTORS)}")
    if req.slurm and executor != "slurm":
        raise ConfigError("--slurm: settings for --executor slurm (add --executor slurm)")
    if req.detach and executor != "slurm":
        raise ConfigError("--detach: only a SLURM sweep runs on without this process (add --executor slurm)")
    if req.resume and out_dir is None:
        raise ConfigError("--resume: name the sweep folder to finish: cgbench sweep --resume DIR "
                          "(or --out DIR; without it every sweep gets a new folder)")


def sweep(req: SweepRequest, hooks: SweepHooks) -> DryRun | SweepDone:
    """Check, plan and run a sweep (or, with ``--dry-run``, only check and plan it); a bad option or point
    raises ``ConfigError`` before any point runs."""
    if req.launcher is not None:
        refuse_launcher(req.launcher)
    overrides, out_dir = resume_folder(list(req.overrides), req.out_dir, req.resume)
    recorded = recorded_executor(out_dir, req.resume, req.executor, req.slurm)
    executor = req.executor or (recorded[0] if recorded else "local")
    _check_executor_options(req, executor, out_dir)
    launch = None if req.megatron_args is None else SweepLaunchLine(req.megatron_args, list(req.config_dirs))
    jobs = req.jobs
    with ExitStack() as cleanups:
        warm = warm_pool(jobs, executor, req.dry_run)
        if warm is not None:
            cleanups.push(_stopped_on_error(warm))
        plan = hooks.plan(planner(overrides, repeat=req.repeat, out_dir=out_dir, resume=req.resume, launch=launch))
        hooks.planned(plan, None if launch is None else launch.text(plan))
        check_outputs(plan, req.megatron_args)
        if req.sensitivity:
            from cgbench.analysis.sensitivity import check_sensitivity

            for point in plan.points:
                check_sensitivity(point.cfg)
        n_jobs = jobs if jobs is not None else plan.jobs
        settings: dict[str, Any] = {}
        if executor == "slurm":
            from cgbench.analysis.sweep.executor_slurm import available, parse_settings

            settings = parse_settings(list(req.slurm)) if req.slurm or recorded is None else recorded[1]
            if jobs is None and recorded is not None:
                jobs = recorded[2]
            if not req.dry_run:
                available()
        if req.dry_run:
            return DryRun(plan, req.resume, settings if executor == "slurm" else None)
        from cgbench.analysis.sweep.run import PointOutputs, claim_out_dir, release_out_dir

        formats = hooks.export_formats()
        if req.export_dir is not None:
            from cgbench.analysis.sweep.export import sweep_export_names
            from cgbench.results.export import check_export_folder

            check_export_folder(req.export_dir, sweep_export_names(formats))
        if executor == "slurm":  # a setting submitit refuses is refused before the folder exists
            slurm_executor(plan, settings, jobs, hooks.say, req.detach)
        claim_out_dir(plan, resume=req.resume)
        cleanups.callback(release_out_dir, plan)
        # the SLURM files go into the folder claimed (a default folder may have got a -2 suffix)
        ex = slurm_executor(plan, settings, jobs, hooks.say, req.detach, req.resume) if executor == "slurm" else warm
        where = "SLURM" if executor == "slurm" else f"{n_jobs} process{'es' if n_jobs > 1 else ''}"
        hooks.say(f"sweep {plan.name}: {len(plan.points)} points, {where} -> {plan.out_dir}")
        outputs = PointOutputs(records=req.export_dir is not None, sensitivity=req.sensitivity,
                               launch_line=None if launch is None else launch.line, columns=req.columns)
        outcome = hooks.run(plan, n_jobs, req.resume, ex, outputs=outputs)
    notes = None
    if req.export_dir is not None and not outcome.interrupted:
        from cgbench.analysis.sweep.export import export_sweep

        _, notes = export_sweep(plan.out_dir, req.export_dir, formats=formats)
    return SweepDone(outcome, notes)
