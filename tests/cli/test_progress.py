"""Progress of the long commands (``advise``, ``run --sensitivity``, ``sweep``): on a terminal a bar with
the time left, in a log a plain line with done / total and the time left whenever the log would stay
quiet for a while, always on stderr: ``--format json`` stdout stays one JSON document."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

import cgbench.cli.progress as progress_module
from cgbench.cli.app import app
from cgbench.cli.progress import ProgressReport, duration_text

runner = CliRunner()
LINE = re.compile(r"^(?P<what>[\w -]+): (?P<stage>[\w -]+) (?P<done>\d+)/(?P<total>\d+), (?P<elapsed>[\dhms ]+) "
                  r"elapsed(, about (?P<left>[\dhms ]+) left)?$")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("seconds,text", [(0, "0 s"), (41.6, "42 s"), (59.4, "59 s"), (185, "3 m 05 s"),
                                          (3600 + 125, "1 h 02 m"), (-3, "0 s")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration_text(seconds) == text


def test_the_time_left_is_the_stage_pace_times_what_is_left():
    clock = Clock()
    report = ProgressReport("advise", console=Console(file=io.StringIO()), clock=clock)
    report.stage("candidates", 10)
    assert report.left_s() is None and report.line() == "advise: candidates 0/10, 0 s elapsed"
    clock.t += 30
    report.advance(3)
    assert report.left_s() == pytest.approx(70.0)
    assert report.line() == "advise: candidates 3/10, 30 s elapsed, about 1 m 10 s left"
    clock.t += 10
    report.stage("robustness", 2)  # a new stage keeps the elapsed time, not the pace
    clock.t += 5
    report.update(1, 2)
    assert report.line() == "advise: robustness 1/2, 45 s elapsed, about 5 s left"
    report.update(3, 8)  # a total that grew as the work was found
    assert report.left_s() == pytest.approx(5 / 3 * 5)


def test_off_a_terminal_a_line_comes_whenever_the_log_would_stay_quiet():
    buf = io.StringIO()
    with ProgressReport("run --sensitivity", console=Console(file=buf, force_terminal=False), every_s=0.05) as p:
        p.stage("pricing", 4)
        for _ in range(4):
            time.sleep(0.12)
            p.advance()
    lines = buf.getvalue().splitlines()
    assert len(lines) >= 3, lines
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert {m["what"] for m in parsed} == {"run --sensitivity"} and {m["total"] for m in parsed} == {"4"}
    assert any(m["left"] for m in parsed)  # once an item is done
    assert [int(m["done"]) for m in parsed] == sorted(int(m["done"]) for m in parsed)


def test_a_command_that_prints_its_own_lines_gets_no_heartbeat_between_them():
    buf = io.StringIO()
    with ProgressReport("sweep s", console=Console(file=buf, force_terminal=False), every_s=0.2) as p:
        p.stage("points", 6)
        for i in range(6):
            time.sleep(0.03)
            p.advance()
            p.note(f"[{i + 1}/6] point")
    assert buf.getvalue().splitlines() == [f"[{i}/6] point" for i in range(1, 7)]


def test_nothing_is_printed_off_a_terminal_by_a_quick_command():
    buf = io.StringIO()
    with ProgressReport("advise", console=Console(file=buf, force_terminal=False), every_s=5) as p:
        p.stage("profile", 1)
        p.advance()
    assert buf.getvalue() == ""


def test_on_a_terminal_a_bar_shows_the_stage_count_and_time_left():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with ProgressReport("advise", console=console) as p:
        p.stage("candidates", 5)
        p.advance(2)
        p._bar.refresh()
        shown = buf.getvalue()
    assert "advise candidates" in shown and "2/5" in shown and "left" in shown
    assert re.search(r"\d+:\d\d:\d\d", shown)  # elapsed and remaining, Rich's clock format


def _progress_lines(stderr: str, what: str) -> list[re.Match]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m and m["what"] == what]


@pytest.mark.slow  # an advise search and a sensitivity analysis
def test_advise_and_run_sensitivity_report_progress_on_stderr_and_keep_json_stdout_clean(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_module, "EVERY_S", 0.01)
    r = runner.invoke(app, ["advise", "model=hybrid", "policy=budget", "workload.num_requests=48",
                            "--budget-graphs", "6", "--candidates", "4", "--format", "json", "--sensitivity",
                            "--out", str(tmp_path / "advise")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recommended"] is not None  # stdout: the one document
    lines = _progress_lines(r.stderr, "advise")
    assert lines and {m["stage"] for m in lines} <= {"profile", "baselines", "candidates", "refinement", "robustness",
                                                     "shapes of the best explicit list", "eager-free refinement",
                                                     "shapes of the eager-free list"}
    assert any(m["left"] for m in lines)
    assert _progress_lines(r.stderr, "advise --sensitivity")
    r = runner.invoke(app, ["run", "model=hybrid", "workload.num_requests=48", "policy=defer", "--sensitivity",
                            "--format", "json", "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.stdout)) == {"labels", "warnings", "metrics", "result"}  # the one document
    assert "sensitivity" in json.loads((tmp_path / "r.json").read_text())
    lines = _progress_lines(r.stderr, "run --sensitivity")
    assert lines and all(int(m["done"]) <= int(m["total"]) for m in lines) and any(m["left"] for m in lines)


@pytest.mark.slow  # a two-point sweep
def test_a_piped_sweep_says_the_time_left_with_each_point(tmp_path):
    r = runner.invoke(app, ["sweep", "model=hybrid", "policy=defer,megatron", "workload.num_requests=24",
                            "--format", "json", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)
    points = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert len(points) == 2 and points[0].startswith("[1/2]") and re.search(r", about \d+ s left$", points[0])
    assert points[1].startswith("[2/2]") and points[1].endswith("s left")  # 0 s left
