"""The plug-in boundary (``plugin_source.foreign``, ``at_most``): whatever a plug-in raises but
Ctrl-C, at its import, its build, its draws or its policy's answers mid-run, is its one line, exit 2;
what it returns is read only as far as its contract needs and checked (``tests.hostile_plugins``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import one_error_line
from tests.plugin_fixtures import hostile_plugins  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SMALL = ["workload.num_requests=8"]


@pytest.mark.parametrize(("args", "needles"), [
    (["policy=exiting"], ("plug-in 'exiting'", "build failed: SystemExit: 3")),
    (["policy=custom"], ("plug-in 'custom'", "build failed: Custom: no Exception at all")),
    (["policy=generator_exit"], ("plug-in 'generator_exit'", "build failed: GeneratorExit")),
    (["policy=exits_on_import"], ("plug-in 'exits_on_import'", "failed to load: SystemExit: 5")),
    (["policy=answers_badly"], ("plug-in 'answers_badly'", "forward_guard returned 'no', not a bool")),
    (["policy=exits_mid_run"], ("plug-in 'exits_mid_run'", "forward_guard failed: SystemExit: 4")),
    (["workload.arrival.process=strings", "workload.arrival.rate=5"],
     ("plug-in 'strings'", "drew '0.5' (a str): arrival times must be numbers")),
    (["workload.arrival.process=endless", "workload.arrival.rate=5"], ("plug-in 'endless'", "drew more than")),
    (["workload.arrival.process=short", "workload.arrival.rate=5"], ("plug-in 'short'", "values, drew")),
    (["workload.arrival.process=draw_exits", "workload.arrival.rate=5"], ("draw failed: SystemExit: 3",)),
    (["workload.prompt_len.dist=endless_lengths"], ("plug-in 'endless_lengths'", "drew more than")),
    (["cg=endless_grid"], ("plug-in 'endless_grid'", "more than the 100,000-graph limit")),
    (["cg=string_grid"], ("plug-in 'string_grid'", "not a graph (three integers")),
    (["cg=exiting_estimate"], ("plug-in 'exiting_estimate'", "estimate failed: SystemExit: 3")),
])
@pytest.mark.usefixtures("hostile_plugins")
def test_whatever_a_plugin_raises_or_returns_is_its_one_line(tmp_path, args, needles):
    t0 = time.perf_counter()
    out = tmp_path / "x.json"
    one_error_line(runner.invoke(app, ["run", *SMALL, *args, "--out", str(out)]), *needles)
    assert not out.exists()
    assert time.perf_counter() - t0 < 20  # an endless iterator is not read in full


def test_the_boundary_lets_ctrl_c_through_and_reads_an_endless_iterator_once_past_its_count():
    from cgbench.config.registry.plugin_source import PluginError, at_most, foreign

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        foreign("plug-in 'x'", "build failed", interrupted)
    import itertools

    assert at_most("plug-in 'x'", "draw failed", itertools.count(), 3) == [0, 1, 2, 3]
    with pytest.raises(PluginError, match="returned a str, not a list"):
        at_most("plug-in 'x'", "draw failed", "abc", 3)
    with pytest.raises(PluginError, match="draw failed: TypeError"):
        at_most("plug-in 'x'", "draw failed", 5, 3)


@pytest.mark.parametrize("node", ["{_target_: tests.hostile_plugins.exits_on_import.POLICY}",
                                  "{_target_: tests.hostile_plugins._exits, options: 1}"])
def test_run_help_with_a_broken_plugin_declared_still_prints_help(tmp_path, node):
    (tmp_path / "plugins.yaml").write_text(f"policies:\n  exiting: {node}\n")
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-m", "cgbench", "run", "--help"], capture_output=True, text=True, env=env,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 0, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Usage:" in p.stdout and "Traceback" not in p.stderr
    assert "policy=exiting (plug-in, broken:" in p.stdout
