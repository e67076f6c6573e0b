"""`cgbench plot`: valid PNG files of the intended figures, notes for skipped ones, exit 2 on bad input."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.analysis.plots import DPI, pareto_front, sweep_rows
from cgbench.analysis.sweep import plan_sweep, run_sweep
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.document import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()


def _app() -> typer.Typer:
    from cgbench.cli.app import app

    return app


def plot(*args) -> object:
    return runner.invoke(_app(), ["plot", *map(str, args)])


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) read from the PNG header itself: the signature, then the IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plots") / "s"
    run_sweep(plan_sweep(["model=transformer,hybrid", "policy=budget,megatron", "cg=sparse", "workload=small"],
                         out_dir=out))
    return out


def test_sweep_plots_are_the_two_figures(sweep_dir, tmp_path):
    r = plot(sweep_dir, "--out", tmp_path / "pics")
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.split()]
    assert [f.name for f in files] == ["sweep_eager_wait.png", "sweep_pareto.png"]
    models = 2  # one row of (eager fraction, longest wait) panels per model
    assert png_size(files[0]) == (round(12 * DPI), round(3.4 * models * DPI))
    assert png_size(files[1]) == (round(6.2 * 2 * DPI), round(4.6 * DPI))  # TTFT and throughput panels
    for f in files:
        assert 10_000 < f.stat().st_size < 2_000_000


def test_sweep_plots_default_to_the_sweep_folder(sweep_dir):
    r = plot(sweep_dir)
    assert r.exit_code == 0, r.output
    assert all(Path(p).parent == sweep_dir / "plots" for p in r.stdout.split())


def test_repeats_are_averaged_per_policy_and_grid(tmp_path):
    axes = ["model=hybrid", "policy=budget", "cg=sparse", "workload=small"]
    out = tmp_path / "rep"
    outcome = run_sweep(plan_sweep(axes, repeat=3, out_dir=out))
    rows = sweep_rows(out)
    assert len(rows) == 1 and (rows[0].model, rows[0].policy, rows[0].grid) == ("hybrid", "budget", "sparse")
    docs = [json.loads((out / r.point.file).read_text())["metrics"] for r in outcome.results]
    assert rows[0].metrics["eager_step_fraction"] == pytest.approx(
        sum(m["eager_step_fraction"] for m in docs) / 3)
    assert rows[0].metrics["ttft_ms.p99"] == pytest.approx(sum(m["ttft_ms"]["p99"] for m in docs) / 3)


def _run(tmp_path: Path, **kw) -> Path:
    ovr = ["model=hybrid", "cg=sparse", "workload=small"]
    return write_json_atomic(tmp_path / "run.json", run_point(load_config(ovr), ovr, **kw))


def test_a_traced_run_gets_summary_timeline_and_queue_wait_histogram(tmp_path):
    path = _run(tmp_path, trace=True, requests=True)
    r = plot(path, "--out", tmp_path / "pics")
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.split()]
    assert [f.name for f in files] == ["run_summary.png", "run_timeline.png", "run_queue_wait.png"]
    for f in files:
        w, h = png_size(f)
        assert w >= 800 and h >= 400 and f.stat().st_size > 10_000
    assert "note" not in r.stderr


def test_a_plain_run_gets_its_summary_and_notes_for_the_rest(tmp_path):
    r = plot(_run(tmp_path))
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.split()]
    assert [f.name for f in files] == ["run_summary.png"] and files[0].parent == tmp_path / "plots"
    png_size(files[0])
    assert "--trace" in r.stderr and "--requests" in r.stderr


@pytest.mark.parametrize("make,needle", [
    (lambda d: d / "missing", "no such file"),
    (lambda d: d, "no sweep.json"),
    (lambda d: (d / "x.json").write_text("{oops") and d / "x.json", "not valid JSON"),
    (lambda d: (d / "x.json").write_text('{"a": 1}') and d / "x.json", "not a cgbench result"),
])
def test_bad_input_exits_2(tmp_path, make, needle):
    target = make(tmp_path)
    r = plot(target)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


def test_importing_the_commands_does_not_import_matplotlib_or_hydra():
    code = ("import sys; import cgbench.cli.app, cgbench.cli.sweep; "
            "print(sorted(m for m in ('matplotlib', 'hydra', 'cgbench.analysis.plots', 'cgbench.analysis.sweep') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------- Pareto


def _front_by_sweep_line(points: list[tuple[float, float]], maximize_y: bool) -> set[int]:
    """Independent oracle: scan x ascending; a point is on the front if its y beats every y seen at a
    strictly smaller x and is the best y at its own x (ties in both coordinates all stay)."""
    sign = -1.0 if maximize_y else 1.0
    best_before = float("inf")
    out: set[int] = set()
    xs = sorted({p[0] for p in points})
    for x in xs:
        group = [i for i, p in enumerate(points) if p[0] == x]
        best_here = min(sign * points[i][1] for i in group)
        if best_here < best_before:
            out |= {i for i in group if sign * points[i][1] == best_here}
        best_before = min(best_before, best_here)
    return out


coords = st.integers(min_value=0, max_value=6).map(float)


@given(st.lists(st.tuples(coords, coords), min_size=1, max_size=12), st.booleans())
def test_pareto_front_matches_a_sweep_line_oracle(points, maximize):
    assert set(pareto_front(points, maximize)) == _front_by_sweep_line(points, maximize)
