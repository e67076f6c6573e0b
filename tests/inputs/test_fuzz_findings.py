"""What the CLI fuzzer (test_cli_fuzz.py) and its review found, one regression test each, with the
one place that now owns the class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.inputs.corpus import SMALL, files_under

runner = CliRunner()


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs /proc")
@pytest.mark.parametrize("out", ["/proc/version", "/proc/self/new.json"])
def test_an_output_in_a_folder_that_takes_no_new_files_says_so(out, tmp_path):
    """Owner: safeio.check_writable. /proc lists a regular file, but no temporary file can be made
    beside it: the refusal named 'no such file or directory' for a file that exists."""
    r = runner.invoke(app, ["run", SMALL, f"out_dir={tmp_path}", "--out", out])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip() == (f"error: cannot write --out {out}: its folder {Path(out).parent} takes no new files "
                                "(a pseudo file system such as /proc or /sys)")
    assert files_under(tmp_path) == set()


@pytest.mark.slow  # two short advise searches
def test_an_advise_recheck_the_request_makes_invalid_is_bad_input_not_a_failed_row(tmp_path):
    """Owner: advise_runs.Evaluator.run (requested_by). ``--check-workload engine.max_sequence_length=16``
    makes the recommended explicit grid invalid (T > P*msl + D): the re-check's run raised ConfigError
    inside the executor, which reported it as a "failed" row with exit 0. Now: exit 2, one line naming
    the option and the refusal; the candidates' runs are kept, and --resume with a valid check completes
    reusing them."""
    out = tmp_path / "adv"
    base = ["advise", SMALL, "--budget-graphs", "4", "--candidates", "4", "--out", str(out), "--format", "json"]
    r = runner.invoke(app, [*base, "--check-workload", "engine.max_sequence_length=16"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --check-workload engine.max_sequence_length=16: check ")
    assert "is refused: cg.graphs[" in lines[0] and f"kept in {out}" in lines[0]
    kept = {p.name for p in (out / "runs").iterdir()}
    again = runner.invoke(app, [*base, "--check-workload", "workload.arrival.process=poisson",
                                "--check-workload", "workload.arrival.rate=50", "--resume"])
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert [c["recommended"]["metrics"]["outcome"] for c in report["robustness"]] == ["completed", "completed"]
    assert kept <= {p.name for p in (out / "runs").iterdir()}


def test_explain_state_onto_the_run_it_explains_is_refused(tmp_path):
    """Owner: the command's declare_inputs (explain declared none): ``explain RUN --step K --state RUN``
    replaced the run with the round's state."""
    run = tmp_path / "r.json"
    assert runner.invoke(app, ["run", SMALL, "--out", str(run)]).exit_code == 0
    before = run.read_bytes()
    r = runner.invoke(app, ["explain", str(run), "--step", "3", "--state", str(run)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip() == (f"error: cannot write --state {run}: it is this command's input (RUN {run}); "
                                "writing would replace it: choose another output path")
    assert run.read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize("override, error", [
    ("cg.piecewise_sizes=[[64,1,0],[8,0,8]]", "cg.piecewise_sizes[0]: must be an integer, got [64, 1, 0]"),
    ("cg.capture_sizes=[[1]]", "cg.capture_sizes[0]: must be an integer, got [1]"),
    ("cg.graphs=[[64,1,true]]", "cg.graphs[0][2]: must be an integer, got True"),
    ("workload.prompt_len.weights=[[1]]", "workload.prompt_len.weights[0]: must be a number, got [1]"),
])
def test_a_list_of_the_wrong_element_type_is_one_line(override, error, tmp_path):
    """Owner: config.schema.check_elements (in check_finite's walk over the config, against each list
    field's element type). OmegaConf let ``[[64,1,0]]`` into a ``list[int]``: ``cost`` and ``grid``
    ended in a TypeError traceback (found by the deep fuzzer)."""
    r = runner.invoke(app, ["grid", override])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.strip() == f"error: {error}"


@pytest.mark.slow
@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("option, value", [("--repeat", str(2**63)), ("--warmup", "10001")])
def test_calibrate_refuses_a_run_count_that_would_measure_for_ever(host, option, value, tmp_path):
    """Owner: backends.torch.calibration.check_run_counts (both calibrations). ``--repeat 2**63``
    started a device calibration that timed every step 2**63 times (found by the deep fuzzer)."""
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["calibrate", "model=tiny_hybrid", *(["--host"] if host else []), option, value,
                            "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lower = 1 if option == "--repeat" else 0
    assert r.stderr.strip() == f"error: {option}: must be in {lower}..10,000, got {value}"
    assert files_under(tmp_path) == set()


@pytest.mark.slow
def test_a_sweep_over_a_listed_grid_run_refuses_is_refused_before_it_runs(tmp_path):
    """``run cg=explicit cg.graphs=[[5000,1,0]]`` exits 2; the same grid as a sweep did too only after
    every point had failed (exit 1). The plan now checks listed (and plug-in) grids as run does."""
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", "cg=explicit", "cg.graphs=[[5000,1,0]]", "policy=budget,megatron",
                                 "workload.num_requests=8", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "cg.graphs[0]" in r.output and "not a valid graph" in r.output
    assert not out.exists()


@pytest.mark.parametrize("value", ["5e-324", "1e-308", "0.5", "17"])
def test_a_gemm_overlap_exponent_outside_its_range_is_one_line(value):
    """Owner: config.schema.check_hardware (GEMM_OVERLAP_EXPONENT_RANGE). ``cost`` with
    ``hardware.gemm_overlap_exponent=1e-308`` overflowed the p-norm (an OverflowError traceback), and at
    5e-324 priced a step at Infinity ms (found by the CI fuzzer)."""
    r = runner.invoke(app, ["cost", f"hardware.gemm_overlap_exponent={value}", "--shape", "64,1,0"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.strip().startswith("error: hardware.gemm_overlap_exponent: must be in [1, 16]") and \
        r.stderr.strip().endswith(f"got {float(value)}")


def test_a_result_whose_warning_is_not_an_object_is_one_line(tmp_path):
    """Owner: results.document._check_shape (a result's ``warnings`` are objects, as its steps and
    requests are). ``compare`` read ``warnings: [null]`` to an AttributeError (found by the mutated-result
    property of tests/inputs/test_reader_properties.py)."""
    base = sorted(Path(__file__).resolve().parents[2].glob("results/baseline/model-*.json"))[0]
    doc = json.loads(base.read_text())
    doc["warnings"] = [None]
    (tmp_path / "hostile_inputs").mkdir()
    new = tmp_path / "hostile_inputs" / "new.json"
    new.write_text(json.dumps(doc))
    r = runner.invoke(app, ["compare", str(base), str(new)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.strip() == f"error: {new}: 'warnings[0]' must be an object, got NoneType"


def test_a_refusal_after_the_launch_line_is_translated_is_still_one_line(tmp_path):
    """Owner: cli.console.print_when_accepted (the --megatron-args translation is held until the
    command's input is accepted, and dropped on a refusal). A folder --out after a translated line
    printed the translation, then the error (found by the CLI fuzzer)."""
    r = runner.invoke(app, ["run", "workload.num_requests=8", "--megatron-args", "--expert-model-parallel-size 1",
                            "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: --out {tmp_path}: is a directory"
    ok = runner.invoke(app, ["run", "workload.num_requests=8", "--megatron-args", "--expert-model-parallel-size 1",
                             "--out", str(tmp_path / "r.json")])
    assert ok.exit_code == 0, ok.output
    assert ok.stderr.startswith("Megatron 0.19.2 arguments -> cgbench overrides:\n"
                                "  translated   --expert-model-parallel-size 1 -> engine.ep_size=1\n")
