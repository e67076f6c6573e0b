"""The README's figure captions are generated with the figures (scripts/plot_figures.py): the CI
figure's caption holds what results/baseline gives, and the caption writers compute their numbers
from the sweep they are handed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baseline"



def test_the_readme_ci_caption_is_what_the_baseline_gives():
    script = load_script("plot_figures")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert script.caption_in(readme, "ci_longest_wait") == script.ci_caption(BASELINE), (
        "README's ci_longest_wait caption is stale: run python scripts/plot_figures.py --captions-only")
    index = json.loads((BASELINE / "sweep.json").read_text())
    longest = {p["params"]["model"]: p["metrics"]["max_cg_wait_iters"] for p in index["points"]
               if p["params"]["policy"] == "defer" and p["params"]["engine.chunked_prefill"] == "True"
               and p["params"]["workload"] == "chat"}
    caption = script.caption_in(readme, "ci_longest_wait").replace("\n", " ")
    assert f"({longest['transformer']} and {longest['hybrid']} iterations" in caption


def test_a_changed_wait_changes_the_caption(tmp_path):
    """The check above can fail: one point's longest wait changed gives another caption."""
    script = load_script("plot_figures")
    changed = tmp_path / "baseline"
    changed.mkdir()
    index = json.loads((BASELINE / "sweep.json").read_text())
    point = next(p for p in index["points"] if p["metrics"]["max_cg_wait_iters"] >= 100)
    point["metrics"]["max_cg_wait_iters"] += 50
    (changed / "sweep.json").write_text(json.dumps(index))
    caption = script.ci_caption(changed)
    assert caption != script.ci_caption(BASELINE) and str(point["metrics"]["max_cg_wait_iters"]) in caption
    shutil.rmtree(changed)


def test_the_rate_caption_names_each_grids_maximum_sustainable_rates(tmp_path):
    script = load_script("plot_figures")
    ttft = {("megatron", "budget"): [50, 60, 900, 3000], ("megatron", "defer"): [50, 60, 900, 3000],
            ("sparse", "budget"): [200, 1200, 5000, 9000], ("sparse", "pad_guard"): [40, 50, 60, 2000]}
    points = []
    for (cg, policy), values in ttft.items():
        for rate, v in zip((8, 16, 32, 64), values, strict=True):
            points.append({"status": "done", "params": {"cg": cg, "policy": policy, "workload.arrival.rate": str(rate)},
                           "metrics": {"ttft_ms.p99": v, "output_throughput_tok_s": 100.0 * rate + len(policy)}})
    (tmp_path / "sweep.json").write_text(json.dumps({"axes": {"slo.ttft_ms": ["1000"],
                                                              "workload.num_requests": ["600"]}, "points": points}))
    caption = script.rate_caption(tmp_path).replace("\n", " ")
    assert "megatron: every policy 32; sparse: `budget` 8; `pad_guard` 32." in caption
    assert "6,409 tok/s (`pad_guard`, sparse grid, 64 req/s)" in caption
