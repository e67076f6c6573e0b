"""The out-of-tree plug-in of ``examples/plugins/defer_then_guard``, end to end: cgbench's wheel and
the plug-in's wheel installed into a fresh virtual environment, run outside the checkout, and
``run``, ``sweep`` (in worker processes too), ``schedule`` and ``advise`` all see the plug-in policy
(and ``run`` its grid family and arrival process) through its entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "plugins" / "defer_then_guard"
STATE = ROOT / "tests" / "states" / "11_2_round1.json"
pytestmark = pytest.mark.e2e  # builds and installs wheels


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """(the venv's cgbench, a work folder outside the checkout, the environment to run it in)."""
    base = tmp_path_factory.mktemp("plugin")
    wheels = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), str(PLUGIN), "-w",
                    str(wheels)], check=True, capture_output=True, text=True)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the two wheels go into the venv itself; cgbench's own dependencies are this interpreter's,
    # reached through a path file placed after the venv's packages (so the wheel's cgbench wins)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                    *map(str, sorted(wheels.glob("*.whl")))], check=True, capture_output=True, text=True)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "zz_shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CGBENCH_CONFIG_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv / "bin" / "cgbench", work, env


def _run(installed, *args: str) -> subprocess.CompletedProcess:
    exe, work, env = installed
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=work, env=env, timeout=300)


def test_the_venv_runs_the_wheels_not_the_checkout(installed):
    exe, work, env = installed
    code = "import cgbench, cgbench_defer_then_guard as p; print(cgbench.__file__); print(p.__file__)"
    p = subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True, cwd=work, env=env,
                       check=True)
    assert str(ROOT) not in p.stdout and p.stdout.count("site-packages") == 2, p.stdout


def test_run_lists_and_runs_the_plugin_policy_and_grid(installed):
    exe, work, _ = installed
    p = _run(installed, "run", "-h")
    assert p.returncode == 0 and "policy.defer_then_guard.max_defers" in " ".join(p.stdout.split()), p.stdout
    out = work / "run.json"
    p = _run(installed, "run", "policy=defer_then_guard", "policy.defer_then_guard.max_defers=2", "cg=pow2_decode",
             "workload=chat", "workload.num_requests=40", "--out", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["policy"]["defer_then_guard"]["max_defers"] == 2
    assert doc["config"]["cg"]["kind"] == "pow2_decode" and doc["metrics"]["num_graphs"] == 9  # 256 .. 1
    p = _run(installed, "run", "workload.arrival.process=ramp", "workload.arrival.rate=100", "workload.num_requests=40",
             "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["metrics"]["requests"]["completed"] == 40


def test_a_sweep_over_the_plugin_in_worker_processes(installed):
    exe, work, _ = installed
    out = work / "sweep"
    p = _run(installed, "sweep", "policy=wait_timeout,defer_then_guard", "workload=chat",
             "workload.num_requests=40", "--jobs", "2", "--out", str(out))
    assert p.returncode == 0, p.stderr
    index = json.loads((out / "sweep.json").read_text())
    assert [pt["status"] for pt in index["points"]] == ["done", "done"]
    policies = sorted(json.loads((out / pt["file"]).read_text())["config"]["policy"]["name"]
                      for pt in index["points"])
    assert policies == ["defer_then_guard", "wait_timeout"]


def test_schedule_replays_the_plugin_policy(installed):
    p = _run(installed, "schedule", str(STATE), "--format", "json")
    assert p.returncode == 0, p.stderr
    decisions = {d["policy"]: d for d in json.loads(p.stdout)}
    assert "defer_then_guard" in decisions and decisions["defer_then_guard"]["deferred"] == 3


def test_advise_runs_with_the_plugin_policy(installed):
    exe, work, _ = installed
    out = work / "adv"
    p = _run(installed, "advise", "policy=defer_then_guard", "workload.num_requests=8", "--budget-graphs", "8",
             "-n", "2", "--out", str(out))
    assert p.returncode in (0, 1), p.stderr
    assert "policy=defer_then_guard" in (out / "advise.json").read_text()
