"""The bad-input corpus (tests/inputs/corpus.py): every case exits 2 with one line ``error: ...``
naming the key or file, no traceback, leaves no file behind, and answers within a time and a memory
bound. Request-level problems are the documented exception: the request is failed with a reason and
the run goes on (exit 0). Bad inputs that need more than a command line (an environment variable, a
missing package, a user's config tree) follow the table."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.inputs.corpus import (
    CASES,
    SMALL,
    Case,
    files_under,
    folders_under,
    invoke_bounded,
    make_bad_files,
    run_in_child,
)

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    """The corpus's files, written once for every case: a refused command never touches them (each case
    checks that no file appeared, there or in its own folder)."""
    files, sock = make_bad_files(tmp_path_factory.mktemp("corpus") / "hostile_inputs")
    yield files
    sock.close()


def _argv(case: Case, files: dict[str, Path], tmp_path: Path) -> list[str]:
    argv = shlex.split(case.line.format(**{k: str(v) for k, v in files.items()}))
    if argv[0] in ("run", "sweep"):
        argv.insert(1, f"out_dir={tmp_path / 'results'}")
    return argv


def _invoke_bounded(argv: list[str]):
    """The CLI in process, under an alarm (a hang fails the case) and a peak-RSS growth bound."""
    r = invoke_bounded(runner, app, argv)
    return r.exit_code, r.stdout + r.stderr, r.stderr, r.exception


def _in_child(argv: list[str], cwd: Path):
    r = run_in_child(argv, cwd=cwd)
    return r.returncode, r.stdout + r.stderr, r.stderr, None


def _param(case: Case):
    return pytest.param(case, id=("child: " if case.child else "") + case.line[:70],
                        marks=[pytest.mark.e2e] if case.slow else [])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(case, bad_files, tmp_path):
    argv = _argv(case, bad_files, tmp_path)
    before = files_under(tmp_path, bad_files["markup"])
    folders = folders_under(tmp_path, bad_files["markup"])
    code, output, stderr, exception = _in_child(argv, tmp_path) if case.child else _invoke_bounded(argv)
    assert code == 2, (code, output[-2000:], exception)
    assert "Traceback" not in output
    err = stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: "), err
    for needle in case.needles:
        assert needle in err, (needle, err)
    assert files_under(tmp_path, bad_files["markup"]) == before, "a file was left behind"
    assert folders_under(tmp_path, bad_files["markup"]) == folders, "a folder was left behind"


def test_the_corpus_keeps_every_case_once():
    # 216 cases before the merge (66 bad-input, 95 + 8 hostile, 47 strict-CLI), two of them twice;
    # then 10 of explain and export
    in_process = [c.line for c in CASES if not c.child]
    in_child = [c.line for c in CASES if c.child]
    # issue 32 added 45 in process (10 outputs onto inputs, 3 stale/false results, 12 user files, 13 tracebacks,
    # 7 wrong exits and earlier fixes) and 3 in a child; explain and export added 10; MoE layers 5, rule sets 4,
    # prefix caching 9, issue 29's host profile, all-reduce algorithm, scan efficiency and padded-slot cost 8,
    # issue 28's engine.spec_acceptance 7, data parallelism 5, prefix caching on DP ranks 1, report 7;
    # issue 26's plugins.yaml 14; issue 37's slo.* bounds 3; issue 39's eviction policy and refusals 4;
    # issue 40's Megatron step logs 21; issue 44's plug-in boundary, Megatron ranges and bounded readers 19, the plot
    # of all-failed points, ranks, rates and length weights 4
    assert len(set(in_process)) == len(in_process) == 373 and len(set(in_child)) == len(in_child) == 11
    assert all(c.needles and all(c.needles) for c in CASES)


def test_request_level_problems_fail_the_request_and_the_run_goes_on(tmp_path):
    out = tmp_path / "r.json"
    trace = tmp_path / "t.jsonl"
    rows = [{"arrival_s": 0, "prompt_tokens": 3000, "output_tokens": 5},  # > max_sequence_length
            {"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 5000},  # output clamped to msl - prompt
            {"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 5}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["run", "workload=trace", f"workload.trace={trace}", "--out", str(out), "--requests"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    m = doc["metrics"]["requests"]
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["failed_by_reason"] == {"prompt_exceeds_max_sequence_length": 1}
    assert [q["generated"] for q in doc["requests"]] == [0, 2460, 5]


def test_empty_grid_with_gating_requested_runs_eager_and_says_so(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "cg=explicit", "cg.graphs=[]", "policy=megatron", SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads(out.read_text())["metrics"]
    assert m["gating_active"] is False and m["eager_steps_by_reason"] == {"no_graphs": m["steps"]}


def test_environment_config_dir_that_does_not_exist_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(tmp_path / "missing"))
    r = runner.invoke(app, ["run", f"out_dir={tmp_path}", SMALL])
    assert r.exit_code == 2 and r.stderr.strip() == f"error: CGBENCH_CONFIG_DIR: {tmp_path / 'missing'}: no such folder"


def test_a_user_file_that_a_shipped_option_would_shadow_is_refused(tmp_path, monkeypatch):
    own = tmp_path / "conf"
    (own / "model").mkdir(parents=True)
    (own / "model" / "hybrid.yaml").write_text((ROOT / "conf" / "model" / "hybrid.yaml").read_text())
    (own / "model" / "tiny_hybrid.yaml").write_text("name: tiny_hybrid\nhidden_size: 32\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(own))
    r = runner.invoke(app, ["run", f"out_dir={tmp_path / 'r'}", SMALL])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().startswith(f"error: CGBENCH_CONFIG_DIR: {own / 'model' / 'tiny_hybrid.yaml'} differs "
                                       "from the shipped model=tiny_hybrid")
    assert not (tmp_path / "r").exists()


def test_missing_torch_gives_the_install_command(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    r = runner.invoke(app, ["run", "backend=torch", "model=tiny_hybrid", f"out_dir={tmp_path}"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    from cgbench.results.extras import install_hint

    assert r.stderr.strip() == f"error: backend=torch needs torch, which is not installed: {install_hint('torch')}"
    assert files_under(tmp_path) == set()
