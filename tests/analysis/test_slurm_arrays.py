"""How points become SLURM array tasks and arrays, and how the polls back off (cgbench.analysis.sweep.slurm_arrays),
without a cluster; a chunk's task reported for each of its points (the watch of executor_slurm); a
detached sweep's record and what a --resume adopts of it (cgbench.analysis.sweep.slurm)."""

from __future__ import annotations

import math

import pytest

from cgbench.analysis.sweep import executor_slurm
from cgbench.analysis.sweep.executors import Outcome
from cgbench.analysis.sweep.slurm_arrays import (
    TASKS_PER_SLOT,
    Backoff,
    array_batches,
    chunks,
    parse_max_array_size,
    points_per_task,
)
from tests.analysis.test_executors import _Job, _Paths


@pytest.mark.parametrize(("points", "slots", "size"), [
    (10_000, 256, 20),  # 500 tasks: two per slot
    (12, 256, 1), (2_000, 32, 32), (2_000, 1, 1_000), (1, 4, 1),
])
def test_points_per_task_is_an_even_share_of_the_slots(points, slots, size):
    assert points_per_task(points, slots) == size
    tasks = math.ceil(points / size)
    assert tasks <= max(1, slots * TASKS_PER_SLOT) or size == 1


def test_an_explicit_size_wins_and_a_measured_point_time_caps_the_chunk():
    assert points_per_task(10_000, 256, explicit=7) == 7
    # 20 points of 60 s would be 20 minutes: within half a 10-minute limit, 5 points
    assert points_per_task(10_000, 256, point_s=60.0, timeout_min=10) == 5
    assert points_per_task(10_000, 256, point_s=1e-3, timeout_min=10) == 20
    assert points_per_task(10, 1, point_s=3600.0, timeout_min=10) == 1


def test_10000_points_fit_the_default_array_limit_and_split_at_a_lower_one():
    tasks = chunks(list(range(10_000)), points_per_task(10_000, 256))
    assert len(tasks) == 500 and [t[0] for t in tasks[:2]] == [0, 20] and sum(map(len, tasks)) == 10_000
    assert len(array_batches(tasks, 1001)) == 1
    arrays = array_batches(tasks, 50)
    assert [len(a) for a in arrays] == [50] * 10 and [p for a in arrays for t in a for p in t] == list(range(10_000))
    assert [len(a) for a in array_batches(list(range(63)), 50)] == [50, 13]


def test_max_array_size_is_read_from_scontrol_show_config():
    text = "Configuration data as of 2026-01-01T00:00:00\nMaxArraySize            = 50\nMaxJobCount = 10000\n"
    assert parse_max_array_size(text) == 50
    assert parse_max_array_size("MaxJobCount = 10000\n") is None


def test_the_polls_back_off_while_nothing_changes_and_start_again_after_a_change():
    b = Backoff(0.5, 10.0, 2.0)
    assert [b.idle() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert b.changed() == 0.5 and b.idle() == 1.0


def test_a_chunks_task_reports_every_point_of_it(tmp_path, monkeypatch):
    monkeypatch.setattr(executor_slurm, "STATE_POLL_S", 0.0)
    monkeypatch.setattr(executor_slurm, "RESULT_GRACE_S", 0.0)
    monkeypatch.setattr(executor_slurm, "queued_tasks", lambda arrays: set())
    jobs = []
    for i, state in enumerate(["COMPLETED", "FAILED", "CANCELLED by 0"]):
        (tmp_path / str(i)).mkdir()
        jobs.append(_Job(f"9_{i}", _Paths(tmp_path / str(i)), state))
    jobs[0].paths.result_pickle.write_text("x")
    jobs[0].outcome = [Outcome(0, {"steps": 1}), Outcome(1, error="ValueError: x"), Outcome(2, {"steps": 2}),
                       Outcome(99, {"steps": 3})]  # a point kept since: not this task's any more
    got: dict[int, Outcome] = {}
    tasks = [executor_slurm.ArrayTask(jobs[0], (0, 1, 2)), executor_slurm.ArrayTask(jobs[1], (3, 4)),
             executor_slurm.ArrayTask(jobs[2], (5,))]
    executor_slurm._Watch(tasks, ["9"], lambda o: got.__setitem__(o.key, o), poll_s=0.0).until_done()
    assert sorted(got) == [0, 1, 2, 3, 4, 5]
    assert got[0].value == {"steps": 1} and got[1].error.startswith("ValueError: x (log: ")
    assert got[3].error == got[4].error == f"array task 9_1 ended FAILED without a result (log: {jobs[1].paths.stderr})"
    assert got[5].missing and "array task 9_2 was cancelled before it started" in got[5].error


def test_points_per_task_is_a_cgbench_setting_of_slurm():
    assert executor_slurm.parse_settings(["points_per_task=8", "partition=cpu"]) == {
        "points_per_task": 8, "slurm_partition": "cpu"}
    from cgbench.config.schema import ConfigError

    for bad in ("points_per_task=0", "points_per_task=a", "points_per_task=true"):
        with pytest.raises(ConfigError, match="points_per_task: must be an integer >= 1"):
            executor_slurm.parse_settings([bad])
