"""`cgbench advise`: the search spaces against independent oracles, the acceptance properties on the
README's headline and the chat preset, determinism across --jobs, resume, and bad input."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.analysis.advise.capture import CaptureEstimator
from cgbench.analysis.advise.demand import Demand
from cgbench.analysis.advise.explicit_space import candidate_pool, greedy_order, ladder, prefix_sizes, stored_order
from cgbench.analysis.advise.goals import Slo
from cgbench.analysis.advise.megatron_space import MegatronKnobs, megatron_space, spread_pick
from cgbench.analysis.advise.prices import ShapePrices
from cgbench.analysis.advise.request import AdviseRequest
from cgbench.analysis.advise.run import run_advise
from cgbench.backends.sim.factory import make_cost_model
from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.schema import ConfigError, EngineConfig
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.grids.shapes import BatchShape, match, validity_error
from cgbench.pipeline import run_point
from tests.helpers import default_sigint, examples

pytestmark = pytest.mark.e2e  # the end-to-end grid search

runner = CliRunner()
HEADLINE = ["model=hybrid", "policy=budget"]  # the README's headline: hybrid, non-chunked, 512 requests at once
CHAT = ["model=hybrid", "policy=megatron", "workload=chat", "workload.num_requests=300"]


class IntegerPricer:
    """A stand-in cost model with integer step times, so sums are exact and ties are real ties."""

    name = "integer"

    def step_time(self, work) -> float:
        if work.graph is not None:
            T, P, D = work.graph
            return float(T + 3 * P + 2 * D + 1)
        return float(work.tokens + 3 * work.prefills + 2 * work.decodes + 40)


def _naive_greedy(demand: Demand, pool, prices: ShapePrices, strict: bool, limit: int, fits=lambda g: True,
                  required=(), gated=True, goal="time"):
    """Oracle: price the whole demand with the plain matcher for every trial list; for the coverage
    goal, (steps no graph serves, time) compared in that order."""
    pool = list(pool) + [g for g in required if g not in pool]

    def price(graphs):
        shapes = [BatchShape(*g) for g in graphs]
        t, unserved = 0.0, 0
        for s, n in demand.counts.items():
            g = match(BatchShape(*s), shapes, strict)
            t += n * (prices.graphed(tuple(g)) if g is not None else prices.miss(s, gated))
            unserved += n * (g is None)
        return t, unserved

    def total(graphs):
        t, unserved = price(graphs)
        return t if goal == "time" else (unserved, t)

    def improvement(before, after):
        if goal == "time":
            return before - after
        return (before[0] - after[0], before[1] - after[1])

    def positive(gain):
        return gain > 0 if goal == "time" else (gain[0] > 0 or gain[1] > 0)

    order, dead = [], set()
    forced = list(dict.fromkeys(required))
    while len(order) < limit and len(dead) < len(pool):
        if forced:
            g = forced.pop(0)
        else:
            cur = total(order)
            best = None
            for c in pool:
                if c in dead:
                    continue
                gain = improvement(cur, total(order + [c]))
                if best is None or gain > best[0]:
                    best = (gain, c)
            if best is None or not positive(best[0]):
                break
            g = best[1]
        dead.add(g)
        if fits(order + [g]):
            order.append(g)
    return order


ENGINE = EngineConfig(max_requests=8, max_tokens=64, max_sequence_length=32)
real_shapes = st.one_of(
    st.integers(1, 8).map(lambda d: (d, 0, d)),
    st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(0, 20)).map(
        lambda t: (t[0] + t[1] + t[2], t[0], t[1])),
)


@pytest.mark.parametrize("goal", ["time", "coverage"])
@settings(max_examples=examples(40, stretch=False))
@given(st.lists(st.tuples(real_shapes, st.integers(1, 5)), min_size=1, max_size=10), st.booleans(),
       st.booleans(), st.booleans(), st.integers(1, 6))
def test_greedy_order_equals_a_naive_greedy(goal, items, strict, gating, gated, limit):
    demand = Demand.of([[*s, n] for s, n in items])
    pool = candidate_pool(demand, ENGINE)
    prices = ShapePrices(IntegerPricer(), gating=gating)
    required = [(8, 0, 8)]

    def fits(graphs):  # a stand-in budget that some lists break
        return sum(g[0] for g in graphs) <= 60

    got = greedy_order(demand, pool, prices, strict=strict, max_requests=8, limit=limit, fits=fits,
                       required=required, gated=gated, goal=goal)
    assert got == _naive_greedy(demand, pool, prices, strict, limit, fits, required, gated, goal)


@settings(max_examples=examples(60, stretch=False))
@given(st.lists(st.tuples(real_shapes, st.integers(1, 5)), min_size=1, max_size=8), st.booleans(),
       st.integers(1, 8))
def test_the_coverage_greedy_serves_every_step_whenever_some_list_of_that_size_does(items, strict, limit):
    """Brute force over every list of at most ``limit`` pool graphs: if one serves every step, so does
    the coverage greedy's list (a pool holds the hull graphs, so one or two graphs usually suffice)."""
    from itertools import combinations

    demand = Demand.of([[*s, n] for s, n in items])
    pool = candidate_pool(demand, ENGINE)
    shapes = [BatchShape(*s) for s in demand.counts]

    def serves_all(graphs):
        gs = [BatchShape(*g) for g in graphs]
        return all(match(s, gs, strict) is not None for s in shapes)

    possible = any(serves_all(c) for k in range(1, min(limit, 3) + 1) for c in combinations(pool, k))
    got = greedy_order(demand, pool, ShapePrices(IntegerPricer()), strict=strict, max_requests=8, limit=limit,
                       fits=lambda g: True, goal="coverage")
    if possible:
        assert serves_all(got)


def test_the_scorer_prices_a_grid_as_the_engines_matcher_does():
    cfg = load_config(CHAT)
    doc = run_point(cfg, CHAT, trace=True)
    from cgbench.analysis.advise.demand import shape_counts

    demand = Demand.of(shape_counts(doc["steps"]))
    prices = ShapePrices(make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine), gating=True)
    score = prices.scorer(demand, strict=True)
    for _, graphs, gating in random.Random(3).sample(megatron_space(cfg.engine), 6):
        grid = Grid("g", tuple(BatchShape(*g) for g in graphs), True)
        want = 0.0
        for s, n in demand.counts.items():
            g, _ = grid.lookup(*s)
            want += n * (prices.graphed(tuple(g)) if g is not None else prices.miss(s, gating))
        assert score(graphs, gating) == pytest.approx(want, rel=1e-12)


def test_the_megatron_space_holds_the_default_grid_once_and_its_overrides_build_it():
    cfg = load_config(["model=hybrid"])
    space = megatron_space(cfg.engine)
    keys = [(g, gating) for _, g, gating in space]
    assert len(keys) == len(set(keys))
    default = tuple(tuple(g) for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs)
    assert any(g == default and gating for _, g, gating in space)
    for knobs, graphs, _ in random.Random(1).sample(space, 5):
        c = load_config(["model=hybrid", *knobs.overrides()])
        assert tuple(tuple(g) for g in build_grid(c.cg, c.engine, c.model).graphs) == graphs


def test_megatron_arguments_name_only_the_flags_that_matter():
    on = MegatronKnobs(8, "exponential", 16, True, 512, True).megatron_args()
    assert on == {"--cuda-graph-impl": "local", "--inference-dynamic-batching-num-cuda-graphs": 8,
                  "--inference-dynamic-batching-cuda-graph-sizing-distribution": "exponential",
                  "--inference-dynamic-batching-cuda-graph-mixed-prefill-count": 16,
                  "--inference-cuda-graph-all-prefills": True}
    off = MegatronKnobs(4, "linear", 2, False, 1024, True).megatron_args()
    assert off["--inference-cuda-graph-max-tokens"] == 1024  # 0.19.2's name (the translator's table)
    assert "--inference-cuda-graph-all-prefills" not in off
    decode = MegatronKnobs(6, "exponential", 16, True, 512, False)
    assert decode.command.endswith("exponential --decode-only-cuda-graphs")


def test_pool_graphs_are_valid_and_every_observed_shape_is_its_own_candidate():
    demand = Demand.of([[5, 0, 5, 3], [30, 2, 4, 1], [64, 2, 0, 2], [17, 1, 7, 1]])
    pool = candidate_pool(demand, ENGINE)
    assert all(validity_error(BatchShape(*g), 8, 32) is None for g in pool)
    assert {(5, 0, 5), (30, 2, 4), (64, 2, 0), (17, 1, 7)} <= set(pool)


def test_list_sizes_ladders_and_spread():
    assert prefix_sizes(101, 6)[-1] == 101 and len(prefix_sizes(101, 6)) == 6
    assert prefix_sizes(5, 10) == [1, 2, 3, 4, 5]
    assert ladder(16, 2) == [1, 2, 3, 4, 6, 8, 11, 16]
    scored = [(10.0 - i, 2 * i + 1, i) for i in range(10)]  # more graphs predicts better here
    picked = spread_pick(scored, 4)
    # two bands of graph counts ([1, 11) and [11, 19]): the best of each, then the best overall
    assert picked == [4, 9, 8, 7]
    graphs = stored_order([(8, 0, 8), (64, 2, 0), (30, 2, 4)])
    assert graphs == [(64, 2, 0), (30, 2, 4), (8, 0, 8)]


def test_the_capture_estimate_is_the_one_a_run_records_and_grows_with_the_list():
    cfg = load_config(["model=hybrid", "workload.num_requests=8"])
    est = CaptureEstimator(cfg.model, cfg.hardware, cfg.engine)
    graphs = [tuple(g) for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs]
    capture = run_point(cfg, [])["capture"]
    whole = est.estimate(graphs)
    assert (whole.memory_gb, whole.capture_s) == (capture["graph_pool_gb"], capture["capture_s"])
    assert (whole.total_gb, whole.fits_device) == (capture["memory_gb"]["total"], capture["fits"])
    small = est.estimate(graphs[-10:])
    assert 0 < small.memory_gb < whole.memory_gb and 0 < small.capture_s < whole.capture_s
    assert est.estimate([]).memory_gb == 0.0


def test_slo_parsing():
    s = Slo.parse("ttft_p99=50")
    assert s.violated_by({"ttft_ms": {"p99": 60.0}}) and s.violated_by({"ttft_ms": {"p99": 50.0}}) is None
    assert Slo.parse("throughput=100").violated_by({"output_throughput_tok_s": 90.0})
    for bad in ("ttft=5", "ttft_p99", "ttft_p99=x", "ttft_p99=-1"):
        with pytest.raises(ConfigError, match="--slo"):
            Slo.parse(bad)


# ---------------------------------------------------------------------------------------------- acceptance


@pytest.fixture(scope="module")
def headline(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("headline")
    return run_advise(AdviseRequest(HEADLINE, budget_graphs=101, candidates=8, out_dir=out))


def test_headline_the_default_runs_eager_and_advise_finds_a_grid_without_eager_steps(headline):
    """Issue 19's acceptance: the default grid runs eager steps; with a budget no larger than its graph
    count the search finds a grid without eager steps and no worse throughput. The recommendation
    is the best throughput found, so it is at least as good as that grid."""
    default, rec, free = headline["default"], headline["recommended"], headline["eager_free"]
    obj = headline["objective"]["metric"]
    assert obj == "output_throughput_tok_s"
    assert default["metrics"]["eager_steps"] > 0 and default["num_graphs"] == 101
    assert free["metrics"]["eager_steps"] == 0 and free["metrics"]["outcome"] == "completed"
    assert free["num_graphs"] <= 101 and free["feasible"]
    assert free["metrics"][obj] >= default["metrics"][obj]
    assert rec["num_graphs"] <= 101 and rec["metrics"][obj] >= free["metrics"][obj]
    assert headline["improvement"]["objective"]["better_by"] == rec["metrics"][obj] - default["metrics"][obj]
    # the eager-free entry is the best-ranked feasible candidate without eager steps
    best = next(c for c in headline["candidates"] if c["feasible"] and c["metrics"]["eager_steps"] == 0)
    assert best["name"] == free["name"] and free["is_recommended"] == (free["name"] == rec["name"])
    if not free["is_recommended"]:
        assert rec["metrics"]["eager_steps"] > 0 and headline["notes"][0].startswith("eager-free grid:")


def test_headline_objective_eager_fraction_recommends_a_grid_without_eager_steps():
    doc = run_advise(AdviseRequest(HEADLINE, budget_graphs=101, candidates=8, objective="eager_fraction"))
    rec, default = doc["recommended"], doc["default"]
    assert default["metrics"]["eager_steps"] > 0
    assert rec["metrics"]["eager_steps"] == 0 and rec["num_graphs"] <= 101 and rec["space"] == "explicit"
    assert doc["eager_free"]["is_recommended"] and doc["eager_free"]["name"] == rec["name"]
    # ties on the objective go to fewer graphs
    free = [c for c in doc["candidates"] if c["feasible"] and c["metrics"]["eager_steps"] == 0]
    assert rec["num_graphs"] == min(c["num_graphs"] for c in free)


def test_headline_report_shape_and_invariants(headline):
    names = [c["name"] for c in headline["candidates"]]
    assert len(names) == len(set(names)) and "default" in names
    assert [c["rank"] for c in headline["candidates"]] == list(range(1, len(names) + 1))
    spaces = {c["space"] for c in headline["candidates"]}
    assert {"megatron", "explicit", "default"} <= spaces
    feasible = [c for c in headline["candidates"] if c["feasible"]]
    assert headline["recommended"]["name"] == feasible[0]["name"]
    values = [c["objective"] for c in feasible]
    assert values == sorted(values, reverse=True)  # throughput: best first
    # the Pareto front: no completed candidate has fewer-or-equal graphs and a better objective
    done = [c for c in headline["candidates"] if c["metrics"]["outcome"] == "completed"]
    for name in headline["pareto"]:
        f = next(c for c in done if c["name"] == name)
        assert not any(c["num_graphs"] <= f["num_graphs"] and c["objective"] > f["objective"] for c in done)
    assert headline["recommended"]["megatron_args"] is not None
    assert headline["robustness"][0]["check"] == "seed=1" and not headline["robustness"][0]["same_as_search"]


def test_chat_ttft_advise_beats_the_default_and_its_figures_are_a_plain_run(tmp_path):
    out = tmp_path / "adv"
    r = runner.invoke(app, ["advise", *CHAT, "--budget-graphs", "101", "--objective", "ttft_p99",
                            "--candidates", "8", "--out", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rec, default = doc["recommended"], doc["default"]
    assert set(rec) >= {"megatron_args", "graphs", "metrics"} and set(default) >= {"metrics"}
    assert rec["num_graphs"] <= default["num_graphs"]
    if rec["name"] == "default":
        assert any("already the best" in n for n in doc["notes"])
    else:
        assert rec["metrics"]["ttft_ms"]["p99"] < default["metrics"]["ttft_ms"]["p99"]

    # the claimed figures are those of a plain `cgbench run` of the recommended grid, three ways
    base = [o for o in CHAT]
    graphs = (out / "recommended_graphs.json").read_text().strip()
    for args in (rec["overrides"],
                 base + ["cg=explicit", f"cg.all_prefills={str(rec['all_prefills']).lower()}", f"cg.graphs={graphs}"],
                 ["--config-dir", str(out), *base, "cg=advised"]):
        path = tmp_path / "run.json"
        run = runner.invoke(app, ["run", *args, "-o", str(path)])
        assert run.exit_code == 0, run.output
        assert json.loads(path.read_text())["metrics"] == rec["metrics"]
    assert json.loads((out / "recommended_graphs.json").read_text()) == rec["graphs"]


def test_a_budget_too_small_for_an_eager_free_grid_says_so(tmp_path):
    # one graph (the decode backstop) cannot serve the headline's prefills: no candidate is eager-free
    doc = run_advise(AdviseRequest(HEADLINE + ["workload.num_requests=64"], budget_graphs=1, candidates=3))
    assert doc["eager_free"] is None and doc["recommended"]["metrics"]["eager_steps"] > 0
    assert doc["notes"][0].startswith("no candidate within the budgets and SLOs ran without eager steps")
    cover = [c for c in doc["candidates"] if c["name"].startswith("cover-")]
    assert cover and all("not all" in c["origin"] for c in cover)


def _comparable(doc):
    """The report without what may differ between equal searches: the time, how many runs were
    reused and which."""
    if isinstance(doc, dict):
        return {k: _comparable(v) for k, v in doc.items() if k not in ("created_at", "runs", "reused")}
    if isinstance(doc, list):
        return [_comparable(v) for v in doc]
    return doc


SMALL = HEADLINE + ["workload.num_requests=128"]


@pytest.fixture(scope="module")
def small_search() -> dict:
    return run_advise(AdviseRequest(SMALL, budget_graphs=40, candidates=6, jobs=1))


def test_jobs_2_gives_the_same_report_as_jobs_1(small_search):
    two = run_advise(AdviseRequest(SMALL, budget_graphs=40, candidates=6, jobs=2))
    assert _comparable(small_search) == _comparable(two)


def test_an_interrupted_search_resumes_to_the_same_report(tmp_path, small_search):
    small, whole = SMALL, small_search
    done = []

    def interrupt(label, total):
        if total is None:
            done.append(label)
            if len(done) == 4:
                raise KeyboardInterrupt

    req = AdviseRequest(small, budget_graphs=40, candidates=6, out_dir=tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        run_advise(req, progress=interrupt)
    assert len(list((tmp_path / "b" / "runs").glob("*.json"))) == 4
    req.resume = True
    resumed = run_advise(req)
    assert resumed["runs"]["reused"] == 4
    assert _comparable(resumed) == _comparable(whole)


# ---------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("args,needle", [
    ([], "--budget-graphs: required"),
    (["--budget-graphs", "0"], "--budget-graphs"),
    (["--budget-graphs", "many"], "--budget-graphs: must be an integer"),
    (["--budget-graphs", "8", "--budget-memory", "-1"], "--budget-memory"),
    (["--budget-graphs", "8", "--budget-capture-s", "nan"], "--budget-capture-s"),
    (["--budget-graphs", "8", "--objective", "latency"], "--objective: 'latency'"),
    (["--budget-graphs", "8", "--slo", "ttft=3"], "--slo"),
    (["--budget-graphs", "8", "--resume"], "--resume: needs --out"),
    (["--budget-graphs", "8", "--candidates", "1"], "--candidates"),
    (["--budget-graphs", "8", "--format", "yaml"], "--format"),
    (["--budget-graphs", "8", "backend=torch"], "backend"),
    (["--budget-graphs", "8", "--check-seed", "0"], "--check-seed"),
    (["--budget-graphs", "8", "engine.max_tokkens=5"], "max_tokkens"),
    (["--budget-graphs", "8", "--check-workload", "workload.num_requests=8"], "changes nothing"),
    (["--budget-graphs", "8", "--check-workload", "workload=nope"], "--check-workload"),
    # the grid is what advise recommends: a re-check's own grid is refused before the search (the
    # fuzzer found it refused only after the search, its runs left behind)
    (["--budget-graphs", "8", "--check-workload", "cg=dense"], "--check-workload: cg sets the grid"),
    (["--budget-graphs", "8", "--check-workload", "cg.num_cuda_graphs=4"], "cg.num_cuda_graphs sets the grid"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, args, needle):
    out = tmp_path / "adv"
    where = [] if "--resume" in args else ["--out", str(out)]
    r = runner.invoke(app, ["advise", "workload.num_requests=8", *args, *where])
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.output and not out.exists() and not (tmp_path / "results").exists()


def test_the_plot_needs_matplotlib_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "adv"
    args = ["advise", *HEADLINE, "workload.num_requests=64", "--budget-graphs", "20", "-n", "3", "--out", str(out)]
    r = runner.invoke(app, [*args, "--plot"])
    from cgbench.results.extras import install_hint

    assert r.exit_code == 2 and install_hint("plot") in r.stderr and not out.exists()
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert (out / "advise.json").is_file() and not (out / "pareto.png").exists()


def test_table_output_plot_and_quiet_stderr_off_a_terminal(tmp_path):
    out = tmp_path / "adv"
    r = runner.invoke(app, ["advise", *HEADLINE, "workload.num_requests=64", "--budget-graphs", "20", "-n", "4",
                            "--out", str(out), "--plot"])
    assert r.exit_code == 0, r.output
    assert "recommended:" in r.stdout and "robustness" in r.stdout
    assert r.stderr.strip().splitlines() == [f"report: {out / 'advise.json'}", f"plot: {out / 'pareto.png'}"]
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    yaml_text = (out / "cg" / "advised.yaml").read_text()
    assert "kind: explicit" in yaml_text
    assert f"cgbench run --config-dir {out.resolve()} cg=advised" in r.stdout
    doc = json.loads((out / "advise.json").read_text())
    trade_off = [line for line in r.stdout.splitlines() if line.startswith("eager-free grid:")]
    if doc["eager_free"] is not None and not doc["eager_free"]["is_recommended"]:
        assert len(trade_off) == 1 and f"{doc['eager_free']['name']}, " in trade_off[0]
        assert "note: eager-free" not in r.stdout  # printed once, with the recommendation
    else:
        assert not trade_off


def test_no_candidate_within_the_budgets_exits_1(tmp_path):
    r = runner.invoke(app, ["advise", *HEADLINE, "workload.num_requests=64", "--budget-graphs", "4",
                            "--slo", "throughput=1e12", "-n", "3", "--out", str(tmp_path / "a"),
                            "--format", "json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["recommended"] is None and all(not c["feasible"] for c in doc["candidates"])
    assert Path(tmp_path / "a" / "advise.json").is_file()


def test_a_candidate_that_breaks_is_reported_failed_and_the_search_goes_on(tmp_path, monkeypatch):
    import cgbench.analysis.advise.runs as advise

    real = advise.evaluate

    def flaky(cfg, overrides, want_shapes):
        if "cg=megatron" in overrides:
            raise RuntimeError("boom")
        return real(cfg, overrides, want_shapes)

    monkeypatch.setattr(advise, "evaluate", flaky)
    doc = run_advise(AdviseRequest(SMALL, budget_graphs=40, candidates=6, out_dir=tmp_path))
    broken = [c for c in doc["candidates"] if c["space"] == "megatron"]
    assert broken and all(c["metrics"]["outcome"] == "failed" and not c["feasible"] for c in broken)
    assert all("RuntimeError: boom" in c["metrics"]["diagnosis"] for c in broken)
    assert doc["recommended"] is not None and doc["recommended"]["space"] != "megatron"
    kept = [json.loads(p.read_text())["overrides"] for p in (tmp_path / "runs").glob("*.json")]
    assert not any("cg=megatron" in o for o in kept)


def test_ctrl_c_keeps_finished_runs_and_resume_finishes_the_search(tmp_path):
    import os
    import signal
    import subprocess
    import time

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "adv"
    args = ["advise", "model=hybrid", "policy=megatron", "workload=chat", "workload.num_requests=600",
            "--budget-graphs", "60", "-n", "6", "--out", str(out)]
    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(root / "conf")}
    proc = subprocess.Popen([sys.executable, "-m", "cgbench.cli.app", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, preexec_fn=default_sigint)
    deadline = time.monotonic() + 120
    while not list(out.glob("runs/*.json")):  # stop it once a run has finished
        assert proc.poll() is None and time.monotonic() < deadline, "the search ended before it could be stopped"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err and not (out / "advise.json").exists()
    kept = len(list((out / "runs").glob("*.json")))
    r = runner.invoke(app, [*args, "--resume", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["runs"]["reused"] >= kept >= 1


def test_a_seed_recheck_on_a_trace_is_flagged_as_changing_nothing(tmp_path):
    doc = run_advise(AdviseRequest(["workload=trace"], budget_graphs=16, candidates=3, out_dir=tmp_path))
    check = doc["robustness"][0]
    assert check["check"] == "seed=1" and check["same_as_search"] and check["advantage_lost"] == 0
    assert any("--check-workload" in n for n in doc["notes"])


def test_every_megatron_setting_the_search_tries_is_a_config_run_accepts():
    """Each knob setting's overrides compose as `cgbench run` composes them (no setting the run would
    refuse as unread: with all prefills, cg.cuda_graph_max_tokens is not read, and the all-prefill
    candidates failed as "run failed" while it was in their overrides), and give the knobs' grid."""
    engine = load_config(["model=hybrid"]).engine
    space = megatron_space(engine)
    assert any(k.all_prefills for k, _, _ in space) and any(not k.all_prefills for k, _, _ in space)
    kinds = {(k.all_prefills, k.non_decode, k.distribution, k.mixed_prefill_count): k for k, _, _ in space}
    for knobs in kinds.values():  # one setting of each kind: the overrides differ by kind only
        cfg = load_config(["model=hybrid", *knobs.overrides()])
        assert cfg.cg.all_prefills == knobs.all_prefills and cfg.cg.num_cuda_graphs == knobs.num_cuda_graphs
