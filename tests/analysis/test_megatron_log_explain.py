"""``cgbench explain --megatron-log``'s analysis, held to the simulator's own runs: a run written as a
Megatron log (``run --emit-megatron-log``'s writer) and read back must give that run's metrics, and
a what-if grid must give what running on that grid gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cgbench.analysis.megatron_log.digest import digest_log
from cgbench.analysis.megatron_log.emit import log_text
from cgbench.analysis.megatron_log.explain import COVERED, explain_megatron_log
from cgbench.analysis.megatron_log.grid import CAPTURE, CONFIG, REPLAYED, miss_detail
from cgbench.config.compose import load_config
from cgbench.grids.lookup import Grid
from cgbench.grids.shapes import BatchShape
from cgbench.pipeline import run_point
from cgbench.workload import megatron_log_format as fmt

pytestmark = pytest.mark.slow

HYBRID = ["model=hybrid", "cg=megatron", "policy=budget"]  # 15 eager steps, reason shape (README)
DECODE_ONLY = ["model=transformer", "cg=decode_only", "policy=budget", "workload=chat", "workload.num_requests=120"]
PAD_GUARD = ["model=transformer", "cg=sparse", "policy=pad_guard", "workload=chat", "workload.num_requests=120",
             "engine.megatron_rules=main", "engine.chunked_prefill=true"]


def emitted(tmp_path: Path, overrides: list[str], name: str = "run.log", *, interval: int = 1,
            drop: str | None = None) -> tuple[Path, dict]:
    cfg = load_config(overrides)
    doc = run_point(cfg, overrides)
    text, _, _ = log_text(cfg, doc["metrics"], interval=interval)
    if drop is not None:
        text = "".join(line for line in text.splitlines(keepends=True) if drop not in line)
    path = tmp_path / name
    path.write_text(text)
    return path, doc["metrics"]


@pytest.mark.parametrize("overrides", [HYBRID, DECODE_ONLY, PAD_GUARD], ids=["hybrid", "decode_only", "pad_guard"])
def test_the_log_of_a_run_explains_to_the_runs_metrics(tmp_path, overrides):
    path, m = emitted(tmp_path, overrides)
    doc, _ = explain_megatron_log(str(path), overrides=overrides)
    (r,) = doc["ranks"]
    assert (r["steps"], r["graphed_steps"], r["eager_steps"]) == (m["steps"], m["graphed_steps"], m["eager_steps"])
    assert r["eager_step_fraction"] == round(m["eager_step_fraction"], 6)
    assert {k: v["steps"] for k, v in r["eager_by_reason"].items()} == m["eager_steps_by_reason"]
    # each step's time is logged to the µs (%.3f ms): the sums agree to half a µs a step
    assert abs(r["eager_time_ms"] / 1e3 - m["eager_time_s"]) <= 0.5e-6 * (m["eager_steps"] + 2)
    assert abs(r["step_time_ms"] / 1e3 - m["graphed_time_s"] - m["eager_time_s"]) <= 0.5e-6 * (m["steps"] + 2)
    assert doc["grid"]["source"] == CONFIG and doc["flags"] == []


def test_without_a_config_the_grid_is_the_logs_capture_then_its_replayed_graphs(tmp_path):
    path, m = emitted(tmp_path, HYBRID)
    doc, _ = explain_megatron_log(str(path))
    (r,) = doc["ranks"]
    assert doc["grid"]["source"] == CAPTURE and doc["grid"]["graphs"] == 101 and doc["grid"]["strict"]
    assert {k: v["steps"] for k, v in r["eager_by_reason"].items()} == m["eager_steps_by_reason"]
    assert doc["pricing"] is None
    bare, _ = emitted(tmp_path, HYBRID, "bare.log", drop="[graph ")
    doc, _ = explain_megatron_log(str(bare))
    assert doc["grid"]["source"] == REPLAYED and doc["grid"]["graphs"] == r["graphs_replayed"]
    assert doc["ranks"][0]["eager_steps"] == m["eager_steps"]


def test_a_transformer_log_is_inferred_non_strict(tmp_path):
    """The hybrid's eager shapes (P = 3 in the P-grid gap) replay (2048, 4, 252) on a transformer, a decode
    in a prefill slot: only non-strict matching explains that."""
    path, _ = emitted(tmp_path, ["model=transformer", "cg=megatron", "policy=budget"], drop="[graph ")
    doc, _ = explain_megatron_log(str(path))
    assert not doc["grid"]["strict"] and "inferred (a transformer" in doc["grid"]["strict_source"]
    assert doc["ranks"][0]["eager_steps"] == 0


def test_a_what_if_grid_gives_what_running_on_it_gives(tmp_path):
    """Without gating the schedule does not depend on the grid: re-matching the log's shapes against
    cg=dense and pricing them with the model fitted to the log is the run on cg=dense."""
    path, m = emitted(tmp_path, HYBRID)
    doc, _ = explain_megatron_log(str(path), overrides=HYBRID, what_ifs=["cg=dense"])
    (w,) = doc["ranks"][0]["what_if"]
    dense = run_point(load_config([*HYBRID, "cg=dense"]), [])["metrics"]
    assert w["eager_steps"] == dense["eager_steps"]
    assert w["eager_steps_saved"] == m["eager_steps"] - dense["eager_steps"] and w["eager_steps_added"] == 0
    change = dense["makespan_s"] - m["makespan_s"]
    assert w["time_change_ms"] / 1e3 == pytest.approx(change, rel=0.01)


def test_gating_what_if_defers_the_shape_misses(tmp_path):
    path, m = emitted(tmp_path, HYBRID)
    doc, _ = explain_megatron_log(str(path), overrides=HYBRID)
    (w,) = doc["ranks"][0]["what_if"]
    assert w["gating"] and w["eager_steps"] == 0 and w["eager_steps_saved"] == m["eager_steps"]
    gated = run_point(load_config(["model=hybrid", "cg=megatron", "policy=megatron"]), [])["metrics"]
    assert gated["eager_steps"] == 0  # what #4870 does to these shapes: no step runs eager
    assert w["requests_deferred"] >= m["eager_steps"] and w["prompt_tokens_moved"] > 0


def test_a_log_of_another_model_or_grid_is_flagged_by_name(tmp_path):
    path, _ = emitted(tmp_path, HYBRID)
    doc, _ = explain_megatron_log(str(path), overrides=["model=nemotron_h_8b", "cg=megatron"])
    assert "other_model" in {f["code"] for f in doc["flags"]}
    assert any("'hybrid'" in f["message"] and "'nemotron_h_8b'" in f["message"] for f in doc["flags"])
    doc, _ = explain_megatron_log(str(path), overrides=["model=hybrid", "cg=sparse"])
    codes = {f["code"] for f in doc["flags"]}
    assert {"other_grid", "graph_not_in_grid"} <= codes
    # a real Megatron log carries no header: its capture listing and replayed graphs still tell
    bare, _ = emitted(tmp_path, HYBRID, "bare.log", drop="cgbench:")
    doc, _ = explain_megatron_log(str(bare), overrides=["model=hybrid", "cg=sparse"])
    assert {"other_grid", "graph_not_in_grid"} <= {f["code"] for f in doc["flags"]}


def test_sampled_log_is_stated(tmp_path):
    path, m = emitted(tmp_path, HYBRID, interval=4)
    doc, _ = explain_megatron_log(str(path), overrides=HYBRID)
    (r,) = doc["ranks"]
    assert r["interval"] == 4 and "one step in 4" in r["sampling"] and r["steps"] == m["steps"] // 4


def test_streaks_and_deferral_like_waits(tmp_path):
    def line(step, graph, waiting=0, active=10, P=0):
        v = fmt.LineValues(rank=0, step=step, clock="00:00:00", ms=10.0, kind="decode", real=(10, P, 10 - P),
                           graph=graph, active=active, max_requests=16, paused=0, waiting=waiting, finished=0,
                           evicted=0, active_used=5, active_total=100, paused_used=0, paused_total=0)
        return fmt.format_line(v, fmt.V019)

    g = (16, 0, 16)
    lines = [line(1, None), line(2, None), line(3, g, waiting=3), line(4, None, waiting=3), line(5, None, waiting=3),
             line(6, None, waiting=3), line(7, g, waiting=3, active=16), line(8, g)]
    path = tmp_path / "hand.log"
    path.write_text("\n".join(lines) + "\n")
    r = digest_log(path).rank()
    assert (r.longest_eager.steps, r.longest_eager.first_step, r.longest_eager.last_step) == (3, 4, 6)
    assert (r.wait_steps, r.longest_wait.steps, r.longest_wait.first_step) == (4, 4, 3)


def test_miss_details_say_what_the_grid_lacks():
    grid = Grid("t", [BatchShape(2048, 4, 252), BatchShape(2048, 2, 254), BatchShape(256, 0, 256),
                      BatchShape(64, 0, 64)], strict=True)
    assert "has D < 253" in miss_detail(grid, (1566, 3, 253), "shape", True)
    assert "(2048, 4, 252)" in miss_detail(grid, (1566, 3, 253), "shape", True)
    assert "above the largest prefill/mixed graph's T = 2048" in miss_detail(grid, (3000, 1, 10), "tokens_over_max",
                                                                           True)
    assert "no graph with T >= 100 has P >= 5" in miss_detail(grid, (100, 5, 0), "shape", True)
    assert "T = 300 is above the largest decode-only graph's T = 256" in miss_detail(
        grid, (300, 0, 300), "decode_only_over_max", True)
    assert "has P + D < 257" in miss_detail(grid, (1566, 3, 254), "shape", False)
    assert COVERED == "covered"


def test_memory_stays_bounded_past_the_shape_budget(tmp_path, monkeypatch):
    from cgbench.analysis.megatron_log import digest as megatron_log_digest

    monkeypatch.setattr(megatron_log_digest, "MAX_SHAPES", 4)
    lines = []
    for step, T in enumerate((10, 11, 12, 13, 100, 101, 130, 200, 300, 400, 500), 1):
        v = fmt.LineValues(rank=step % 2, step=step, clock="00:00:00", ms=1.0, kind="non-decode", real=(T, 1, 0),
                           graph=None, active=1, max_requests=16, paused=0, waiting=0, finished=0, evicted=0,
                           active_used=1, active_total=100, paused_used=0, paused_total=0)
        lines.append(fmt.format_line(v, fmt.V019))
    path = tmp_path / "many.log"
    path.write_text("\n".join(lines) + "\n")
    d = digest_log(path)
    assert sum(len(r.shapes) for r in d.ranks.values()) == 8  # 4 exact, 4 rounded up to a multiple of 64
    assert sum(r.folded_steps for r in d.ranks.values()) == 7
    # 100 and 101 round to 128 on two ranks, 130 to 192, 200 to 256: then no room for 320, 448 or 512
    assert sum(r.unkept_steps for r in d.ranks.values()) == 3
    assert sum(r.eager_steps for r in d.ranks.values()) == 11  # every step still counted
    assert ((128, 1, 0), None) in d.ranks[0].shapes or ((128, 1, 0), None) in d.ranks[1].shapes


def test_ranks_are_explained_apart(tmp_path):
    """Two ranks' lines interleaved (rank 1 a copy of rank 0 with every graph OFF): each rank its own."""
    path, m = emitted(tmp_path, HYBRID)
    lines = []
    for line in path.read_text().splitlines():
        lines.append(line)
        if "* rank 0 | " in line:
            other = line.replace("* rank 0 | ", "* rank 1 | ")
            lines.append(re.sub(r"\+ cuda graph \[\d+\]: \d+ P \+ \d+ D\]", "+ cuda graph OFF]", other))
    both = tmp_path / "two_ranks.log"
    both.write_text("\n".join(lines) + "\n")
    doc, _ = explain_megatron_log(str(both), overrides=HYBRID)
    r0, r1 = doc["ranks"]
    assert (r0["rank"], r0["eager_steps"]) == (0, m["eager_steps"])
    assert (r1["rank"], r1["eager_steps"], r1["graphed_steps"]) == (1, m["steps"], 0)
    assert r1["eager_by_reason"].get(COVERED, {}).get("steps") == m["graphed_steps"]  # a graph covered each
    assert doc["log"]["ranks"] == [0, 1]
