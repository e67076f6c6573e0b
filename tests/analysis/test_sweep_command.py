"""``cgbench sweep`` below its command line (``analysis/sweep/command.py``): its one ``ExitStack`` stops a
warm worker pool when anything before the run fails, releases it after a dry run, and drops the folder's
lock however the run ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgbench.analysis.sweep import command
from cgbench.analysis.sweep.command import DryRun, SweepDone, SweepHooks, SweepRequest
from cgbench.analysis.sweep.lock import is_locked
from cgbench.config.schema import ConfigError

SMALL = ("workload=small", "workload.num_requests=4")


class FakePool:
    name = "pool"

    def __init__(self) -> None:
        self.closes: list[bool] = []

    def close(self, *, abort: bool = False) -> None:
        self.closes.append(abort)


@pytest.fixture
def pool(monkeypatch) -> FakePool:
    fake = FakePool()
    monkeypatch.setattr(command, "warm_pool", lambda jobs, executor, dry_run: fake)
    return fake


def _hooks(run=None, said: list[str] | None = None) -> SweepHooks:
    def never_runs(*args, **kwargs):
        raise AssertionError("no point should run")

    return SweepHooks(plan=lambda make: make(on_progress=lambda done, total: None),
                      planned=lambda plan, launch_text: None, say=(said if said is not None else []).append,
                      run=run or never_runs, export_formats=lambda: ("csv",))


def test_a_point_that_fails_its_check_stops_the_warm_pool(pool):
    with pytest.raises(ConfigError):
        command.sweep(SweepRequest(overrides=(*SMALL, "workload.num_requests=0,4"), jobs=2), _hooks())
    assert pool.closes == [True]


def test_an_export_folder_refused_after_planning_stops_the_warm_pool(pool, tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    (export / "metrics.csv").write_text("taken\n")
    with pytest.raises(ConfigError, match="--export"):
        command.sweep(SweepRequest(overrides=SMALL, jobs=2, out_dir=tmp_path / "sw", export_dir=export), _hooks())
    assert pool.closes == [True]
    assert not (tmp_path / "sw").exists()  # refused before the folder is claimed


def test_a_run_that_raises_drops_the_folder_lock_and_stops_the_pool(pool, tmp_path):
    out = tmp_path / "sw"
    seen: dict[str, object] = {}

    def run(plan, jobs, resume, executor, *, outputs):
        seen["locked"], seen["executor"] = is_locked(out), executor
        raise RuntimeError("the run broke")

    with pytest.raises(RuntimeError, match="the run broke"):
        command.sweep(SweepRequest(overrides=SMALL, jobs=2, out_dir=out), _hooks(run))
    assert seen == {"locked": True, "executor": pool}  # the warm pool runs the points
    assert is_locked(out) is False
    assert pool.closes == [True]


def test_a_finished_run_releases_the_lock_and_the_pool_once_more_harmlessly(pool, tmp_path):
    out = tmp_path / "sw"
    said: list[str] = []

    def run(plan, jobs, resume, executor, *, outputs):
        return "outcome"

    done = command.sweep(SweepRequest(overrides=SMALL, jobs=2, out_dir=out), _hooks(run, said))
    assert done == SweepDone("outcome", None)  # type: ignore[arg-type]
    assert is_locked(out) is False
    assert pool.closes == [False]
    assert said == [f"sweep point: 1 points, 2 processes -> {out}"]  # one point: the sweep is named so


def test_a_dry_run_claims_no_folder(tmp_path):
    out = tmp_path / "sw"
    done = command.sweep(SweepRequest(overrides=SMALL, out_dir=out, dry_run=True), _hooks())
    assert isinstance(done, DryRun) and len(done.plan.points) == 1 and done.slurm is None
    assert not Path(out).exists()
