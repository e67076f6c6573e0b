"""The built wheel, installed into a fresh virtual environment WITHOUT torch or matplotlib and run
outside the checkout: the simulator runs, the packaged example trace resolves from the wheel, and
the optional features say how to install what they need (exit 2, one line, no traceback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e  # builds and installs wheels


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """(the venv's cgbench, a work folder outside the checkout, the environment to run it in)."""
    base = tmp_path_factory.mktemp("wheel")
    if shutil.which("git"):  # the venv sits inside somebody else's repository, as a user's often does
        _git(base, "init", "-q")
        (base / "theirs.txt").write_text("not cgbench\n")
        _git(base, "add", "theirs.txt")
        _git(base, "commit", "-qm", "theirs")
    wheels = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(wheels)],
                   check=True, capture_output=True, text=True)
    (wheel,) = wheels.glob("cgbench-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the core dependencies come from the configured index / local pip cache; no extras
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheel)],
                   check=True, capture_output=True, text=True)
    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CGBENCH_CONFIG_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv / "bin" / "cgbench", work, env


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo, check=True,
                   capture_output=True)


def _run(installed, *args: str) -> subprocess.CompletedProcess:
    exe, work, env = installed
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=work, env=env, timeout=120)


def test_the_venv_has_neither_torch_nor_matplotlib(installed):
    exe, work, env = installed
    code = ("import importlib.util as u, cgbench; "
            "print(u.find_spec('torch'), u.find_spec('matplotlib'), cgbench.__file__)")
    p = subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True, cwd=work, env=env,
                       check=True)
    none_torch, none_mpl, where = p.stdout.split()
    assert (none_torch, none_mpl) == ("None", "None") and str(ROOT) not in where


def test_run_and_the_packaged_trace(installed):
    exe, work, _ = installed
    p = _run(installed, "run", "workload.num_requests=20", "--format", "json")
    assert p.returncode == 0, p.stderr
    p = _run(installed, "run", "workload=trace", "--format", "json")
    assert p.returncode == 0, p.stderr
    assert '"trace": "small.jsonl"' in p.stdout and '"outcome": "completed"' in p.stdout
    assert len(list((work / "results" / "runs").glob("*.json"))) == 2



def test_the_packaged_production_traces_and_their_notice(installed):
    exe, work, env = installed
    for preset in ("azure_conv", "mooncake_conv"):
        p = _run(installed, "run", f"workload={preset}", "workload.window={first: 0, last: 49}", "--format", "json",
                 "--out", str(work / f"{preset}.json"))
        assert p.returncode == 0, p.stderr
        assert '"outcome": "completed"' in p.stdout and "note: trace " in p.stderr
    code = ("import cgbench, pathlib; "
            "print((pathlib.Path(cgbench.__file__).parent / 'examples/traces/NOTICE').read_text())")
    notice = subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True, cwd=work,
                            env=env, check=True).stdout
    assert "CC BY 4.0" in notice and "Apache License 2.0" in notice and "Splitwise" in notice


def test_optional_features_give_the_install_command(installed):
    exe, work, _ = installed
    result = next((work / "results" / "runs").glob("*.json"), None)
    if result is None:  # run alone: make one
        assert _run(installed, "run", "workload.num_requests=20").returncode == 0
        result = next((work / "results" / "runs").glob("*.json"))
    cases = [(["plot", str(result)], "pip install 'cgbench[plot]'"),
             (["run", "backend=torch", "model=tiny_hybrid"], "pip install 'cgbench[torch]'"),
             (["calibrate", "model=tiny_hybrid", "engine=small"], "pip install 'cgbench[torch]'")]
    for args, hint in cases:
        p = _run(installed, *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and hint in lines[0], (args, p.stderr)


def test_python_m_cgbench_and_py_typed(installed):
    exe, work, env = installed
    p = subprocess.run([str(exe.parent / "python"), "-m", "cgbench", "run", "--help"], capture_output=True,
                       text=True, cwd=work, env=env, timeout=120)
    assert p.returncode == 0 and "Usage: python -m cgbench run" in p.stdout, p.stdout + p.stderr
    code = "import cgbench, pathlib; print((pathlib.Path(cgbench.__file__).parent / 'py.typed').is_file())"
    p = subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True, cwd=work, env=env,
                       check=True)
    assert p.stdout.strip() == "True"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_installed_copy_records_its_version_and_no_commit(installed):
    """The venv lies inside a git repository with a commit: that commit is not cgbench's."""
    exe, work, env = installed
    p = _run(installed, "run", "workload.num_requests=20", "--out", "prov.json")
    assert p.returncode == 0, p.stderr
    doc = json.loads((work / "prov.json").read_text())
    code = "import importlib.metadata as m; print(m.version('cgbench'))"
    version = subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True, cwd=work,
                             env=env, check=True).stdout.strip()
    assert (doc["git_sha"], doc["git_dirty"], doc["git_diff_hash"]) == (None, None, None)
    assert doc["cgbench_version"] == version


def test_the_schemas_ship_in_the_wheel(installed):
    """`cgbench schema` from the wheel (no jsonschema installed) prints the committed files."""
    for kind in ("result", "sweep", "advise", "state"):
        p = _run(installed, "schema", kind)
        assert p.returncode == 0, p.stderr
        assert p.stdout == (ROOT / "cgbench" / "schemas" / f"{kind}.schema.json").read_text(encoding="utf-8")


def test_the_report_renders_from_the_wheel(installed):
    """`cgbench report` from the wheel: its style sheet and script are package data; without matplotlib
    the page holds every table and names the figures left out with the wheel's install command."""
    exe, work, _ = installed
    assert _run(installed, "run", "workload.num_requests=20", "--out", "for_report.json").returncode == 0
    p = _run(installed, "report", "for_report.json", "-o", "report.html")
    assert p.returncode == 0, p.stderr
    assert "pip install 'cgbench[plot]'" in p.stderr
    html = (work / "report.html").read_text(encoding="utf-8")
    css = (ROOT / "cgbench" / "cli" / "report_assets" / "report.css").read_text(encoding="utf-8")
    js = (ROOT / "cgbench" / "cli" / "report_assets" / "report.js").read_text(encoding="utf-8")
    assert css in html and js in html and "figure(s) not drawn" in html and "<table" in html


def test_the_guides_ship_in_the_wheel_and_the_licence_in_its_metadata(installed):
    """Help and errors say "see cgbench docs TOPIC": that works from the wheel, outside the checkout."""
    exe, work, env = installed
    p = _run(installed, "docs", "sweeps", "--path")
    assert p.returncode == 0, p.stderr
    path = Path(p.stdout.strip())
    assert path.is_file() and str(ROOT) not in str(path)
    assert path.read_text() == (ROOT / "docs" / "sweeps.md").read_text()
    code = ("import importlib.metadata as m; d = m.distribution('cgbench'); "
            "print(d.metadata['License-Expression']); print(any(f.name == 'LICENSE' for f in d.files))")
    meta = subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True, cwd=work, env=env,
                          check=True)
    assert meta.stdout.split() == ["Apache-2.0", "True"]
