"""Shared helpers: small configs and engines built without Hydra."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs the property tests with a fixed derivation of examples (reproducible verdicts); local runs
# explore new examples each time (and keep failures in .hypothesis/ to replay them).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("COLUMNS", "200")
# torch on a 2-core machine shared with other work: one thread avoids parallel regions stalling
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _isolate_cwd(tmp_path, monkeypatch):
    """Every test runs in its own folder so default result paths never touch the repo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(ROOT / "conf"))


# The edit-run loop (`make test-fast`) leaves these out: the real torch engine and its kernels, the
# launcher and signal tests that start processes, the deep property searches, the hostile-input
# corpus and the end-to-end analysis tests. `make test` and
# CI run everything.
SLOW_MODULES = {"test_models", "test_kernels", "test_torch_backend", "test_torch_runner", "test_torch_graphs_logic",
                "test_calibration", "test_gpu", "test_interrupt", "test_hostile_inputs", "test_reader_properties",
                "test_slurm", "test_wheel", "test_readme",
                # end-to-end analysis (sweeps, figures, the grid search): run by `make test`
                "test_plots", "test_advise", "test_sweep", "test_sweep_reliability",
                # oracle comparisons over random configs, like the fast engine's equality test
                "test_metrics_columns", "test_kv_fast_path"}
SLOW_NAME_PARTS = ("launcher", "killed", "ctrl_c", "equals_oracle", "invariants", "wheel", "readme")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if module in SLOW_MODULES or any(part in item.name for part in SLOW_NAME_PARTS):
            item.add_marker(pytest.mark.slow)


def _strict_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


@pytest.fixture(autouse=True)
def _results_are_strict_json(tmp_path):
    """After every test, every JSON file under its tmp folder parses with a strict parser (no NaN,
    Infinity or -Infinity). Inputs a test writes on purpose as hostile live under ``hostile_inputs/``;
    files that are not JSON at all (a test's broken fixture) are not results and are skipped."""
    import json

    yield
    for path in tmp_path.rglob("*.json"):
        if "hostile_inputs" in path.parts or not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
            json.loads(text)  # lenient: is it JSON at all?
        except (ValueError, OSError, RecursionError):
            continue
        try:
            json.loads(text, parse_constant=_strict_constant)
        except ValueError as e:
            pytest.fail(f"{path}: {e}: a file written during the test is not strict JSON")
