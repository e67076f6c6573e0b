"""How a sweep writes its points: each point file compact (one line, the same document on reading as
``run_point`` gives), and the folder's stale temporary files removed once per sweep, not by a scan
of the whole folder at every point's write (which made a sweep quadratic in its points)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cgbench import safeio
from cgbench.analysis.sweep.run import INDEX_NAME, plan_sweep, run_sweep
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from tests.helpers import load_script

pytestmark = pytest.mark.slow  # runs sweeps (in process)

AXES = ["seed=range(0,6)", "workload=small", "workload.num_requests=8"]


def _stale(path: Path) -> Path:
    path.write_text('{"half": ')
    os.utime(path, (time.time() - 60, time.time() - 60))
    return path


def test_point_files_are_compact_and_read_as_the_document_run_point_gives(tmp_path):
    plan = plan_sweep(["seed=range(0,2)", *AXES[1:]], out_dir=tmp_path / "s")
    outcome = run_sweep(plan)
    assert outcome.count("done") == 2
    for p in plan.points:
        text = (tmp_path / "s" / p.file).read_text()
        assert text.count("\n") == 1 and text.endswith("}\n")  # one line
        doc, alone = json.loads(text), run_point(load_config(list(p.overrides)), list(p.overrides))
        for d in (doc, alone):
            del d["created_at"]
        assert doc == alone
        assert json.dumps(doc, indent=1) == json.dumps(alone, indent=1)  # key order too
    assert (tmp_path / "s" / INDEX_NAME).read_text().startswith("{\n ")  # the index stays indented


def _sweep_scans(out: Path, points: int, monkeypatch) -> tuple[list[Path], object]:
    """Run a sweep of ``points`` tiny points into ``out``; the scans of ``out`` it made, and its outcome."""
    plan = plan_sweep([f"seed=range(0,{points})", *AXES[1:]], out_dir=out)
    scans: list[Path] = []
    real_scandir = os.scandir

    def counting_scandir(path):
        if Path(path) == out:
            scans.append(Path(path))
        return real_scandir(path)

    monkeypatch.setattr(safeio.os, "scandir", counting_scandir)
    outcome = run_sweep(plan)
    monkeypatch.undo()
    assert outcome.count("done") == points
    return scans, plan


def test_stale_temporary_files_are_removed_once_per_sweep(tmp_path, monkeypatch):
    out = tmp_path / "s"
    out.mkdir()
    plan = plan_sweep(AXES, out_dir=out)
    killed_point = _stale(out / f".{plan.points[0].file}.abcd1234.tmp")  # an older cgbench's temp of a point
    killed_other = _stale(out / ".20260101-000000_x.json.cgbench-abcd1234.tmp")  # any cgbench temp
    foreign = _stale(out / ".notes.txt.abcd1234.tmp")  # not cgbench's, not a point's: kept
    scans_of_six, _ = _sweep_scans(out, 6, monkeypatch)
    assert not killed_point.exists() and not killed_other.exists() and foreign.exists()
    # the folder is scanned as often for 2 points as for 6: never once per point
    (tmp_path / "t").mkdir()
    scans_of_two, _ = _sweep_scans(tmp_path / "t", 2, monkeypatch)
    assert len(scans_of_six) == len(scans_of_two) < 6


def test_the_baseline_stays_indented_when_make_baseline_regenerates_it(tmp_path):
    """``make baseline`` indents the compact point files (scripts/indent_results.py): a compact file
    becomes exactly ``json.dumps(indent=1)`` of its document, and the committed reference is
    already in that form (so regenerating it moves only the values that changed)."""
    indent_results = load_script("indent_results")
    plan = plan_sweep(["seed=range(0,2)", *AXES[1:]], out_dir=tmp_path / "s")
    run_sweep(plan)
    compact = {p.file: (tmp_path / "s" / p.file).read_text() for p in plan.points}
    assert indent_results.indent_folder(tmp_path / "s") == len(plan.points) + 1  # and sweep.json
    for name, text in compact.items():
        assert (tmp_path / "s" / name).read_text() == json.dumps(json.loads(text), indent=1) + "\n"
    baseline = Path(__file__).resolve().parents[2] / "results" / "baseline"
    for path in sorted(baseline.glob("*.json")):
        assert path.read_text() == json.dumps(json.loads(path.read_text()), indent=1) + "\n", path.name


def test_a_sweep_in_process_imports_no_worker_pool(tmp_path):
    """``--jobs 1`` runs its points in the sweep's own process: the pool's modules (multiprocessing,
    concurrent.futures, ctypes for the workers' parent-death signal) and socket (the lock's host name)
    are not imported for it."""
    import subprocess
    import sys

    code = ("import sys; from cgbench.cli.entry import main; sys.argv = ['cgbench', 'sweep', 'seed=range(0,2)', "
            "'workload=small', 'workload.num_requests=8', '--out', 'out', '--format', 'csv']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in ('multiprocessing', 'concurrent.futures', 'socket', 'ctypes.util') "
            "if m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "[]"
    assert len(list((tmp_path / "out").glob("seed-*.json"))) == 2
