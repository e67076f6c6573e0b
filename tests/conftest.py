"""Shared helpers: small configs and engines built without Hydra."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis profiles, chosen with hypothesis's own option `--hypothesis-profile=quick|dev|ci|deep`;
# without it, `ci` where CI is set, else `dev`. Every profile drops the per-example deadline (a
# simulation's time depends on the machine's load, not on the code). `quick` (make test, make
# test-fast) runs every property with at most QUICK_EXAMPLES examples; `dev` explores new examples on
# every run and keeps failures in .hypothesis/ to replay them; `ci` (make test-all under CI) derives
# its examples from each test's name (reproducible verdicts); `deep` raises the engine-equality and
# invariant properties (those that stretch: tests.helpers.examples) to 4,000 examples each.
QUICK_EXAMPLES = 20
DEEP_EXAMPLES = 4000
settings.register_profile("quick", deadline=None, max_examples=QUICK_EXAMPLES)
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("deep", deadline=None, max_examples=DEEP_EXAMPLES)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("COLUMNS", "200")
# the commands' kept compositions (cgbench.config.compose_cache): one folder per test process, never the user's
os.environ["CGBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="cgbench-test-cache-")
# torch on a 2-core machine shared with other work: one thread avoids parallel regions stalling
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _isolate_cwd(tmp_path, monkeypatch):
    """Every test runs in its own folder so default result paths never touch the repo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(ROOT / "conf"))


@pytest.fixture(autouse=True)
def _no_progress_heartbeat(monkeypatch):
    """A command's progress line off a terminal comes after 10 s without output: on a loaded machine a
    test's advise or sweep can take that long, and the line would join a stderr the test reads whole.
    The progress tests (tests/cli/test_progress.py) set their own interval."""
    import cgbench.cli.progress

    monkeypatch.setattr(cgbench.cli.progress, "EVERY_S", 3600.0)


# Three tiers, by marker (a module's `pytestmark`, or a test's own mark): unmarked tests are the edit-run
# loop (`make test-fast`); `slow` ones (whole commands, processes, property searches, or any test over a
# quarter of a second on a 2-core machine) join them
# in `make test`; `e2e` ones (documents and figures regenerated, wheels installed, a browser, the CLI
# fuzzer, fault injection, signals) run only in `make test-all`, which CI runs.


def _strict_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


@pytest.fixture(autouse=True)
def _results_are_strict_json(tmp_path):
    """After every test, every JSON file under its tmp folder parses with a strict parser (no NaN,
    Infinity or -Infinity), and every result document, sweep index, advise report and state file
    among them (recognised by content) that claims the current ``schema_version`` validates against
    its schema in ``cgbench/schemas/``. Inputs a
    test writes on purpose as hostile (or as schema violations) live under ``hostile_inputs/``; files
    that are not JSON at all (a test's broken fixture) are not results and are skipped."""
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
            doc = json.loads(text, parse_constant=_strict_constant)
        except ValueError as e:
            pytest.fail(f"{path}: {e}: a file written during the test is not strict JSON")
        from cgbench.results.document import SCHEMA_VERSION
        from tests.helpers import schema_errors

        if isinstance(doc, dict) and doc.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            continue  # another version's document (a test of the loaders' version check) is not v1's to judge
        kind, errors = schema_errors(doc)
        if errors:
            shown = "\n  ".join(errors[:5])
            pytest.fail(f"{path}: a {kind} document that violates cgbench/schemas/{kind}.schema.json "
                        f"({len(errors)} errors):\n  {shown}")


def pytest_terminal_summary(terminalreporter) -> None:
    """One line: how many documents the schema check validated, by kind, and what it cost."""
    from tests.helpers import SCHEMA_TALLY

    if SCHEMA_TALLY:
        kinds = ", ".join(f"{k} {int(n)}" for k, n in sorted(SCHEMA_TALLY.items()) if k != "seconds")
        terminalreporter.write_line(f"schema-validated documents: {kinds} in {SCHEMA_TALLY['seconds']:.2f} s")
