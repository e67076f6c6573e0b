"""`cgbench calibrate` and the GPU check's CPU side.

Planning, the held-out split and the error figures are checked against brute-force lists, numpy and data for
which the calibrated model's answer is known (linear in the features: exact, down to the table's floor);
measuring runs end to end on the CPU with tiny engine limits (``backend.device=cpu``, where a "graphed" row is
the padded step computed eagerly); the GPU check's helper runs its sweep and summary on the CPU.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from cgbench.backends.sim.calibrated import CalibratedCostModel, CalibrationTable
from cgbench.backends.sim.factory import make_cost_model
from cgbench.backends.torch.calibration import (
    GRAPHED_ON_CPU,
    MODES,
    Case,
    Measurement,
    decode_ratios,
    error_report,
    plan_cases,
    quantile,
    report_path,
    sizes,
    split_holdout,
)
from cgbench.cli.calibrate import calibrate_cmd
from cgbench.config.compose import load_config
from cgbench.grids.build import build_grid
from tests.helpers import load_script

pytestmark = pytest.mark.e2e  # measures on the torch engine

ROOT = Path(__file__).resolve().parents[2]
TINY = ["engine=small", "engine.max_requests=4", "engine.max_tokens=32", "engine.max_sequence_length=64"]

app = typer.Typer()
app.command()(calibrate_cmd)
cli = CliRunner()



gpu_check = load_script("gpu_check")


@pytest.fixture
def one_thread():
    """torch on one intra-op thread: on a busy 2-core machine a parallel region stalls for time slices."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------- planning


def _pow2(v: int) -> bool:
    return v & (v - 1) == 0


@pytest.mark.parametrize("lo, hi", [(1, 1), (1, 8), (2, 256), (3, 100), (8, 16384), (5, 4)])
@pytest.mark.parametrize("dense", [False, True])
def test_sizes_are_the_brute_force_list(lo, hi, dense):
    want = {v for v in range(lo, hi + 1) if _pow2(v) or (dense and v % 3 == 0 and _pow2(v // 3))}
    if hi >= lo:
        want.add(hi)
    assert sizes(lo, hi, dense=dense) == sorted(want)


PLANS = [
    ["model=tiny_hybrid", "engine=small"],
    ["model=tiny_transformer", "engine=small"],
    ["model=tiny_hybrid", *TINY],
    ["model=tiny_hybrid", "engine=small", "engine.kv_blocks=20"],  # contexts must shrink to fit the pool
    ["model=tiny_transformer", "engine=small", "cg=dense"],
    ["model=tiny_hybrid", "engine=small", "cg=vllm"],
    ["model=hybrid"],  # Megatron's default limits: 256 requests, 16384 tokens, msl 2560
]


@pytest.mark.parametrize("overrides", PLANS, ids=lambda o: " ".join(o))
def test_plan_fits_the_engine_and_covers_the_grid(overrides):
    cfg = load_config(overrides)
    e = cfg.engine
    grid = build_grid(cfg.cg, e, cfg.model)
    cases, skipped = plan_cases(e, grid, seed=cfg.seed)
    shapes = {tuple(g) for g in grid.graphs}
    for c in cases:
        t, p, d = c.real
        assert 1 <= t <= e.max_tokens and 1 <= p + d <= e.max_requests, c
        assert all(1 <= x < e.max_sequence_length for x in c.decode_ctx), c
        assert all(n >= 1 and pre >= 0 and pre + n <= e.max_sequence_length for pre, n in c.prefills), c
        assert c.kv_blocks(e.block_size) <= e.resolved_kv_blocks(), c
        assert c.ctx == sum(x + 1 for x in c.decode_ctx) + sum(pre + n for pre, n in c.prefills)
        if c.mode == "eager":
            assert c.graph is None and c.key == c.real
            assert (p == 0) == (c.label == "decode") and (d == 0) == (c.label == "prefill")
            assert all(n >= 2 for _, n in c.prefills)  # so the runner never takes a chunk for a decode
        else:
            gt, gp, gd = c.key
            assert c.graph in shapes and t <= gt and p <= gp and d <= gd, c
            if c.real != c.graph:
                hit, _ = grid.lookup(*c.real)
                assert c.label == "graph-full" or tuple(hit) == c.graph, c  # the matcher sends it there
    full = {c.graph: c for c in cases if c.label == "graph-full"}
    assert set(full) | {s for s in shapes if any(str(list(s)) in note for note in skipped)} == shapes
    for g, c in full.items():
        if g[1] == 0 or g[0] - g[2] <= g[1] * e.max_sequence_length:
            assert c.real == g  # filled exactly when the limits allow
    eager_decode = {c.decode_ctx for c in cases if c.label == "decode"}
    for g, c in full.items():
        if g[1] == 0:
            assert c.decode_ctx in eager_decode  # the eager twin of every full decode graph
    ds = {c.real[2] for c in cases if c.label == "decode"}
    assert {1, e.max_requests} <= ds
    longest = {c.real[1]: 0 for c in cases if c.label == "prefill"}
    for c in cases:
        if c.label == "prefill":
            longest[c.real[1]] = max(longest[c.real[1]], c.real[0])
    assert longest == {p: min(e.max_tokens, p * e.max_sequence_length) for p in (1, 2, 4, 8)
                       if p <= e.max_requests}  # prefill-only steps reach the token budget
    assert plan_cases(e, grid, seed=cfg.seed) == (cases, skipped)
    other, _ = plan_cases(e, grid, seed=cfg.seed + 1)
    assert [c.real for c in other] == [c.real for c in cases]
    assert [c.decode_ctx for c in other] != [c.decode_ctx for c in cases]


def test_staging_a_case_allocates_what_the_case_says(one_thread):
    import torch

    from cgbench.backends.torch.calibration import stage_case
    from cgbench.backends.torch.runner import TorchRunner

    cfg = load_config(["model=tiny_hybrid", *TINY, "backend.device=cpu"])
    runner = TorchRunner(cfg.model, cfg.engine, seed=0, device="cpu")
    cases, _ = plan_cases(cfg.engine, build_grid(cfg.cg, cfg.engine, cfg.model), seed=0)
    total = runner.free_blocks
    for c in cases[::5]:
        staged, ids = stage_case(runner, c, 100)
        t, p, d = c.key
        assert (staged.shape.tokens, staged.shape.rows) == (t, p + d)
        assert runner.active_requests == ids == list(range(100, 100 + len(ids)))
        assert total - runner.free_blocks == c.kv_blocks(cfg.engine.block_size)
        starts = runner.buffers.context_len[:len(ids)].tolist()
        assert sorted(starts) == sorted([*c.decode_ctx, *(pre for pre, _ in c.prefills)])
        runner.compute(staged.shape)
        assert torch.isfinite(runner.buffers.logits[:staged.shape.rows]).all()
        for rid in ids:
            runner.release(rid)
        assert runner.free_blocks == total


# ----------------------------------------------------------------------------------------------- scoring


def _synthetic(n_graphed: int, n_eager: int) -> list[Measurement]:
    rng = random.Random(7)
    out = []
    for i in range(n_graphed + n_eager):
        mode = "graphed" if i < n_graphed else "eager"
        d = rng.randint(1, 8)
        case = Case(mode, "decode" if mode == "eager" else "graph-full", tuple([i + 1] * d), (), None)
        if mode == "graphed":
            case = replace(case, graph=(d, 0, d))
        out.append(Measurement(case, 1.0 + i, (1.0 + i, 1.0 + i)))
    return out


@pytest.mark.parametrize("n_graphed, n_eager", [(1, 1), (2, 3), (10, 40), (66, 129)])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.5, 0.99])
def test_holdout_split_partitions_each_mode(n_graphed, n_eager, fraction):
    ms = _synthetic(n_graphed, n_eager)
    fit, held = split_holdout(ms, fraction, seed=3)
    assert sorted(map(id, fit + held)) == sorted(map(id, ms)) and not set(map(id, fit)) & set(map(id, held))
    assert fit == [m for m in ms if m in fit] and held == [m for m in ms if m in held]  # measurement order
    for mode, n in (("graphed", n_graphed), ("eager", n_eager)):
        k = sum(1 for m in held if m.case.mode == mode)
        want = min(int(fraction * n + 0.5), n - 1)
        if fraction > 0 and n >= 2:
            want = max(want, 1)
        assert k == want and k < n
    assert split_holdout(ms, fraction, seed=3) == (fit, held)
    if n_eager >= 40 and fraction == 0.25:
        assert split_holdout(ms, fraction, seed=4)[1] != held


def test_quantile_is_numpys_linear_quantile():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 17, 100):
        xs = rng.exponential(size=n).tolist()
        for q in (0.0, 0.1, 0.5, 0.9, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)), rel=1e-12)
    with pytest.raises(ValueError):
        quantile([], 0.5)


def _linear_ms(mode: str, t: int, p: int, d: int, ctx: int) -> float:
    if mode == "graphed":
        return 0.3 + 0.004 * t + 0.02 * p + 0.01 * d + 1e-5 * ctx
    return 0.9 + 0.002 * t + 0.05 * p + 0.03 * d + 4e-5 * ctx


def test_error_report_on_linear_data_is_exact_down_to_the_floor():
    cfg = load_config(["model=tiny_hybrid", "engine=small"])
    cases, _ = plan_cases(cfg.engine, build_grid(cfg.cg, cfg.engine, cfg.model), seed=0)
    ms = [Measurement(c, _linear_ms(c.mode, *c.key, c.ctx), (0.0, 0.0)) for c in cases]
    fit, held = split_holdout(ms, 0.3, seed=1)
    off = held[len(held) // 2]  # one held-out step measured 25% slower than the line
    held[len(held) // 2] = replace(off, ms=1.25 * off.ms)

    def table(rows):
        return CalibrationTable(model={"name": "tiny_hybrid", "kind": "hybrid"}, device="cpu",
                                graphed=tuple(m.point() for m in rows if m.case.mode == "graphed"),
                                eager=tuple(m.point() for m in rows if m.case.mode == "eager"))

    rep = error_report(CalibratedCostModel(table(fit)), fit, held)
    floor = {mode: min(m.ms for m in fit if m.case.mode == mode) for mode in MODES}
    assert len(rep["rows"]) == len(held)
    for row, m in zip(rep["rows"], held, strict=True):
        exact = _linear_ms(m.case.mode, *m.case.key, m.case.ctx)
        want = max(exact, floor[m.case.mode])
        assert row["predicted_ms"] == pytest.approx(want, rel=1e-6, abs=1e-6)
        assert row["rel_error"] == pytest.approx(abs(want - m.ms) / m.ms, rel=1e-5, abs=1e-9)
    assert rep["rows"][len(held) // 2]["rel_error"] == pytest.approx(0.2, rel=1e-5)
    for mode in (*MODES, "all"):
        s = rep["modes"][mode]
        errs = [r["rel_error"] for r in rep["rows"] if mode in ("all", r["mode"])]
        assert s["held_out"] == len(errs) and s["fit"] + s["held_out"] == s["measured"]
        assert s["measured"] == sum(1 for m in ms if mode in ("all", m.case.mode))
        assert s["median_rel_error"] == statistics.median(errs)
        assert s["p90_rel_error"] == pytest.approx(float(np.quantile(errs, 0.9)))
        assert s["max_rel_error"] == max(errs)
    empty = error_report(CalibratedCostModel(table(ms)), ms, [])
    assert empty["modes"]["all"]["median_rel_error"] is None and empty["rows"] == []


def test_decode_ratio_pairs_a_graph_with_the_eager_step_of_the_same_batch():
    def m(label, ctx, ms, graph=None):
        mode = "graphed" if graph else "eager"
        return Measurement(Case(mode, label, ctx, (), graph), ms, (ms, ms))

    ms = [m("graph-full", (5, 9), 2.0, (2, 0, 2)), m("graph-full", (7,), 1.0, (1, 0, 1)),
          m("graph-partial", (3,), 9.0, (1, 0, 1)), m("decode", (5, 9), 7.0), m("decode", (7,), 3.0),
          m("decode", (8,), 100.0), m("graph-full", (4,), 1.0, (4, 1, 3))]
    r = decode_ratios(ms)
    assert r["per_D"] == {"1": 3.0, "2": 3.5} and r["median"] == 3.25
    assert decode_ratios(ms[3:6]) == {"per_D": {}, "median": None}


# ------------------------------------------------------------------------------------------ end to end


def test_calibrate_on_the_cpu_writes_a_table_the_simulator_reads(tmp_path):
    pytest.importorskip("torch")
    import torch

    out = tmp_path / "cal" / "tiny.json"
    r = cli.invoke(app, ["model=tiny_hybrid", *TINY, "backend.device=cpu", "--repeat", "1", "--warmup", "0",
                         "--holdout", "0.3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Held-out steps" in r.stdout and "median error" in r.stdout
    table = CalibrationTable.load(out)
    report = json.loads(report_path(out).read_text())
    assert report_path(out).name == "tiny.report.json"
    assert table.model["name"] == "tiny_hybrid" and table.device == "cpu" and table.torch == torch.__version__
    assert "padded" in table.notes and "held-out eager" in table.notes
    assert report["graphed_method"] == GRAPHED_ON_CPU and not report["on_cuda"]
    assert report["table"] == str(out) and report["cases"]["skipped"] == []
    assert "warning: no GPU: these step times describe this CPU" in r.output and "measured noise" in r.output

    cfg = load_config(["model=tiny_hybrid", *TINY])
    grid = {tuple(g) for g in build_grid(cfg.cg, cfg.engine, cfg.model).graphs}
    cases, _ = plan_cases(cfg.engine, build_grid(cfg.cg, cfg.engine, cfg.model), seed=0)
    assert report["cases"]["measured"] == len(cases) == len(report["measured"])
    assert {(p.tokens, p.prefills, p.decodes) for p in table.graphed} <= grid
    fit = [row for row in report["measured"] if row["split"] == "fit"]
    for mode, points in (("graphed", table.graphed), ("eager", table.eager)):
        rows = [row for row in fit if row["mode"] == mode]
        assert [(p.tokens, p.prefills, p.decodes, p.ctx) for p in points] == \
            [(row["T"], row["P"], row["D"], row["ctx"]) for row in rows]
        assert [p.ms for p in points] == pytest.approx([row["ms"] for row in rows], abs=1e-6)
        s = report["holdout"]["modes"][mode]
        assert s["fit"] == len(points) and s["held_out"] == sum(1 for r in report["measured"]
                                                                if r["mode"] == mode and r["split"] != "fit")
        assert s["held_out"] == int(0.3 * s["measured"] + 0.5)
        assert 0 <= s["median_rel_error"] <= s["p90_rel_error"]
    # the table reproduces its own rows (each (T, P, D, ctx) is measured once)
    cost = CalibratedCostModel(table)
    for row in (r for r in fit if r["mode"] == "eager"):
        from cgbench.engine.contract import StepWork

        got = cost.step_time(StepWork(row["T"], row["P"], row["D"], row["ctx"], None)) * 1e3
        assert got == pytest.approx(row["ms"], rel=1e-6, abs=1e-6)
    decode_graphs = sorted(str(g[2]) for g in grid if g[1] == 0)
    assert sorted(report["decode_ratio"]["per_D"]) == decode_graphs

    # the simulator runs on it
    sim = load_config(["model=tiny_hybrid", *TINY, "workload=small", "backend.cost_model=calibrated",
                       f"backend.calibration={out}"])
    assert isinstance(make_cost_model(sim.backend, sim.model, sim.hardware, sim.engine), CalibratedCostModel)
    from cgbench.pipeline import run_point

    doc = run_point(sim)
    assert doc["metrics"]["outcome"] == "completed" and doc["metrics"]["makespan_s"] > 0


@pytest.mark.parametrize("args", [
    ["--repeat", "0"], ["--warmup", "-1"], ["--holdout", "1"], ["--holdout", "-0.1"],
    ["model=hybrid", "backend.device=cpu"],  # 8 billion parameters on a CPU
    ["engine.tp_size=2"], ["engine.num_speculative_tokens=1"], ["cg=none"], ["model.bogus=1"],
    ["engine.max_requests=0"],
], ids=lambda a: " ".join(a))
def test_bad_input_exits_2_with_one_line(args, tmp_path):
    out = tmp_path / "c.json"
    base = [] if any(a.startswith("model=") for a in args) else ["model=tiny_hybrid"]
    r = cli.invoke(app, [*base, "engine=small", "backend.device=cpu", *args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.stderr.strip().startswith("error:")
    assert not out.exists()


def test_out_is_a_directory_exits_2(tmp_path):
    r = cli.invoke(app, ["model=tiny_hybrid", "engine=small", "backend.device=cpu", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.stderr


# ------------------------------------------------------------------------------------- the GPU check


def test_gpu_check_sweep_and_summary_on_the_cpu(tmp_path, capsys, one_thread):
    out = tmp_path / "gpu"
    assert gpu_check.main(["sweep", "--out", str(out), "--device", "cpu", "--models", "tiny_hybrid",
                           "--policies", "budget", "megatron"]) == 0
    (out / "env.json").write_text(json.dumps({"python": "3.12", "torch": "2.11.0", "cuda": False}))
    (out / "stages.tsv").write_text("env\t0\t1\t60\nsweep\t0\t9\t120\n")
    (out / "logs").mkdir()
    (out / "logs" / "pytest.log").write_text("sssss\n11 skipped, 22 deselected in 2.01s\n")
    assert gpu_check.main(["summarize", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["policy"]: r for r in summary["sweep"]}
    assert set(rows) == {"eager-ref", "budget", "megatron"}
    assert rows["budget"]["matcher_eager"] > 0 and rows["megatron"]["matcher_eager"] == 0
    assert rows["megatron"]["deferral_events"] > 0
    # on the CPU every step runs eager
    assert all(r["measured_eager"] == r["steps"] and r["replayed"] == 0 for r in rows.values())
    assert rows["budget"]["token_mismatches"] == rows["megatron"]["token_mismatches"] == 0
    checks = {c["check"]: c for c in summary["checks"]}
    assert checks["hybrid: budget eager, megatron none"]["ok"] is True
    assert checks["tokens: graph replay = eager"]["ok"] is True and checks["CUDA device"]["ok"] is None
    assert summary["pytest"]["skipped"] == 11 and summary["pytest"]["deselected"] == 22
    md = (out / "summary.md").read_text()
    assert "| tiny_hybrid | megatron |" in md and "**Checks**" in md

    # a replay that generated other tokens is a failed check
    path = out / "sweep" / "tiny_hybrid_budget.json"
    doc = json.loads(path.read_text())
    doc["requests"][3]["token_ids"][0] += 1
    path.write_text(json.dumps(doc))
    assert gpu_check.main(["summarize", "--out", str(out)]) == 1
    checks = {c["check"]: c for c in json.loads((out / "summary.json").read_text())["checks"]}
    assert checks["tokens: graph replay = eager"]["ok"] is False
    assert "tiny_hybrid/budget: 1 requests differ" in checks["tokens: graph replay = eager"]["detail"]
    capsys.readouterr()


def test_gpu_check_unpacks_fitting_wheels_without_pip(tmp_path):
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    other = "cp39" if cp != "cp39" else "cp38"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    specs = {"purepkg-1.0-py3-none-any.whl": {"purepkg/__init__.py": "X = 1\n",
                                                "purepkg-1.0.data/purelib/extra_mod.py": "Y = 2\n"},
             f"native-1.0-{cp}-{cp}-manylinux2014_x86_64.whl": {"native/__init__.py": ""},
             f"wrongpy-1.0-{other}-{other}-manylinux2014_x86_64.whl": {"wrongpy/__init__.py": ""},
             "notawheel.txt": {}}
    for name, files in specs.items():
        with zipfile.ZipFile(wheels / name, "w") as z:
            for arc, text in files.items():
                z.writestr(arc, text)
    target = tmp_path / "site"
    assert gpu_check.main(["unpack", "--wheels", str(wheels), "--target", str(target)]) == 0
    assert (target / "purepkg" / "__init__.py").exists() and (target / "extra_mod.py").exists()
    assert not list(target.glob("*.data")) and not (target / "wrongpy").exists()
    import platform

    assert (target / "native").exists() == (sys.platform == "linux" and platform.machine() == "x86_64")


def test_gpu_check_script_help_and_errors(tmp_path):
    script = str(ROOT / "scripts" / "gpu_check.sh")
    r = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "CGBENCH_WHEELS" in r.stdout and "--cpu" in r.stdout
    r = subprocess.run(["bash", script, "--bogus"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown argument" in r.stderr
    env = {"PATH": "/usr/bin:/bin", "CGBENCH_FORCE_INSTALL": "1", "CGBENCH_WHEELS": str(tmp_path)}
    r = subprocess.run(["bash", script, "--_install"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 1 and "no wheels in" in r.stderr


# ---------------------------------------------------------------------------------------------- --host


def test_calibrate_host_writes_a_file_the_simulator_uses(tmp_path):
    pytest.importorskip("torch")
    from cgbench.backends.sim.calibrated import HostCalibration
    from cgbench.backends.sim.cost_model import RooflineCostModel
    from cgbench.backends.sim.factory import resolve_hardware

    out = tmp_path / "host.json"
    r = cli.invoke(app, ["--host", "model=tiny_transformer", "engine=small", "--repeat", "3", "--warmup", "1",
                         "--out", str(out)])
    assert r.exit_code == 0, r.output
    cal = HostCalibration.load(out)
    assert cal.host_op_us > 0 and len(cal.samples_us) == 3 and cal.ops_measured > 0
    assert cal.host_op_us == pytest.approx(statistics.median(cal.samples_us))
    cfg = load_config(["model=transformer", f"hardware.host_calibration={out}"])
    hw = resolve_hardware(cfg.hardware)
    assert hw.host_op_us == cal.host_op_us
    cost = RooflineCostModel(cfg.model, hw)
    assert cost.host_seconds(0) == pytest.approx((cost.host_ops_decode * cal.host_op_us
                                                  + cost.kernel_count(0) * hw.kernel_launch_us) * 1e-6)


def test_calibrate_host_refuses_a_big_model():
    r = cli.invoke(app, ["--host", "model=hybrid"])
    assert r.exit_code == 2 and "model.hidden_size" in r.output


def test_host_op_counts_of_the_sim_match_the_torch_model():
    """The sim's per-step (34) and per-MLP-layer (18) host ops are the aten ops cgbench's torch model
    dispatches: counted here on models of 1 and 3 MLP layers."""
    pytest.importorskip("torch")
    from cgbench.backends.sim.cost_model import HOST_OPS_PER_LAYER, HOST_OPS_PER_STEP
    from cgbench.backends.torch.calibration import count_ops, stage_case
    from cgbench.backends.torch.runner import TorchRunner

    def ops(repeat: int) -> int:
        cfg = load_config(["model=tiny_transformer", "engine=small", "model.layer_pattern=-",
                           f"model.pattern_repeat={repeat}"])
        runner = TorchRunner(cfg.model, cfg.engine, seed=0, device="cpu", dtype="float32")
        staged, _ = stage_case(runner, Case("eager", "decode", (16,), ()), 0)
        return count_ops(lambda: runner.compute(staged.shape))

    one, three = ops(1), ops(3)
    assert (three - one) / 2 == HOST_OPS_PER_LAYER["-"]
    assert one - HOST_OPS_PER_LAYER["-"] == HOST_OPS_PER_STEP


def test_cpu_warning_states_the_measured_noise():
    from cgbench.cli.calibrate import cpu_warning

    rows = [{"ms": 10.0, "min_ms": 9.0, "max_ms": 11.0}, {"ms": 2.0, "min_ms": 2.0, "max_ms": 2.1},
            {"ms": 4.0, "min_ms": 3.0, "max_ms": 5.0}]  # spreads 20 %, 5 %, 50 %
    text = cpu_warning({"on_cuda": False, "device": "cpu", "measured": rows})
    assert text is not None and "this CPU (cpu)" in text
    assert "20.0% (median) to 50.0% (worst) of its median over 3 steps" in text
    assert cpu_warning({"on_cuda": True, "device": "NVIDIA H100", "measured": rows}) is None
