"""Smaller input classes of issue 44 (11): a file ``--out`` written as a folder (``newdir/``) is one
line, no file named ``newdir``; sweep values that the config reads as one (``seed=1,01``) are refused;
under the C locale a non-ASCII output path is written and printed, not a UnicodeDecodeError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import one_error_line

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.parametrize("command", [["run", "workload.num_requests=4"], ["report", "results/baseline"]])
def test_a_file_out_with_a_trailing_slash_is_refused_and_writes_nothing(tmp_path, command):
    target = tmp_path / "newdir"
    for spelling in (["--out", f"{target}/"], [f"--out={target}/"], ["-o", f"{target}/"]):
        one_error_line(runner.invoke(app, [*command, *spelling]), f"--out: {target}/ names a folder",
                       f"{target}/re")
        assert not target.exists()


def test_a_folder_out_keeps_its_slash(tmp_path):
    r = runner.invoke(app, ["sweep", "seed=1,2", "workload.num_requests=4", "--dry-run", "--out", f"{tmp_path}/sw/"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("axis", "shown"), [("seed=1,01", "'1' and '01'"), ("seed=3,2,3", "'3' and '3'"),
                                             ("engine.max_tokens=1024,1024.0", "'1024' and '1024.0'")])
def test_sweep_values_read_as_one_value_are_refused(tmp_path, axis, shown):
    one_error_line(runner.invoke(app, ["sweep", axis, "--dry-run", "--out", str(tmp_path / "sw")]),
                   f"{axis.partition('=')[0]}: the sweep values {shown} are the same value")
    assert not (tmp_path / "sw").exists()


def test_the_c_locale_writes_and_prints_a_non_ascii_output_path(tmp_path):
    out = tmp_path / "résultat µ.json"
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    p = subprocess.run([sys.executable, "-m", "cgbench", "run", "workload.num_requests=4", "--out", os.fsencode(out)],
                       capture_output=True, env=env, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert b"Traceback" not in p.stderr and b"UnicodeDecodeError" not in p.stderr
    assert out.is_file()
    assert b"result: " + os.fsencode(out) in p.stdout + p.stderr  # the path as it was given, byte for byte


def test_a_bad_file_the_command_never_reads_does_not_refuse_its_folder(tmp_path):
    (tmp_path / "workload").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "workload" / "broken.yaml").write_text("a: &a [1]\nb: *a\n")
    (tmp_path / "workload" / "small4.yaml").write_text("defaults:\n  - default\n  - _self_\nnum_requests: 4\n")
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "workload=small4", "--config-dir", str(tmp_path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    one_error_line(runner.invoke(app, ["run", "workload=broken", "--config-dir", str(tmp_path), "--out", str(out)]),
                   "broken.yaml:2", "alias")
    # named by another file's defaults list: it may be read, so it is refused
    (tmp_path / "model" / "uses.yaml").write_text("defaults:\n  - /workload/broken\n")
    one_error_line(runner.invoke(app, ["run", "workload.num_requests=4", "--config-dir", str(tmp_path),
                                       "--out", str(out)]), "broken.yaml:2", "alias")
