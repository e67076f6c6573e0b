"""`cgbench plot`: the figures of the CI sweep and of a 4-policy x 3-grid x 4-rate sweep keep every
tick and bar label clear of the others, carry units on every axis, mark the SLO and each curve's
maximum sustainable rate; long timelines are downsampled without losing eager iterations or
deferrals; bad options exit 2."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.analysis.plots.data import PlotSpec, load_records
from cgbench.analysis.plots.layout import bar_labels, bottom_legend, clipped_texts, colliding_texts, overlaps
from cgbench.analysis.plots.load import max_sustainable
from cgbench.analysis.plots.pareto import pareto_front
from cgbench.analysis.plots.plot import plot_sweep, sweep_figures, sweep_rows
from cgbench.analysis.plots.run import TIMELINE_BINS, queue_wait_figure, timeline_figure
from cgbench.analysis.sweep.run import plan_sweep, run_sweep
from cgbench.config.compose import load_config
from cgbench.pipeline import run_point
from cgbench.results.document import write_json_atomic

pytestmark = pytest.mark.e2e  # end-to-end sweeps and figures

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baseline"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RATES = (8.0, 16.0, 32.0, 64.0)
runner = CliRunner()


def _app() -> typer.Typer:
    from cgbench.cli.app import app

    return app


def plot(*args) -> object:
    return runner.invoke(_app(), ["plot", *map(str, args)])


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) read from the PNG header itself: the signature, then the IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def rate_sweep(tmp_path_factory) -> Path:
    """The rate preset (4 policies x 3 grids x 4 rates), shortened to 120 requests per point."""
    out = tmp_path_factory.mktemp("plots") / "rate"
    plan = plan_sweep(["sweep=rate", "workload.num_requests=120"], out_dir=out)
    assert len(plan.points) == 48
    outcome = run_sweep(plan, jobs=2)
    assert outcome.count("done") == 48
    return out


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plots") / "s"
    run_sweep(plan_sweep(["model=transformer,hybrid", "policy=budget,megatron", "cg=sparse", "workload=small"],
                         out_dir=out))
    return out


def _all_texts_clear(figures) -> None:
    """Tick, bar and point labels clear of each other; titles, legends and axis labels inside the
    figure and clear of each other (matplotlib's own text boxes, from the renderer)."""
    for name, fig in figures:
        clash = overlaps(fig)
        assert not clash, f"{name}: labels overlap: {clash[:5]}"
        assert not clipped_texts(fig), f"{name}: cut off: {clipped_texts(fig)[:5]}"
        assert not colliding_texts(fig), f"{name}: titles or legends collide: {colliding_texts(fig)[:5]}"


def _one_y_scale_per_metric(name: str, fig) -> None:
    by_label: dict[str, set[str]] = {}
    for ax in fig.axes:
        if ax.get_visible() and ax.has_data():
            by_label.setdefault(ax.get_ylabel(), set()).add(ax.get_yscale())
    assert all(len(scales) == 1 for scales in by_label.values()), f"{name}: {by_label}"


def _units_on_every_axis(figures) -> None:
    for name, fig in figures:
        for ax in fig.axes:
            if not ax.get_visible() or not ax.has_data():
                continue
            ylabel = ax.get_ylabel()
            if ylabel:
                assert "(" in ylabel and ylabel.endswith(")"), f"{name}: y label {ylabel!r} has no unit"


def test_the_frame_checks_see_a_cut_off_legend_and_a_legend_title_on_the_figure_title():
    """Negative controls: the two faults of the old layouts are caught, and their fixes pass."""
    fig, ax = plt.subplots(figsize=(4.3, 3.5))
    handles = [plt.Line2D([], [], ls="", marker="o", label=f"policy={p}") for p in
               ("budget", "megatron", "defer", "pad_guard", "wait_timeout", "megatron_6675")]
    fig.legend(handles=handles, loc="lower center", ncols=6, fontsize=7, frameon=False)
    assert any("policy=" in t for t in clipped_texts(fig))
    fig.legends.clear()
    bottom_legend(fig, handles)
    assert not clipped_texts(fig)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([0, 1], [1, 2], label="budget")
    fig.suptitle("sweep baseline, model=hybrid, workload=chat: longest wait (iterations)", fontsize=11, x=0.01,
                 ha="left")  # as wide as the figure: the legend's title at the top right runs into it
    fig.legend(title="policy", loc="upper right", fontsize=8, title_fontsize=8, frameon=False)
    assert colliding_texts(fig)
    plt.close(fig)


def test_the_overlap_check_sees_crowded_labels_and_fit_x_ticks_clears_them():
    """A negative control for the checks below: 30 long tick labels on a narrow axis do overlap;
    rotating / thinning them clears them."""
    from cgbench.analysis.plots.layout import fit_x_ticks

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(30), range(30))
    ax.set_xticks(range(30), [f"kv_blocks={i * 100}" for i in range(30)])
    assert overlaps(fig)
    fit_x_ticks(fig, [ax])
    assert not overlaps(fig)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- the CI sweep


def test_the_ci_sweep_figures_keep_labels_clear(tmp_path):
    figures, notes = sweep_figures(BASELINE, PlotSpec())
    names = [n for n, _ in figures]
    assert names == ["bars_eager_step_fraction.png", "bars_max_cg_wait_iters.png", "pareto_ttft_ms.p99.png",
                     "pareto_output_throughput_tok_s.png"]
    assert any("not swept" in n for n in notes)
    _all_texts_clear(figures)
    _units_on_every_axis(figures)
    bars = dict(figures)["bars_max_cg_wait_iters.png"]
    # 2 models (rows) x 4 column facets, 2 x-groups x 3 policies each: every bar is labelled
    panels = [ax for ax in bars.axes if ax.patches]
    assert len(panels) == 8
    labelled = sum(len(bar_labels(ax)) for ax in panels)
    assert labelled == sum(len(ax.patches) for ax in panels) == 48
    assert [ax.get_ylabel() for ax in panels[::4]] == ["longest wait (iterations)"] * 2
    for name, fig in figures:
        _one_y_scale_per_metric(name, fig)
    _coinciding_points_are_named(dict(figures)["pareto_ttft_ms.p99.png"], BASELINE)
    for _, fig in figures:
        plt.close(fig)


def _coinciding_points_are_named(fig, sweep: Path) -> None:
    """Every point shared by several policies is labelled with exactly those policies (an oracle from
    the points' metrics, per facet); a point of one policy has no label."""
    from collections import defaultdict

    from cgbench.analysis.plots.data import scaled

    rows = sweep_rows(sweep)
    shared: dict[tuple, list[str]] = defaultdict(list)
    for r in rows:
        facet = tuple(sorted((k, v) for k, v in r.params.items() if k not in ("policy", "cg")))
        xy = (scaled("eager_step_fraction", r.metrics["eager_step_fraction"]), scaled("ttft_ms.p99",
                                                                                     r.metrics["ttft_ms.p99"]))
        shared[(facet, xy)].append(r.params["policy"])
    expected = sorted(" = ".join(ps) for ps in shared.values() if len(ps) > 1)
    labels = sorted(t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "point-label")
    assert labels == expected and expected, labels
    assert not any(t.startswith("x") and t[1:].isdigit() for t in labels)


# ---------------------------------------------------------------------------------------------- a rate sweep


def test_a_rate_sweep_gets_bars_load_curves_and_pareto_with_clear_labels(rate_sweep):
    figures, notes = sweep_figures(rate_sweep, PlotSpec())
    names = [n for n, _ in figures]
    assert names == ["bars_eager_step_fraction.png", "bars_max_cg_wait_iters.png", "load.png",
                     "pareto_ttft_ms.p99.png", "pareto_output_throughput_tok_s.png"]
    _all_texts_clear(figures)
    _units_on_every_axis(figures)
    bars = dict(figures)["bars_eager_step_fraction.png"]
    panels = [ax for ax in bars.axes if ax.patches]
    assert len(panels) == 4  # one per rate; 3 grids x 4 policies in each
    assert sum(len(ax.patches) for ax in panels) == 48
    assert sum(len(bar_labels(ax)) for ax in panels) >= 0.9 * 48, "labels are kept, not dropped wholesale"
    for name, fig in figures:
        _one_y_scale_per_metric(name, fig)  # the load curves: a metric's panels all log or all linear
    for _, fig in figures:
        plt.close(fig)


def test_a_single_panel_sweep_keeps_its_title_and_legend_inside(small_sweep):
    figures, _ = sweep_figures(small_sweep, PlotSpec(filters={"model": "hybrid"}))
    assert [n for n, _ in figures if n.startswith("pareto")]
    _all_texts_clear(figures)
    for _, fig in figures:
        plt.close(fig)


def _oracle_max_rates(sweep: Path, bound: float) -> dict[tuple[str, str], float | None]:
    """Independently from the result files: per (grid, policy), scan the rates upwards while p99
    TTFT stays within the bound."""
    out: dict[tuple[str, str], float | None] = {}
    index = json.loads((sweep / "sweep.json").read_text())
    by: dict[tuple[str, str], dict[float, float]] = {}
    for p in index["points"]:
        doc = json.loads((sweep / p["file"]).read_text())
        key = (p["params"]["cg"], p["params"]["policy"])
        by.setdefault(key, {})[float(p["params"]["workload.arrival.rate"])] = doc["metrics"]["ttft_ms"]["p99"]
    for key, curve in by.items():
        best = None
        for rate in sorted(curve):
            if curve[rate] > bound:
                break
            best = rate
        out[key] = best
    return out


def test_the_load_figure_marks_the_slo_and_each_curves_maximum_sustainable_rate(rate_sweep):
    figures, _ = sweep_figures(rate_sweep, PlotSpec())
    fig = dict(figures)["load.png"]
    ttft_axes = [ax for ax in fig.axes if ax.get_ylabel() == "TTFT p99 (ms)"]
    assert len(ttft_axes) == 3  # one row per grid
    bound = load_config(["slo.ttft_ms=1000"]).slo.ttft_ms
    oracle = _oracle_max_rates(rate_sweep, bound)
    for ax in ttft_axes:
        grid = ax.get_title().split("=", 1)[1]
        slo_lines = [ln for ln in ax.get_lines() if list(ln.get_ydata()) == [bound, bound]]
        assert len(slo_lines) == 1, "one SLO line on every TTFT panel"
        assert any(t.get_text() == f"SLO {bound:g}" for t in ax.texts)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        for policy in ("budget", "megatron", "defer", "pad_guard"):
            entry = next(t for t in legend if t.startswith(policy))
            best = oracle[(grid, policy)]
            assert entry.endswith(f"max {best:g}" if best is not None else "max: none"), (grid, entry)
        stars = [c for c in ax.collections if c.get_paths() and len(c.get_offsets()) == 1]
        assert len(stars) == sum(oracle[(grid, p)] is not None for p in ("budget", "megatron", "defer", "pad_guard"))
    assert ttft_axes[0].get_xscale() == "log" and ttft_axes[0].get_xlabel() == "arrival rate (req/s)"
    plt.close(fig)


def test_identical_curves_are_named_and_drawn_side_by_side(rate_sweep):
    records, _, _ = load_records(rate_sweep)
    figures, _ = sweep_figures(rate_sweep, PlotSpec())
    fig = dict(figures)["load.png"]
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
        for name, ln in lines.items():
            if "(= " in name:
                twin = name.split("(= ")[1].split(")")[0]
                other = next(v for k, v in lines.items() if k.startswith(twin))
                assert list(ln.get_ydata()) == list(other.get_ydata())
                assert list(ln.get_xdata()) != list(other.get_xdata()), "jittered apart, not hidden"
    plt.close(fig)
    assert len(records) == 48


@pytest.mark.parametrize("points,bound,expected", [
    ([(8, 40), (16, 60), (32, 900), (64, 2000)], 1000, 32),
    ([(64, 2000), (8, 40), (32, 900), (16, 60)], 1000, 32),  # order does not matter
    ([(8, 40), (16, 1200), (32, 900)], 1000, 8),  # a miss ends it, even if a higher rate meets it again
    ([(8, 1200), (16, 60)], 1000, None),
    ([(8, 1000)], 1000, 8),  # the bound itself meets the SLO
])
def test_max_sustainable_rate_worked_examples(points, bound, expected):
    assert max_sustainable(points, bound) == expected


@given(st.lists(st.tuples(st.integers(1, 100).map(float), st.floats(0, 100)), min_size=1, max_size=10,
                unique_by=lambda p: p[0]), st.floats(0, 100))
def test_max_sustainable_rate_matches_brute_force(points, bound):
    ok = [x for x, _ in points if all(y <= bound for x2, y in points if x2 <= x)]
    assert max_sustainable(points, bound) == (max(ok) if ok else None)


# ---------------------------------------------------------------------------------------------- options


def test_cli_writes_the_figures_and_honours_facets_and_filters(small_sweep, tmp_path):
    r = plot(small_sweep, "--out", tmp_path / "pics")
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.split()]
    assert [f.name for f in files] == ["bars_eager_step_fraction.png", "bars_max_cg_wait_iters.png",
                                       "pareto_ttft_ms.p99.png", "pareto_output_throughput_tok_s.png"]
    for f in files:
        w, h = png_size(f)
        assert w > 300 and h > 300 and 10_000 < f.stat().st_size < 3_000_000
    r = plot(small_sweep, "--out", tmp_path / "one", "--filter", "model=hybrid", "--y", "ttft_ms.p99",
             "--x", "policy", "--hue", "model")
    assert r.exit_code == 2 and "model" in r.stderr  # filtered to one model, it no longer varies
    r = plot(small_sweep, "--out", tmp_path / "one", "--filter", "model=hybrid", "--y", "ttft_ms.p99",
             "--x", "policy")
    assert r.exit_code == 0, r.output
    assert Path(r.stdout.split()[0]).name == "bars_ttft_ms.p99.png"


def test_sweep_plots_default_to_the_sweep_folder(small_sweep):
    r = plot(small_sweep)
    assert r.exit_code == 0, r.output
    assert all(Path(p).parent == small_sweep / "plots" for p in r.stdout.split())


@pytest.mark.parametrize("args,needle", [
    (["--x", "nope"], "--x: 'nope' does not vary"),
    (["--y", "no_such_metric"], "--y: 'no_such_metric' is not a metric"),
    (["--filter", "policy"], "--filter: 'policy' is not key=value"),
    (["--filter", "policy=nope"], "no point has it"),
    (["--filter", "nokey=1"], "not a key of this sweep"),
    (["--slo", "ttft_ms.p99=fast"], "not a number"),
    (["--hue", "policy", "--row", "policy"], "different keys"),
])
def test_bad_options_exit_2(small_sweep, args, needle):
    r = plot(small_sweep, *args)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


def test_repeats_are_averaged_per_policy_and_grid(tmp_path):
    axes = ["model=hybrid", "policy=budget", "cg=sparse", "workload=small"]
    out = tmp_path / "rep"
    outcome = run_sweep(plan_sweep(axes, repeat=3, out_dir=out))
    rows = sweep_rows(out)
    assert len(rows) == 1 and rows[0].repeats == 3
    docs = [json.loads((out / r.point.file).read_text())["metrics"] for r in outcome.results]
    assert rows[0].metrics["eager_step_fraction"] == pytest.approx(sum(m["eager_step_fraction"] for m in docs) / 3)
    assert rows[0].metrics["ttft_ms.p99"] == pytest.approx(sum(m["ttft_ms"]["p99"] for m in docs) / 3)


# ---------------------------------------------------------------------------------------------- one run


def _run(tmp_path: Path, **kw) -> Path:
    ovr = ["model=hybrid", "cg=sparse", "workload=small"]
    return write_json_atomic(tmp_path / "run.json", run_point(load_config(ovr), ovr, **kw))


def test_a_traced_run_gets_summary_timeline_and_queue_wait_histogram(tmp_path):
    path = _run(tmp_path, trace=True, requests=True)
    r = plot(path, "--out", tmp_path / "pics")
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.split()]
    assert [f.name for f in files] == ["run_summary.png", "run_timeline.png", "run_queue_wait.png"]
    for f in files:
        w, h = png_size(f)
        assert w >= 800 and h >= 400 and f.stat().st_size > 10_000
    assert "note" not in r.stderr


def test_a_plain_run_gets_its_summary_and_notes_for_the_rest(tmp_path):
    r = plot(_run(tmp_path))
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.split()]
    assert [f.name for f in files] == ["run_summary.png"] and files[0].parent == tmp_path / "plots"
    png_size(files[0])
    assert "--trace" in r.stderr and "--requests" in r.stderr


def _synthetic_steps(n: int) -> list[dict]:
    """n iterations; every 997th runs eager, every 1,301st has a deferral (rare events)."""
    return [{"step": i, "real": [100 + i % 50], "graph": None if i % 997 == 0 else [128],
             "deferred": [i] if i % 1301 == 0 else None, "queue_len": i % 7, "paused": 0} for i in range(n)]


def test_a_long_timeline_is_downsampled_and_keeps_every_eager_iteration_and_deferral():
    steps = _synthetic_steps(33_150)
    fig = timeline_figure(plt, steps, "long")
    a1, a2, a3 = fig.axes[:3]
    assert all(len(ln.get_xdata()) <= TIMELINE_BINS for ax in (a1, a2) for ln in ax.get_lines())
    eager = [c for c in a1.collections if c.get_label().startswith("eager")]
    assert len(eager) == 1 and len(eager[0].get_offsets()) == sum(s["graph"] is None for s in steps)
    deferral_bars = a3.collections[0]
    heights = [seg[1][1] - seg[0][1] for seg in deferral_bars.get_segments()]
    assert sum(heights) == sum(s["deferred"] is not None for s in steps)
    running = fig.axes[3].get_lines()[0].get_ydata()
    assert running[-1] == sum(s["deferred"] is not None for s in steps)
    assert a3.get_xlabel() == "iteration"
    plt.close(fig)


def test_queue_wait_histograms_have_a_log_count_axis():
    reqs = [{"arrival_step": 0, "first_admit_step": 1, "max_cg_wait_iters": 0}] * 500 + \
        [{"arrival_step": 0, "first_admit_step": 400, "max_cg_wait_iters": 90}]
    fig = queue_wait_figure(plt, reqs, "tail")
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log"]
    assert [ax.get_xlabel() for ax in fig.axes] == ["queue wait (iterations)", "longest wait (iterations)"]
    plt.close(fig)


def _bars(ax) -> list[tuple[float, float, float]]:
    """(left, right, height) of a histogram's bars."""
    return [(p.get_x(), p.get_x() + p.get_width(), p.get_height()) for p in ax.patches]


@pytest.mark.parametrize("values", [[0, 1], [0] * 7 + [1] * 3, [3, 4, 4, 9], list(range(0, 500, 7)), [5]])
def test_queue_wait_histograms_centre_their_bins_on_whole_values(values):
    """Integer waits: 0 and 1 fall in [-0.5, 0.5) and [0.5, 1.5), never [0, 0.5) and [0.5, 1]; every bin
    holds the same number of whole values, at most 50 bins, and counts what it covers."""
    reqs = [{"arrival_step": 0, "first_admit_step": v, "max_cg_wait_iters": v} for v in values]
    fig = queue_wait_figure(plt, reqs, "integers")
    for ax in fig.axes:
        bars = _bars(ax)
        widths = {round(r - left, 9) for left, r, _ in bars}
        assert len(widths) == 1 and (w := widths.pop()) == int(w) >= 1 and len(bars) <= 50
        assert all((left + 0.5) == int(left + 0.5) for left, _, _ in bars)  # edges at half-integers
        assert bars[0][0] == min(values) - 0.5 and bars[-1][1] >= max(values) + 0.5
        assert [h for _, _, h in bars] == [sum(left < v < r for v in values) for left, r, _ in bars]
    plt.close(fig)


def _records(values: list[float], y: str = "output_throughput_tok_s") -> list:
    from cgbench.analysis.plots.data import Record

    return [Record({"policy": p}, {"eager_step_fraction": 0.1 * i, y: v})
            for i, (p, v) in enumerate(zip(("budget", "megatron", "defer", "cover"), values, strict=False))]


def test_a_tiny_spread_looks_tiny_on_the_pareto_panel():
    """A 0.008 tok/s spread over ~5,123 tok/s: no offset notation, and the points sit in a sliver of the
    panel (the axis spans at least 2% of the values); a real spread still fills the panel."""
    from cgbench.analysis.plots.layout import MIN_RELATIVE_SPAN
    from cgbench.analysis.plots.pareto import pareto_figure

    fig = pareto_figure(plt, _records([5123.450, 5123.452, 5123.455, 5123.458]), [], "policy", None,
                        "output_throughput_tok_s", "tiny spread")
    fig.canvas.draw()
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert ax.yaxis.get_offset_text().get_text() == ""
    assert hi - lo >= MIN_RELATIVE_SPAN * 5123.458 * (1 - 1e-9) and lo < 5123.450 and hi > 5123.458
    assert 0.008 / (hi - lo) < 0.01  # under 1% of the height
    shown = [float(t.get_text().replace(",", "").replace("\u2212", "-")) for t in ax.get_yticklabels()
             if t.get_text() and lo <= t.get_position()[1] <= hi]
    assert len(shown) >= 2 and all(5000 < v < 5250 for v in shown)  # the values themselves, not 0.002 + offset
    plt.close(fig)
    fig = pareto_figure(plt, _records([4000.0, 4500.0, 5000.0, 5200.0]), [], "policy", None,
                        "output_throughput_tok_s", "real spread")
    lo, hi = fig.axes[0].get_ylim()
    assert 1200 / (hi - lo) > 0.5
    plt.close(fig)


def test_the_load_panels_of_a_metric_share_their_y_limits():
    """The rate_load caption's promise: a metric keeps one y scale in every row (kind and limits), so a
    grid whose latency is ten times another's looks ten times higher."""
    from cgbench.analysis.plots.data import Record, Roles
    from cgbench.analysis.plots.load import load_figure

    records = [Record({"cg": cg, "policy": "budget", "workload.arrival.rate": str(rate)},
                      {"ttft_ms.p99": scale * rate, "output_throughput_tok_s": 100.0 * rate / scale})
               for cg, scale in (("megatron", 1.0), ("sparse", 10.0)) for rate in (8, 16, 32)]
    ys = ["ttft_ms.p99", "output_throughput_tok_s"]
    fig = load_figure(plt, records, Roles(["workload.arrival.rate"], "policy", ["cg"], []), ys, {}, "load")
    axes = [ax for ax in fig.axes if ax.has_data()]
    assert len(axes) == 4
    for y in ys:
        panels = [ax for ax in axes if ax.get_ylabel() == axes[ys.index(y)].get_ylabel()]
        assert len(panels) == 2 and panels[0].get_ylim() == panels[1].get_ylim()
        assert len({ax.get_yscale() for ax in panels}) == 1
    ttft_top, ttft_bottom = axes[0], axes[2]
    assert ttft_top.get_ylim()[1] >= 320 and ttft_bottom.get_ylim()[1] >= 320  # sparse's 320 ms on both
    plt.close(fig)


@pytest.mark.parametrize("make,needle", [
    (lambda d: d / "missing", "no such file"),
    (lambda d: d, "no sweep.json"),
    (lambda d: (d / "x.json").write_text("{oops") and d / "x.json", "not valid JSON"),
    (lambda d: (d / "x.json").write_text('{"a": 1}') and d / "x.json", "not a cgbench result"),
])
def test_bad_input_exits_2(tmp_path, make, needle):
    target = make(tmp_path)
    r = plot(target)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


def test_importing_the_commands_does_not_import_matplotlib_or_hydra():
    code = ("import sys; import cgbench.cli.app, cgbench.cli.sweep; "
            "print(sorted(m for m in ('matplotlib', 'hydra', 'cgbench.analysis.plots.plot', "
            "'cgbench.analysis.sweep.run') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_plot_sweep_writes_what_sweep_figures_builds(small_sweep, tmp_path):
    files, _ = plot_sweep(small_sweep, tmp_path / "p")
    figures, _ = sweep_figures(small_sweep, PlotSpec())
    assert [f.name for f in files] == [n for n, _ in figures]
    for _, fig in figures:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------- Pareto


def _front_by_sweep_line(points: list[tuple[float, float]], maximize_y: bool) -> set[int]:
    """Independent oracle: scan x ascending; a point is on the front if its y beats every y seen at a
    strictly smaller x and is the best y at its own x (ties in both coordinates all stay)."""
    sign = -1.0 if maximize_y else 1.0
    best_before = float("inf")
    out: set[int] = set()
    xs = sorted({p[0] for p in points})
    for x in xs:
        group = [i for i, p in enumerate(points) if p[0] == x]
        best_here = min(sign * points[i][1] for i in group)
        if best_here < best_before:
            out |= {i for i in group if sign * points[i][1] == best_here}
        best_before = min(best_before, best_here)
    return out


coords = st.integers(min_value=0, max_value=6).map(float)


@given(st.lists(st.tuples(coords, coords), min_size=1, max_size=12), st.booleans())
def test_pareto_front_matches_a_sweep_line_oracle(points, maximize):
    assert set(pareto_front(points, maximize)) == _front_by_sweep_line(points, maximize)
