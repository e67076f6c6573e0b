"""Readers bounded in time as well as bytes (issue 44 class 4): a small deeply nested YAML is refused
by its depth before PyYAML's quadratic cost (plugins.yaml, a user config tree's file, a YAML the
commands read through ``safeio.load_yaml_text``); a gzip'd trace of blank lines meets the plain
file's line bound; a defaults list that includes itself is one line naming the cycle."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.paths import check_option_file
from cgbench.errors import ConfigError
from cgbench.safeio import MAX_DEPTH, load_yaml_text
from tests.helpers import one_error_line

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 20_000 + "]" * 20_000
runner = CliRunner()


@pytest.mark.parametrize("text", [DEEP, "a: " + "{b: " * 5_000 + "}" * 5_000, "- " * 20_000 + "x",
                                  "a:\n" + "".join("  " * i + "- \n" for i in range(1, 200))])
def test_a_deep_yaml_is_refused_by_its_depth_in_well_under_a_second(tmp_path, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text + "\n")
    for read in (lambda: check_option_file(path), lambda: load_yaml_text(text, str(path))):
        t0 = time.perf_counter()
        with pytest.raises(ConfigError, match=rf"^{path}:\d+: nested more than {MAX_DEPTH} levels deep$"):
            read()
        assert time.perf_counter() - t0 < 1.0


def test_brackets_in_quotes_and_comments_are_not_nesting():
    text = "a: '" + "[" * 100 + "'\nb: \"" + "{" * 100 + "\"  # " + "[" * 100 + "\nc: [[1]]\n"
    assert load_yaml_text(text, "x.yaml") == {"a": "[" * 100, "b": "{" * 100, "c": [[1]]}


def test_a_deep_plugins_yaml_is_refused_in_under_a_second_whole_command(tmp_path):
    (tmp_path / "plugins.yaml").write_text("policies: " + DEEP + "\n")
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(tmp_path)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "cgbench", "run", "policy=mine", "--out", str(tmp_path / "x.json")],
                       capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    took = time.perf_counter() - t0
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'plugins.yaml'}:1: nested more than {MAX_DEPTH} levels deep"], p.stderr[-2000:]
    assert took < 15  # the process's start included; the reader's own share is tested above (< 1 s)


def test_a_gzipd_trace_of_blank_lines_meets_the_plain_files_line_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("CGBENCH_MEMORY_LIMIT_GB", "0.05")  # 35,791 requests of 1,500 bytes
    blank = b"\n" * 200_000
    plain, packed = tmp_path / "blank.jsonl", tmp_path / "blank.jsonl.gz"
    plain.write_bytes(blank)
    packed.write_bytes(gzip.compress(blank))
    for trace in (plain, packed):
        one_error_line(runner.invoke(app, ["run", f"workload.trace={trace}", "--out", str(tmp_path / "x.json")]),
                       "requests need about", "more than the", "CGBENCH_MEMORY_LIMIT_GB")


@pytest.mark.parametrize(("files", "chosen", "cycle"), [
    ({"mine": "defaults:\n  - mine\n  - _self_\nhidden_size: 64\n"}, "mine", "model/mine.yaml -> model/mine.yaml"),
    ({"a": "defaults:\n  - b\n", "b": "defaults:\n  - a\n"}, "a", "model/a.yaml -> model/b.yaml -> model/a.yaml"),
])
def test_a_defaults_list_that_includes_itself_is_one_line_naming_the_cycle(tmp_path, files, chosen, cycle):
    (tmp_path / "model").mkdir()
    for name, text in files.items():
        (tmp_path / "model" / f"{name}.yaml").write_text(text)
    one_error_line(runner.invoke(app, ["run", f"model={chosen}", "--config-dir", str(tmp_path),
                                       "--out", str(tmp_path / "x.json")]), "a defaults list includes itself", cycle)
