"""A CLI fuzzer of our own: hypothesis builds random command lines for every command from the config
schema and the registries (``tests/inputs/fuzz_lines.py``) and holds each answer to the rule:

- exit 0 with a valid result: every JSON file written is strict JSON that validates against its
  schema in ``cgbench/schemas/``; a run's every request has its tokens (a completed request
  generated its output, the counts add up to the requests asked for); a success line that names a
  file names it verbatim (Rich markup in a path is not eaten);
- or exit 2 with exactly one ``error:`` line, the last on stderr (``warning:`` lines may come before
  it), and no file or folder written;
- never a traceback (an exception out of the command), never an input changed, never more than
  ``TIME_LIMIT_S`` per example (an alarm) nor ``RSS_GROWTH_LIMIT_KB`` of peak-RSS growth in process;
  a handful of run lines go to a child process under an address-space limit (3 GiB: the corpus's
  ``CHILD_ADDRESS_SPACE``).

``compare`` may also exit 1 (its gate failed: a documented answer, not an error). Examples per test:
``EXAMPLES`` under the dev and ci profiles, ten times as many under ``--hypothesis-profile=deep``.
The ci profile derandomizes, so CI runs the same lines every time."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import schema_errors
from tests.inputs.corpus import files_under, folders_under, invoke_bounded, run_in_child
from tests.inputs.fuzz_lines import (
    HOSTILE_PLUGIN_LINES,
    ODD_TEXT,
    doctored,
    hostile_plugins_yaml,
    key_override,
    megatron_args,
    odd_path,
    overrides,
)

pytestmark = pytest.mark.e2e  # the CLI fuzzer

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "tests" / "states" / "11_2_round1.json"
TIME_LIMIT_S = 30  # a tiny line answers in about a second; the bound catches a hang, not a slow machine
ODD_FORMATS = ("xml", "[b]", "", "JSON")


def formats(*valid: str) -> st.SearchStrategy[str | None]:
    """The command's own formats mostly, sometimes one it does not know, or none."""
    return st.one_of(st.none(), st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(ODD_FORMATS))
# examples per command under the dev and ci profiles (about a second each: ~4 minutes in all on a quiet core)
EXAMPLES = {"run": 60, "grid": 40, "cost": 40, "sweep": 8, "schedule": 40, "explain": 30, "export": 20,
            "compare": 30, "calibrate": 8, "schema": 10, "advise": 8, "child": 4}
runner = CliRunner()


def _count(command: str) -> int:
    """The command's examples; ten times as many under a profile that raises hypothesis's default of 100
    examples (deep: tests/conftest.py)."""
    deep = settings().max_examples > settings.get_profile("default").max_examples
    return EXAMPLES[command] * (10 if deep else 1)


def fuzz(command: str):
    return settings(max_examples=_count(command), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@dataclass
class Inputs:
    """Files the fuzzed commands read, made once per module: a run with its records, a two-point sweep,
    a state file, a trace, a comparison's rules. No command may change them."""

    folder: Path
    run: Path
    sweep: Path
    state: Path
    trace: Path
    rules: Path
    plugins: Path  # a config folder whose plugins.yaml declares tests.hostile_plugins
    blank_gz: Path  # a gzip'd trace of blank lines, past the plain file's line bound
    deep: Path  # a config folder with a 20,000-deep workload/deep.yaml

    def all(self) -> tuple[Path, ...]:
        return (self.run, self.sweep, self.state, self.trace, self.rules, self.plugins, self.blank_gz, self.deep)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Inputs:
    folder = tmp_path_factory.mktemp("fuzz_inputs")
    run = folder / "run.json"
    r = runner.invoke(app, ["run", "workload.num_requests=8", "--trace", "--requests", "--out", str(run)])
    assert r.exit_code == 0, r.output
    sweep = folder / "sweep"
    r = runner.invoke(app, ["sweep", "seed=1,2", "workload.num_requests=4", "--jobs", "1", "--out", str(sweep)])
    assert r.exit_code == 0, r.output
    state = folder / "state.json"
    shutil.copy(STATE, state)
    trace = folder / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.01, "prompt_tokens": 50 + i, "output_tokens": 5}) + "\n"
                             for i in range(6)))
    rules = folder / "rules.yaml"  # a copy: a command may legitimately write onto a file it does not read
    shutil.copy(ROOT / "conf" / "compare" / "default.yaml", rules)
    plugins = folder / "plugins"
    plugins.mkdir()
    (plugins / "plugins.yaml").write_text(hostile_plugins_yaml())
    blank_gz = folder / "blank.jsonl.gz"
    blank_gz.write_bytes(gzip.compress(b"\n" * 3_000_000))
    deep = folder / "deep"
    (deep / "workload").mkdir(parents=True)
    (deep / "workload" / "deep.yaml").write_text("[" * 20_000 + "]" * 20_000 + "\n")
    return Inputs(folder, run, sweep, state, trace, rules, plugins, blank_gz, deep)


def _digests(paths: tuple[Path, ...]) -> dict[Path, str]:
    """The bytes of every input file (a folder's: each file in it), by path."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _unchanged(before: dict[Path, str]) -> bool:
    """Every input file is still there with the same bytes (an input folder may gain files: an export
    into the sweep folder it reads adds its own, it replaces none)."""
    return all(p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() == h for p, h in before.items())


@dataclass
class Answer:
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    exception: BaseException | None
    written: set[Path]
    folders: set[Path]


@contextmanager
def _example_folder(inputs: Inputs) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(dir=inputs.folder.parent, prefix="example_"))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(cwd)
        shutil.rmtree(folder, ignore_errors=True)


def invoke(argv: list[str], folder: Path, inputs: Inputs) -> Answer:
    """The CLI in process, under an alarm and a peak-RSS bound; inputs must be unchanged after it."""
    files, dirs = files_under(folder), folders_under(folder)
    before = _digests(inputs.all())
    r = invoke_bounded(runner, app, argv, TIME_LIMIT_S)
    assert _unchanged(before), f"an input changed: {argv}"
    return Answer(argv, r.exit_code, r.stdout, r.stderr, r.exception,
                  files_under(folder) - files, folders_under(folder) - dirs)


def check(a: Answer, ok: tuple[int, ...] = (0, 2)) -> None:
    """The rule every answer follows (see the module's docstring)."""
    context = f"{a.argv}\n{a.stderr[-3000:]}"
    event(f"exit {a.code}")
    if os.environ.get("CGBENCH_FUZZ_LOG"):  # every line and its answer, one JSON line each (to read what was drawn)
        with open(os.environ["CGBENCH_FUZZ_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"argv": a.argv, "exit": a.code, "last": (a.stderr.strip().splitlines() or [""])[-1]})
                      + "\n")
    if a.exception is not None and not isinstance(a.exception, SystemExit):
        raise AssertionError(f"traceback ({type(a.exception).__name__}: {a.exception}) for {a.argv}") from a.exception
    assert "Traceback" not in a.stdout + a.stderr, context
    assert a.code in ok, (a.code, context)
    if a.code == 2:
        lines = a.stderr.strip().splitlines()
        errors = [ln for ln in lines if ln.startswith("error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], context
        assert all(ln.startswith(("warning:", "note:")) for ln in lines[:-1]), context
        if " are kept in " in errors[0]:  # advise refused a re-check after its search: the runs stay for --resume
            kept = Path(errors[0].split(" are kept in ")[1].split(":")[0])
            assert all(kept in p.parents for p in a.written), context
            return
        assert not a.written and not a.folders, f"refused but wrote {sorted(a.written | a.folders)}: {context}"
        return
    for path in sorted(a.written):
        if path.suffix == ".json":
            _check_document(path, context)


def _strict(name: str):
    raise ValueError(f"{name} is not strict JSON")


def _check_document(path: Path, context: str) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_strict)
    kind, errors = schema_errors(doc)
    assert not errors, f"{path} ({kind}): {errors[:5]}\n{context}"
    if kind == "result":
        _check_requests(doc, context)


def _check_requests(doc: dict, context: str) -> None:
    """Every request its tokens: the counts add up to the requests asked for, and a completed request
    generated its output."""
    m = doc["metrics"]["requests"]
    assert m["completed"] + m["failed"] + m["unfinished"] == m["total"], context
    if doc["config"]["workload"]["trace"] is None:
        assert m["total"] == doc["config"]["workload"]["num_requests"], context
    for q in doc.get("requests") or []:
        if q["outcome"] == "completed":
            assert q["generated"] == q["output_tokens"], (q, context)
        assert 0 <= q["generated"] <= q["output_tokens"], (q, context)


def _json_stdout(a: Answer) -> None:
    if a.code == 0 and a.stdout.strip():
        json.loads(a.stdout, parse_constant=_strict)


def maybe(strategy) -> st.SearchStrategy:
    return st.one_of(st.none(), strategy)


def mostly(valid: list, odd: list) -> st.SearchStrategy:
    """Absent or valid three times in four, else odd: a line of several options stays often valid."""
    return st.one_of(st.none(), st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(odd))


def valid_or_odd(valid: list[str], folder: Path, others: tuple[Path, ...]) -> st.SearchStrategy[str]:
    """Mostly one of the valid inputs, else an odd path or a file of the wrong kind."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid), odd_path(folder, others))


def _opt(name: str, value) -> list[str]:
    return [] if value is None else [name, str(value)]


# -- run: every key, every group option, odd --out paths (some onto the inputs it reads)

@fuzz("run")
@given(data=st.data())
def test_run(inputs, data):
    with _example_folder(inputs) as folder:
        ovr = data.draw(overrides(max_size=5), "overrides")
        trace = data.draw(st.sampled_from([[], [], ["workload=trace", f"workload.trace={inputs.trace}"]]))
        # issue 44, one line in four: a Megatron line at its ranges' edges, a hostile plug-in, a compressed
        # or deep input (a few overrides fewer: the line stays mostly valid)
        extra = data.draw(st.sampled_from(["", "", "", "", "", "", "megatron", "megatron", "plugin", "plugin",
                                           "blank_gz", "deep"]), "issue 44")
        if extra == "megatron":
            ovr = ["--megatron-args", data.draw(megatron_args(), "--megatron-args"), *ovr[:2]]
        elif extra == "plugin":
            ovr = ["--config-dir", str(inputs.plugins), *data.draw(st.sampled_from(HOSTILE_PLUGIN_LINES)), *ovr[:1]]
        elif extra == "blank_gz":
            trace, ovr = [f"workload.trace={inputs.blank_gz}"], ovr[:1]
        elif extra == "deep":
            ovr = ["--config-dir", str(inputs.deep), "workload=deep", *ovr[:1]]
        out = data.draw(maybe(odd_path(folder, (inputs.trace,) if trace else ())), "--out")
        flags = data.draw(st.lists(st.sampled_from(["--trace", "--requests", "-v"]), unique=True, max_size=3))
        fmt = data.draw(formats("table", "markdown", "json", "csv"), "--format")
        size = [] if trace else ["workload.num_requests=8"]  # a trace is its own size
        argv = ["run", f"out_dir={folder / 'results'}", *size, "engine.check_invariants=true", *trace, *ovr,
                *_opt("--out", out), *flags, *_opt("--format", fmt)]
        a = invoke(argv, folder, inputs)
        check(a)
        if a.code == 0:
            lines = [ln for ln in a.stderr.splitlines() if ln.startswith("result: ")]
            assert len(lines) == 1 and folder / lines[0].removeprefix("result: ") in a.written, a.stderr
            if fmt == "json":
                _json_stdout(a)


@fuzz("child")
@given(ovr=overrides(max_size=4))
def test_run_in_a_child_under_an_address_space_limit(inputs, ovr):
    with _example_folder(inputs) as folder:
        argv = ["run", f"out_dir={folder / 'results'}", "workload.num_requests=8", *ovr]
        r = run_in_child(argv, cwd=folder)
        check(Answer(argv, r.returncode, r.stdout, r.stderr, None, files_under(folder), folders_under(folder)))


# -- grid and cost: the grid of every option and key; cost's step shapes and contexts

@fuzz("grid")
@given(data=st.data())
def test_grid(inputs, data):
    with _example_folder(inputs) as folder:
        fmt = data.draw(formats("table", "markdown", "json", "csv"))
        argv = ["grid", *data.draw(overrides(max_size=5)), *_opt("--format", fmt)]
        a = invoke(argv, folder, inputs)
        check(a)
        if fmt == "json":
            _json_stdout(a)


SHAPES = ("64,1,0", "512,2,8", "1,0,1", "0,0,0", "-1,0,0", f"{2**63},1,0", "1e308,1,0", "abc", "", "64,1",
          "64,1,0,0", "[b],1,0", "16384,0,16384", "nan,1,0")


@fuzz("cost")
@given(data=st.data())
def test_cost(inputs, data):
    with _example_folder(inputs) as folder:
        shape = data.draw(st.one_of(st.sampled_from(SHAPES), st.sampled_from(SHAPES[:3]), st.sampled_from(SHAPES[:3])))
        context = data.draw(mostly(["0", "100", "2559"], ["-5", str(2**63), "1e308", "abc"]))
        fmt = data.draw(formats("table", "json"))
        argv = ["cost", *data.draw(overrides(max_size=4)), *_opt("--shape", shape), *_opt("--context", context),
                *_opt("--format", fmt)]
        a = invoke(argv, folder, inputs)
        check(a)
        if fmt == "json":
            _json_stdout(a)


# -- sweep (tiny): random axes, --dry-run, odd --out folders

@st.composite
def sweep_axis(draw) -> str:
    key = draw(st.sampled_from(["seed", "policy", "cg", "engine.max_requests", "workload.arrival.rate",
                                "cg.num_cuda_graphs", "engine.ep_size", "hardware"]))
    values = {"seed": ["1,2", "0", "1,1", f"{2**63},1", "a,b", "range(0,2)"],
              "policy": ["megatron,budget", "megatron,nope", "cover"],
              "cg": ["dense,sparse", "none", "[b],dense"],
              "engine.max_requests": ["8,16", "0,8", "1e308"],
              "workload.arrival.rate": ["inf,1", "10,20", "nan"],
              "cg.num_cuda_graphs": ["4,-1", "null,4", "-2"],
              "engine.ep_size": ["1,2", "2,4", "0"],
              "hardware": ["h100,a100", "tpu"]}[key]
    return f"{key}={draw(st.sampled_from(values))}"


@fuzz("sweep")
@given(data=st.data())
def test_sweep(inputs, data):
    with _example_folder(inputs) as folder:
        axes = data.draw(st.lists(sweep_axis(), min_size=1, max_size=2, unique_by=lambda o: o.split("=")[0]))
        out = data.draw(maybe(odd_path(folder, suffix="")))
        flags = data.draw(st.lists(st.sampled_from(["--dry-run", "--resume"]), unique=True, max_size=1))
        jobs = data.draw(maybe(st.sampled_from(["1", "0", "-1", "abc"])))
        fmt = data.draw(formats("table", "markdown", "json", "csv"))
        argv = ["sweep", f"out_dir={folder / 'results'}", "workload.num_requests=4", *axes,
                *data.draw(overrides(max_size=2)), "--jobs", jobs or "1", *_opt("--out", out), *flags,
                *_opt("--format", fmt)]
        check(invoke(argv, folder, inputs), ok=(0, 1, 2))


# -- schedule: the shipped state, a state with one field made hostile, odd paths

HOSTILE_JSON = (2**63, -(2**63) - 1, 10**30, 1e308, -1, 0, "x", "[b]", None, [], {}, True, 1.5, "M" * 10_000)


@st.composite
def hostile_state(draw, base: dict) -> dict:
    doc = json.loads(json.dumps(base))
    paths: list[tuple] = []

    def walk(node, at: tuple) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append((*at, k))
                walk(v, (*at, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append((*at, i))
                walk(v, (*at, i))

    walk(doc, ())
    where = draw(st.sampled_from(paths + [("model", "layer_pattern"), ("model", "pattern_repeat"),
                                          ("cg", "num_cuda_graphs"), ("engine", "ep_size")]))
    node = doc
    for step in where[:-1]:
        node = node[step]
    value = draw(st.sampled_from(HOSTILE_JSON))
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(where[-1], int) and where[-1] < len(node)):
        node[where[-1]] = value
    return doc


@fuzz("schedule")
@given(data=st.data())
def test_schedule(inputs, data):
    with _example_folder(inputs) as folder:
        kind = data.draw(st.sampled_from(["shipped", "shipped", "hostile", "hostile", "path"]))
        if kind == "shipped":
            state = str(inputs.state)
        elif kind == "hostile":
            hostile = folder.parent / f"hostile_inputs_{folder.name}.json"
            hostile.write_text(json.dumps(data.draw(hostile_state(json.loads(STATE.read_text())))))
            state = str(hostile)
        else:
            state = data.draw(odd_path(folder, (inputs.run, inputs.trace)))
        policy = data.draw(maybe(st.sampled_from(["all", "megatron", "budget", "cover", "nope", "[b]"])))
        fmt = data.draw(formats("table", "markdown", "json", "csv"))
        argv = ["schedule", state, *_opt("--policy", policy), *_opt("--format", fmt)]
        try:
            a = invoke(argv, folder, inputs)
        finally:
            Path(folder.parent / f"hostile_inputs_{folder.name}.json").unlink(missing_ok=True)
        check(a)
        if fmt == "json":
            _json_stdout(a)


# -- explain and export: the run and sweep inputs, odd request / step numbers, odd output paths

INDICES = ("0", "3", "7", "8", "-1", str(2**63), "abc", "1e308", "999999")


@fuzz("explain")
@given(data=st.data())
def test_explain(inputs, data):
    with _example_folder(inputs) as folder:
        target = data.draw(st.one_of(valid_or_odd([str(inputs.run)], folder, (inputs.state, inputs.trace)),
                                     doctored(inputs.run, folder)))
        request = data.draw(st.one_of(st.none(), st.sampled_from(INDICES), st.integers(0, 7).map(str),
                                      st.integers(0, 7).map(str)))
        step = data.draw(st.one_of(st.none(), st.integers(0, 60).map(str), st.sampled_from(INDICES)))
        state = data.draw(maybe(odd_path(folder, (inputs.run,))))
        fmt = data.draw(formats("text", "json"))
        argv = ["explain", target, *_opt("--request", request), *_opt("--step", step), *_opt("--state", state),
                *_opt("--format", fmt)]
        a = invoke(argv, folder, inputs)
        check(a)
        if fmt == "json":
            _json_stdout(a)


@fuzz("export")
@given(data=st.data())
def test_export(inputs, data):
    with _example_folder(inputs) as folder:
        source = data.draw(valid_or_odd([str(inputs.run), str(inputs.sweep)], folder, (inputs.state,)))
        out = data.draw(odd_path(folder, (Path(source),) if Path(source) in inputs.all() else (), suffix=""))
        force = data.draw(st.sampled_from([[], ["--force"]]))
        check(invoke(["export", source, "--out", out, *force], folder, inputs))


# -- compare: results, sweeps, odd paths, rules, gates and formats

@fuzz("compare")
@given(data=st.data())
def test_compare(inputs, data):
    with _example_folder(inputs) as folder:
        docs = valid_or_odd([str(inputs.run), str(inputs.sweep)], folder, (inputs.state, inputs.trace))
        base, new = data.draw(docs), data.draw(st.one_of(docs, doctored(inputs.run, folder)))
        rules = data.draw(mostly([str(inputs.rules)],
                                 [str(inputs.trace), str(inputs.run), str(folder / "missing.yaml")]))
        fail_on = data.draw(mostly(["regressed", "none", "regressed,missing"], ["nope", "", "[b]"]))
        fmt = data.draw(formats("table", "markdown", "json", "csv"))
        read = tuple(p for p in inputs.all() if str(p) in (base, new, rules))
        markdown = data.draw(st.one_of(st.none(), st.none(), odd_path(folder, read, suffix=".md")))
        argv = ["compare", base, new, *_opt("--rules", rules), *_opt("--fail-on", fail_on), *_opt("--format", fmt),
                *_opt("--markdown", markdown), *data.draw(st.sampled_from([[], ["-v"], ["--all"]]))]
        a = invoke(argv, folder, inputs)
        check(a, ok=(0, 1, 2))
        if fmt == "json" and a.code in (0, 1):
            _json_stdout(a)


# -- calibrate: no GPU here, so the device calibration is refused; --host runs a tiny model once

@pytest.fixture(scope="module")
def torch_first_run(tmp_path_factory) -> None:
    """One host calibration before the first example, unmeasured: torch's first run in a process (its
    import, ~450 MB, and the first model's thread pools and kernel caches, ~400 MB more) raises the peak
    RSS once, which is not a command's growth."""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("torch_first_run")
    r = runner.invoke(app, ["calibrate", f"out_dir={folder / 'results'}", "model=tiny_transformer", "--host",
                            "--repeat", "1", "--warmup", "0", "--out", str(folder / "host.json")])
    assert r.exit_code == 0, r.output


@fuzz("calibrate")
@given(data=st.data())
def test_calibrate(inputs, torch_first_run, data):
    with _example_folder(inputs) as folder:
        host = data.draw(st.booleans())
        model = data.draw(st.sampled_from(["model=tiny_hybrid", "model=tiny_transformer", "model=hybrid", "[b]=x"]))
        out = data.draw(maybe(odd_path(folder)))
        # the device calibration measures every graph of the grid (minutes on a CPU): without --host the
        # fuzzer draws only lines refused before measuring (a bad --repeat)
        repeat = data.draw(st.sampled_from(["1", "0", "-1", str(2**63), "abc"] if host else ["0", "-1", str(2**63),
                                                                                             "abc"]))
        warmup = data.draw(st.sampled_from(["0", "-1", "abc"]))
        holdout = data.draw(maybe(st.sampled_from(["0.25", "0", "1", "-0.5", "nan", "inf", "abc"])))
        argv = ["calibrate", f"out_dir={folder / 'results'}", model, *(["--host"] if host else []),
                *_opt("--out", out), "--repeat", repeat, "--warmup", warmup, *_opt("--holdout", holdout)]
        check(invoke(argv, folder, inputs))


@fuzz("schema")
@given(kind=st.sampled_from(["result", "sweep", "advise", "state", "nope", "", "[b]", "é", "RESULT"]))
def test_schema(inputs, kind):
    with _example_folder(inputs) as folder:
        a = invoke(["schema", kind], folder, inputs)
        check(a)
        if a.code == 0:
            json.loads(a.stdout)


# -- advise (tiny): budgets, objectives, SLOs, re-check seeds (some refused), odd --out folders

@fuzz("advise")
@given(data=st.data())
def test_advise(inputs, data):
    with _example_folder(inputs) as folder:
        budget = data.draw(st.sampled_from(["2", "4", "0", "-1", str(2**63), "abc"]))
        objective = data.draw(maybe(st.sampled_from(["throughput", "ttft_p99", "eager_fraction", "nope"])))
        slo = data.draw(maybe(st.sampled_from(["ttft_p99=100", "ttft_p99=nan", "throughput=-1", "nope=1", "x"])))
        check_seed = data.draw(maybe(st.sampled_from(["1", "-1", str(2**64), "abc"])))
        check_workload = data.draw(st.lists(st.sampled_from(["workload=burst", "engine.max_sequence_length=16",
                                                             "workload.num_requests=2", "seed=3", "[b]=1", "cg=dense",
                                                             "workload=nope"]), max_size=2, unique=True))
        out = data.draw(maybe(odd_path(folder, suffix="")))
        argv = ["advise", f"out_dir={folder / 'results'}", "workload.num_requests=4", *data.draw(overrides(max_size=2)),
                "--budget-graphs", budget, "--candidates", "2", "--jobs", "1", *_opt("--objective", objective),
                *_opt("--slo", slo), *_opt("--check-seed", check_seed), *_opt("--out", out), "--format", "json",
                *[x for o in check_workload for x in ("--check-workload", o)]]
        a = invoke(argv, folder, inputs)
        check(a)
        _json_stdout(a)


def test_the_fuzzer_draws_every_key_and_every_group_option():
    """The fuzzer's vocabulary is the schema's and the registries': every config key, every group."""
    from hypothesis import find

    from cgbench.config.paths import GROUPS
    from tests.inputs.fuzz_lines import config_keys, group_override

    keys = config_keys()
    assert {"engine.ep_size", "engine.moe_dispatcher", "cg.graphs", "workload.window.first", "slo.ttft_ms"} <= set(keys)
    for key in ("engine.ep_size", "cg.graphs", "policy.pad_guard.max_ratio"):
        assert find(key_override(), lambda o, k=key: o.startswith(f"{k}=")).startswith(key)
    for group in (g for g in GROUPS if g != "sweep"):
        assert find(group_override(), lambda o, g=group: o.startswith(f"{g}=")).startswith(group)
    assert "[/]" in ODD_TEXT
