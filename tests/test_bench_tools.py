"""The measuring tools of ``scripts/bench.py`` that the performance figures rest on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[1]



@pytest.mark.slow  # a measured 300-request chat run
def test_the_stretch_split_counts_inside_and_outside_decode_stretches():
    """A chat run spends part of its time in decode stretches and part outside (arrivals, rounds that
    admit, the metrics); the split is a part of the run's own CPU time, in plain Python."""
    rec = load_script("bench").stretch_share(["workload=chat", "workload.num_requests=300"])
    assert rec["build"] == "python"
    assert 0.0 < rec["stretch_s"] < rec["cpu_s"]


def test_the_two_bounds_follow_from_the_split(monkeypatch):
    bench = load_script("bench")
    runs = iter([{"cpu_s": 1.0, "stretch_s": 0.6}, {"cpu_s": 1.2, "stretch_s": 0.7}, {"cpu_s": 0.9, "stretch_s": 0.5}])
    monkeypatch.setattr(bench, "stretch_share", lambda overrides: next(runs))
    c = bench.ceiling(["workload=chat"], 3, oracle_s=4.4)
    assert c["stretch_s"] == 0.6 and c["outside_s"] == pytest.approx(0.4)
    assert c["ceiling"] == pytest.approx(4.4 / 0.4)  # (S + X) / S: stretches free
    assert c["shared_free"] == pytest.approx((4.4 - 0.4) / 0.6)  # X / Y: shared work free
