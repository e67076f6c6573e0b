"""Plug-ins declared in a config folder's ``plugins.yaml`` (Hydra ``_target_``), in process: the example
of ``examples/plugins/defer_then_guard`` put on ``sys.path`` but not installed, seen by run, sweep
(in worker processes too), schedule and advise, with the same results as through entry points; loaded
only when named; a declaration that could never work refused in one line. More refusals: the
``plugins.yaml`` rows of ``tests/inputs/corpus.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.paths import ENV_CONFIG_DIR
from cgbench.config.plugin_schema import plugin_help
from cgbench.config.registry import plugins
from cgbench.config.registry.plugin_files import plugin_folders
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.pipeline import run_point
from tests.helpers import one_error_line
from tests.plugin_fixtures import ENTRY_POINTS, EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "tests" / "states" / "11_2_round1.json"
runner = CliRunner()
DECLARED = """\
policies:
  defer_then_guard: {_target_: cgbench_defer_then_guard.POLICY}
grids:
  pow2_decode: {_target_: cgbench_defer_then_guard.GRID}
  pow2_from8: {_target_: cgbench_defer_then_guard.pow2_decode_kind, name: pow2_from8, smallest: 8}
workloads:
  ramp: {_target_: cgbench_defer_then_guard.ARRIVAL}
"""
ALL_THREE = ["policy=defer_then_guard", "policy.defer_then_guard.max_defers=3", "cg=pow2_decode",
             "workload.arrival.process=ramp", "workload.arrival.rate=50", "workload.num_requests=12"]
PROVENANCE = ("created_at", "git_sha", "git_dirty", "git_diff_hash")


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch):
    """The example package importable (a module on the path, no distribution), nothing loaded yet."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delenv(ENV_CONFIG_DIR, raising=False)
    plugins.clear_caches()
    yield
    plugins.clear_caches()


def _folder(root: Path, text: str = DECLARED) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugins.yaml").write_text(text)
    return root


def _fake_entry_points(monkeypatch: pytest.MonkeyPatch, names: dict[str, tuple[str, ...]]) -> None:
    from importlib.metadata import EntryPoint

    def points(family: str) -> dict[str, EntryPoint]:
        group = plugins.ENTRY_POINT_GROUPS[family]
        return {n: EntryPoint(n, ENTRY_POINTS[family][n], group) for n in names.get(family, ())}

    monkeypatch.setattr(plugins, "_entry_points", points)
    plugins.clear_caches()


def _run(tmp_path: Path, name: str, args: list[str]) -> dict:
    out = tmp_path / f"{name}.json"
    r = runner.invoke(app, ["run", *args, "--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    return {k: v for k, v in doc.items() if k not in PROVENANCE}



@pytest.mark.slow
def test_run_sees_the_declared_entries_and_gives_the_documents_the_entry_points_give(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "conf")
    declared = _run(tmp_path, "declared", [*ALL_THREE, "--config-dir", str(folder)])
    assert declared["config"]["policy"]["defer_then_guard"] == {"max_defers": 3, "max_ratio": 1.5}
    assert declared["config"]["cg"]["kind"] == "pow2_decode" and declared["metrics"]["num_graphs"] == 9
    assert declared["config"]["workload"]["arrival"]["process"] == "ramp"
    assert declared["metrics"]["requests"]["completed"] == 12
    _fake_entry_points(monkeypatch, {"policies": ("defer_then_guard",), "grids": ("pow2_decode",),
                                     "workloads": ("ramp",)})
    installed = _run(tmp_path, "installed", ALL_THREE)
    assert json.dumps(declared, sort_keys=True) == json.dumps(installed, sort_keys=True)


def _sweep(tmp_path: Path, folder: Path, jobs: int) -> dict[str, dict]:
    axes = [a for a in ALL_THREE if not a.startswith(("policy", "cg"))]
    out = tmp_path / f"sw{jobs}"
    r = runner.invoke(app, ["sweep", "policy=wait_timeout,defer_then_guard", "cg=pow2_decode,pow2_from8", *axes,
                            "--jobs", str(jobs), "--config-dir", str(folder), "--out", str(out)])
    assert r.exit_code == 0, r.output
    index = json.loads((out / "sweep.json").read_text())
    assert [p["status"] for p in index["points"]] == ["done"] * 4, index["points"]
    return {" ".join(p["overrides"][:2]): {k: v for k, v in json.loads((out / p["file"]).read_text()).items()
                                        if k not in PROVENANCE} for p in index["points"]}


@pytest.mark.e2e
def test_a_sweep_loads_the_declared_entries_in_process_and_in_worker_processes(tmp_path):
    folder = _folder(tmp_path / "conf")
    in_process, pool = _sweep(tmp_path, folder, 1), _sweep(tmp_path, folder, 2)
    assert json.dumps(in_process, sort_keys=True) == json.dumps(pool, sort_keys=True)
    # the sweep point of a run's config (max_defers left at its default)
    run = _run(tmp_path, "default", [a for a in ALL_THREE if "max_defers" not in a] + ["--config-dir", str(folder)])
    assert pool["policy=defer_then_guard cg=pow2_decode"]["metrics"] == run["metrics"]
    assert pool["policy=defer_then_guard cg=pow2_from8"]["metrics"]["num_graphs"] == 6  # 8, 16, ..., 256


def test_schedule_sees_the_declared_policy_through_its_option_and_the_environment(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "conf")
    r = runner.invoke(app, ["schedule", str(STATE), "--policy", "defer_then_guard", "--config-dir", str(folder),
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["policy"] == "defer_then_guard"
    monkeypatch.setenv(ENV_CONFIG_DIR, str(folder))
    r = runner.invoke(app, ["schedule", str(STATE), "--format", "json"])
    assert r.exit_code == 0, r.output
    decisions = {d["policy"]: d for d in json.loads(r.stdout)}
    assert list(decisions)[-1] == "defer_then_guard" and decisions["defer_then_guard"]["deferred"] == 3
    assert any(line.startswith("policy=defer_then_guard (plug-in") for line in plugin_help())
    assert any(line.startswith("cg=pow2_from8 (plug-in grid kind") for line in plugin_help())


@pytest.mark.e2e
def test_advise_sees_the_declared_policy(tmp_path):
    folder = _folder(tmp_path / "conf")
    r = runner.invoke(app, ["advise", "policy=defer_then_guard", "workload.num_requests=8", "--budget-graphs", "8",
                            "-n", "2", "--config-dir", str(folder), "--out", str(tmp_path / "adv"), "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads((tmp_path / "adv" / "advise.json").read_text())
    assert "policy=defer_then_guard" in json.dumps(doc)


@pytest.mark.slow
def test_what_a_name_means_follows_the_folders_in_effect(tmp_path):
    eight = _folder(tmp_path / "a", "grids:\n  pow2_x: {_target_: cgbench_defer_then_guard.pow2_decode_kind, "
                                    "name: pow2_x, smallest: 8}\n")
    thirty_two = _folder(tmp_path / "b", "grids:\n  pow2_x: {_target_: cgbench_defer_then_guard.pow2_decode_kind, "
                                         "name: pow2_x, smallest: 32}\n")
    base = ["cg=pow2_x", "engine.max_requests=64", "workload.num_requests=8"]
    for folder, graphs in ((eight, 4), (thirty_two, 2), (eight, 4)):  # 8..64, 32..64
        with plugin_folders([folder]):
            assert run_point(load_config(base, config_dirs=[folder]))["metrics"]["num_graphs"] == graphs
    with pytest.raises(ConfigError, match="Could not find 'cg/pow2_x'"):
        load_config(base)  # no folder in effect: no such cg option


def test_nothing_is_loaded_until_named_and_built_in_configs_do_not_change(tmp_path):
    folder = _folder(tmp_path / "conf", DECLARED + "  broken: {_target_: cgbench_no_such_module.ARRIVAL}\n")
    small = ["workload.num_requests=8"]
    cfg = load_config(small, config_dirs=[folder])
    assert type(cfg) is BenchConfig and plugins.loaded_count() == 0
    with plugin_folders([folder]):
        assert _same_but_provenance(run_point(cfg), run_point(load_config(small)))
    with pytest.raises(ConfigError, match=r"plug-in 'broken' \(plugins.yaml in .*: _target_ "
                                          r"cgbench_no_such_module.ARRIVAL\): failed to load: ModuleNotFoundError"):
        load_config(["workload.arrival.process=broken"], config_dirs=[folder])


def _same_but_provenance(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in PROVENANCE} == {k: v for k, v in b.items() if k not in PROVENANCE}


def test_a_name_both_an_entry_point_and_a_declaration_give_is_refused(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "conf")
    _fake_entry_points(monkeypatch, {"grids": ("pow2_decode",)})
    line = one_error_line(runner.invoke(app, ["run", "workload.num_requests=8", "--config-dir", str(folder),
                                               "--out", str(tmp_path / "x.json")]))
    assert "plug-in 'pow2_decode' is declared twice" in line and f"plugins.yaml in {folder}" in line
    assert "entry point cgbench.grids: cgbench_defer_then_guard:GRID" in line
    assert not (tmp_path / "x.json").exists()


def test_a_bad_declaration_is_one_line_naming_the_file(tmp_path):
    folder = _folder(tmp_path / "conf", "policies:\n  mine: {_target_: cgbench_defer_then_guard.POLICY}\n")
    line = one_error_line(runner.invoke(app, ["run", "policy=mine", "--config-dir", str(folder),
                                               "--out", str(tmp_path / "x.json")]))
    assert line == (f"error: plug-in 'mine' (plugins.yaml in {folder}: _target_ cgbench_defer_then_guard.POLICY): "
                    "the entry's name is 'defer_then_guard', not the name plugins.yaml declares 'mine'")
    (folder / "plugins.yaml").write_text("policies:\n  mine: {_target_: cgbench_defer_then_guard.POLICY_}\n")
    line = one_error_line(runner.invoke(app, ["run", "policy=mine", "--config-dir", str(folder),
                                               "--out", str(tmp_path / "x.json")]))
    assert "_target_ cgbench_defer_then_guard.POLICY_): failed to load:" in line  # the edited file is re-read


def test_run_help_says_why_a_bad_plugins_yaml_lists_no_plugin(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "conf", "policies: [mine]\n")
    monkeypatch.setenv(ENV_CONFIG_DIR, str(folder))
    assert plugin_help() == [f"(none listed: {folder / 'plugins.yaml'}: policies: must map each plug-in's name to "
                             "{_target_: my_module.POLICY}, not a list)"]
