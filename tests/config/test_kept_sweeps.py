"""A sweep's plan kept across processes (``cgbench.config.kept_sweeps``, read by ``plan_sweep``): a plan
read back equals a fresh one (its settings, axes, points, each point's config and fingerprint), every
check after a composition runs again on a point read back, an edited file composes afresh, nothing but
a successful, environment-free composition is kept, a bad or foreign entry is composed afresh and
replaced, and a read-back imports no Hydra."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from cgbench.analysis.sweep.plan import plan_sweep
from cgbench.config import compose_cache, kept_sweeps
from cgbench.config.compose import load_config_fresh
from cgbench.config.schema import ConfigError
from cgbench.user_cache import ENV_CACHE_DIR

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["seed=range(0,4)", "workload=small", "workload.num_requests=8"]


def _plans(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.sweep")) if cache.is_dir() else []


def _plan(args: list[str], out: Path, **kw):
    return plan_sweep(list(args), out_dir=out, **kw)


def _what(plan) -> tuple:
    return (plan.name, plan.axes, plan.sweep_args, plan.axis_sources, plan.jobs, plan.repeat, plan.warnings,
            [(p.overrides, p.file, p.params, asdict(p.cfg), p.fingerprint) for p in plan.points])


@pytest.mark.parametrize("args, repeat", [(SWEEP, None), (["sweep=default"], None),
                                          (["workload=small", "policy=budget,defer"], 2)])
def test_a_plan_read_back_equals_a_fresh_one(cache, tmp_path, monkeypatch, args, repeat, found_by):
    found = found_by("read_sweep")
    first = _plan(args, tmp_path / "a", repeat=repeat)
    again = _plan(args, tmp_path / "a", repeat=repeat)
    assert found == [False, True]
    assert _what(again) == _what(first)
    for point in again.points:
        assert asdict(point.cfg) == asdict(load_config_fresh(list(point.overrides))), point.overrides
    monkeypatch.setenv(ENV_CACHE_DIR, "off")
    assert _what(_plan(args, tmp_path / "a", repeat=repeat)) == _what(first)  # the plan with no cache at all


def test_a_plan_read_back_imports_no_hydra(cache, tmp_path):
    code = ("import sys; from pathlib import Path; from cgbench.analysis.sweep.plan import plan_sweep; "
            f"plan = plan_sweep({SWEEP!r}, out_dir=Path('out')); "
            "print(len(plan.points), sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'yaml'}))")
    env = {**os.environ, ENV_CACHE_DIR: str(cache.parent)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout.split(maxsplit=1) for _ in range(2)]
    assert runs[0] == ["4", "['hydra', 'omegaconf', 'yaml']\n"]  # composed, and kept
    assert runs[1] == ["4", "[]\n"]


def test_checks_after_the_composition_run_on_points_read_back(cache, tmp_path, monkeypatch, found_by):
    """A point read back is checked again: its trace resolves against this working directory (relative
    where the file is there, else the shipped example's), and a working directory deleted meanwhile is
    the fresh plan's error."""
    args = ["workload=trace", "seed=1,2"]
    here, empty, gone = tmp_path / "here", tmp_path / "empty", tmp_path / "gone"
    (here / "examples" / "traces").mkdir(parents=True)
    (here / "examples" / "traces" / "small.jsonl").write_text((ROOT / "examples/traces/small.jsonl").read_text())
    empty.mkdir()
    monkeypatch.chdir(here)
    found = found_by("read_sweep")
    assert {p.cfg.workload.trace for p in _plan(args, tmp_path / "a").points} == {"examples/traces/small.jsonl"}
    monkeypatch.chdir(empty)
    elsewhere = _plan(args, tmp_path / "a")
    assert {p.cfg.workload.trace for p in elsewhere.points} == {str(ROOT / "examples/traces/small.jsonl")}
    assert found == [False, True]
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    errors = []
    for where in (str(cache.parent), "off"):
        monkeypatch.setenv(ENV_CACHE_DIR, where)
        with pytest.raises(ConfigError) as e:
            _plan(args, tmp_path / "a")
        errors.append(str(e.value))
    assert found == [False, True, True]
    assert errors[0] == errors[1] and "working directory" in errors[0]


def test_an_edited_sweep_file_is_a_new_plan(cache, tmp_path, monkeypatch):
    conf = tmp_path / "userconf"
    (conf / "sweep").mkdir(parents=True)
    path = conf / "sweep" / "mine.yaml"
    path.write_text("name: mine\nparams:\n  seed: 1,2\n  workload: small\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    assert [p.cfg.seed for p in _plan(["sweep=mine"], tmp_path / "a").points] == [1, 2]
    path.write_text("name: mine\nparams:\n  seed: 3,4,5\n  workload: small\n")
    assert [p.cfg.seed for p in _plan(["sweep=mine"], tmp_path / "a").points] == [3, 4, 5]
    assert len(_plans(cache)) == 2


def test_an_interpolated_sweep_file_is_not_kept(cache, tmp_path, monkeypatch):
    conf = tmp_path / "userconf"
    (conf / "sweep").mkdir(parents=True)
    (conf / "sweep" / "env.yaml").write_text("name: ${oc.env:CGBENCH_TEST_SWEEP}\nparams:\n  seed: 1,2\n"
                                             "  workload: small\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    monkeypatch.setenv("CGBENCH_TEST_SWEEP", "named-by-env")
    assert _plan(["sweep=env"], tmp_path / "a").name == "named-by-env"
    assert _plans(cache) == []


def test_a_point_under_an_interpolation_is_composed_each_time(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("CGBENCH_TEST_OUT", "first")
    args = ["workload=small", "seed=1,2", "out_dir=${oc.env:CGBENCH_TEST_OUT}"]
    assert {p.cfg.out_dir for p in _plan(args, tmp_path / "a").points} == {"first"}
    monkeypatch.setenv("CGBENCH_TEST_OUT", "second")
    assert {p.cfg.out_dir for p in _plan(args, tmp_path / "a").points} == {"second"}


class _Planted:
    def __reduce__(self):
        return (os.remove, ("planted",))


def _kept_entry(cache: Path, tmp_path: Path) -> Path:
    _plan(SWEEP, tmp_path / "a")
    [entry] = _plans(cache)
    return entry


@pytest.mark.parametrize("content", [b"", b"\x80\x05truncated", pickle.dumps({"format": 0, "points": {}}),
                                     pickle.dumps(["not", "a plan"]), pickle.dumps(_Planted())])
def test_a_bad_entry_is_composed_afresh_and_replaced(cache, tmp_path, monkeypatch, content):
    entry = _kept_entry(cache, tmp_path)
    first = _what(_plan(SWEEP, tmp_path / "a"))
    (tmp_path / "planted").write_text("still here")
    entry.write_bytes(content)
    monkeypatch.chdir(tmp_path)  # where the planted pickle would remove its file
    assert _what(_plan(SWEEP, tmp_path / "a")) == first
    assert (tmp_path / "planted").read_text() == "still here"
    assert entry.read_bytes() != content  # replaced by the fresh plan


def test_a_foreign_point_in_a_plan_is_refused_not_run(cache, tmp_path, monkeypatch):
    entry = _kept_entry(cache, tmp_path)
    first = _what(_plan(SWEEP, tmp_path / "a"))
    plan = pickle.loads(entry.read_bytes())
    key = next(iter(plan["points"]))
    plan["points"][key] = pickle.dumps(_Planted())
    entry.write_bytes(pickle.dumps(plan))
    (tmp_path / "planted").write_text("still here")
    monkeypatch.chdir(tmp_path)
    assert _what(_plan(SWEEP, tmp_path / "a")) == first
    assert (tmp_path / "planted").read_text() == "still here"
    assert pickle.loads(entry.read_bytes())["points"][key] != plan["points"][key]


def test_a_plan_over_the_size_bound_is_not_kept(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(kept_sweeps, "MAX_PLAN_BYTES", 100)
    _plan(SWEEP, tmp_path / "a")
    assert _plans(cache) == []


def test_off_keeps_no_plan(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE_DIR, "off")
    monkeypatch.chdir(tmp_path)
    written: list[str] = []
    monkeypatch.setattr(compose_cache, "write", lambda key, data, *, kind="config": written.append(kind))
    assert len(_plan(SWEEP, tmp_path / "a").points) == 4
    assert written == [] and list(tmp_path.iterdir()) == []


def test_a_resume_from_the_folders_index_reads_its_points_back(cache, tmp_path, monkeypatch, found_by):
    """``--resume DIR`` with no arguments plans from the folder's index: kept the same way, and equal to
    the plan composed afresh."""
    from cgbench.analysis.sweep.resume import plan_from_folder
    from cgbench.analysis.sweep.run import run_sweep

    run_sweep(_plan(SWEEP, tmp_path / "done"))
    found = found_by("read_sweep")
    plans = [plan_from_folder(tmp_path / "done") for _ in range(2)]
    monkeypatch.setenv(ENV_CACHE_DIR, "off")
    plans.append(plan_from_folder(tmp_path / "done"))
    assert found == [False, True]
    assert _what(plans[0]) == _what(plans[1]) == _what(plans[2])
    assert [p.cfg.seed for p in plans[1].points] == [0, 1, 2, 3]
