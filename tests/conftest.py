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
