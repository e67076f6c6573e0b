"""Non-finite arithmetic refused at the input (issue 44 class 9): efficiencies whose rates divide by zero,
host times that sum to infinity, ``--sensitivity`` ranges that reach an unpriceable end, speculative
length weights whose sum overflows."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from tests.helpers import one_error_line

runner = CliRunner()
SMALL = ["model=hybrid", "workload.num_requests=8"]


@pytest.mark.parametrize(("override", "words"), [
    ("hardware.attention_efficiency=1e-300", ("hardware.attention_efficiency", "outside the simulated range")),
    ("hardware.scan_efficiency=1e-300", ("hardware.scan_efficiency", "outside the simulated range")),
    ("hardware.attention_bandwidth_efficiency=1e-300", ("attention_bandwidth_efficiency", "simulated range")),
    ("hardware.host_op_us=1e300", ("hardware.host_op_us: 1e+300 us is longer than",)),
    ("hardware.sync_us=1e300", ("hardware.sync_us: 1e+300 us is longer than",)),
])
@pytest.mark.parametrize("sensitivity", [[], ["--sensitivity"]])
def test_rates_and_times_the_clock_cannot_hold_are_refused_before_the_run(tmp_path, override, words,
                                                                          sensitivity) -> None:
    r = runner.invoke(app, ["run", *SMALL, override, *sensitivity, "--out", str(tmp_path / "r.json")])
    one_error_line(r, *words)
    assert not (tmp_path / "r.json").exists()


def test_a_sensitivity_range_whose_end_cannot_be_priced_is_refused(tmp_path) -> None:
    # a valid run (1.05e-9 x 989e12 FLOP/s is above the 1e6 floor) whose range's low end rounds to 0
    args = ["run", *SMALL, "hardware.scan_efficiency=1.05e-9", "--out", str(tmp_path / "r.json")]
    r = runner.invoke(app, [*args, "--sensitivity"])
    one_error_line(r, "--sensitivity: hardware.scan_efficiency=1.05e-09 puts its range's end at 0",
                   "outside the simulated range")
    assert not (tmp_path / "r.json").exists()


def test_length_weights_that_sum_past_the_float_maximum_are_refused(tmp_path) -> None:
    r = runner.invoke(app, ["run", "engine.num_speculative_tokens=2", "engine.spec_acceptance.lengths=[1e308,1e308,1]",
                            "workload.num_requests=4", "--out", str(tmp_path / "r.json")])
    one_error_line(r, "engine.spec_acceptance.lengths: weights sum to inf")
