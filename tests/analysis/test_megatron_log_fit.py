"""``cgbench calibrate --megatron-log``'s fit, held to the simulator: a run written as a Megatron log is
fitted back to the parameters it ran with, and the fit says what the log cannot identify.

Stated tolerance: on a log of the simulator (its times logged to the µs, its context known only as
KV blocks), the host µs per op comes back within 1 % and every identified efficiency within 2 % of
what the run used, each inside its reported ±2 standard-error range."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgbench.analysis.megatron_log.calibrate import calibrate_megatron_log, fitted_ranges
from cgbench.analysis.megatron_log.config import log_config
from cgbench.analysis.megatron_log.digest import digest_log
from cgbench.analysis.megatron_log.emit import log_text
from cgbench.analysis.megatron_log.fit import context_tokens, fit
from cgbench.backends.sim.log_calibration import LogCalibration
from cgbench.backends.sim.uncertainty import UNCERTAIN
from cgbench.config.compose import load_config
from cgbench.config.schema import ConfigError
from cgbench.pipeline import run_point

pytestmark = pytest.mark.slow

# host-bound eager steps (every prefill step: a decode-only grid) next to graphed decode steps
MIXED = ["model=transformer", "cg=decode_only", "policy=budget", "workload=chat", "workload.num_requests=300"]
HOST_TOLERANCE, EFFICIENCY_TOLERANCE = 0.01, 0.02


def log_of(tmp_path: Path, overrides: list[str]) -> Path:
    cfg = load_config(overrides)
    text, _, _ = log_text(cfg, run_point(cfg, overrides)["metrics"])
    path = tmp_path / "run.log"
    path.write_text(text)
    return path


@pytest.mark.parametrize("host_op_us", [None, 3.0, 8.0], ids=["default", "3.0us", "8.0us"])
def test_the_fit_recovers_the_simulators_parameters(tmp_path, host_op_us):
    ran = MIXED + ([f"hardware.host_op_us={host_op_us}"] if host_op_us is not None else [])
    truth = load_config(ran).hardware
    found = fit(digest_log(log_of(tmp_path, ran)), load_config(MIXED))
    host = found.parameter("hardware.host_op_us")
    assert host.identified
    assert host.value == pytest.approx(host_op_us or 4.05, rel=HOST_TOLERANCE)
    identified = [p for p in found.parameters if p.identified]
    assert {p.key for p in identified} >= {"hardware.flops_efficiency", "hardware.bandwidth_efficiency"}
    for p in identified:
        true = host_op_us or 4.05 if p.key == "hardware.host_op_us" else getattr(truth, p.key.split(".")[1])
        if p.key != "hardware.host_op_us":
            assert p.value == pytest.approx(true, rel=EFFICIENCY_TOLERANCE), p.key
        assert p.low <= true <= p.high, p.key
    assert found.residuals["all"]["rms_rel_error"] < 0.005
    # the eager − graphed evidence: a host-bound eager step implies the host's µs per op, a GPU-bound one
    # bounds it from above
    true_host = host_op_us or 4.05
    assert any(not e["bound"] for e in found.host_evidence)
    for e in found.host_evidence:
        if e["bound"]:
            assert e["host_us_per_op"] >= true_host * 0.99
        else:
            assert e["host_us_per_op"] == pytest.approx(true_host, rel=0.01)


def test_a_log_with_no_eager_step_cannot_price_one(tmp_path):
    path = log_of(tmp_path, ["model=transformer", "cg=megatron", "policy=budget", "workload=chat",
                             "workload.num_requests=120"])
    host = fit(digest_log(path), load_config(["model=transformer"])).parameter("hardware.host_op_us")
    assert not host.identified and host.value == 4.05 and "no eager step, so it cannot price one" in host.note


def test_gpu_bound_eager_steps_only_bound_the_host(tmp_path):
    """The hybrid's 15 eager steps are large prefills, their GPU work longer than their host's issue."""
    found = fit(digest_log(log_of(tmp_path, ["model=hybrid", "cg=megatron", "policy=budget"])),
                load_config(["model=hybrid"]))
    host = found.parameter("hardware.host_op_us")
    assert not host.identified and "at most" in host.note and "GPU work" in host.note
    # these steps' Mamba time is the 253 decode rows' state updates, bandwidth-bound: the chunked
    # scan's tensor-core rate prices none of them, and the fit says so rather than guess it
    scan = found.parameter("hardware.scan_efficiency")
    assert not scan.identified and "no logged step's price depends on it" in scan.note
    assert found.host_evidence and all(e["bound"] and e["difference_ms"] < 1.0 for e in found.host_evidence)


def test_a_transformer_has_no_scan_to_fit(tmp_path):
    found = fit(digest_log(log_of(tmp_path, MIXED)), load_config(MIXED))
    scan = found.parameter("hardware.scan_efficiency")
    assert not scan.identified and "does not use it" in scan.note


def test_the_context_estimate_from_blocks():
    # 3 requests holding 10 blocks of 16 tokens: each last block half full on average
    assert context_tokens((20, 1, 2), 10, 16) == 10 * 16 - 3 * 8
    assert context_tokens((500, 1, 2), 10, 16) == 500  # never below the step's own tokens


def test_calibrate_refuses_another_models_log_and_a_missing_model(tmp_path):
    path = log_of(tmp_path, MIXED)
    with pytest.raises(ConfigError, match="emitted for model 'transformer'.*not for model 'hybrid'"):
        calibrate_megatron_log(path, log_config(["model=hybrid", "cg=decode_only"], None, []))
    with pytest.raises(ConfigError, match="name the model"):
        calibrate_megatron_log(path, log_config([], None, []))
    with pytest.raises(ConfigError, match="name the model"):
        calibrate_megatron_log(path, log_config(["cg=decode_only"], None, []))


def test_the_calibration_file_round_trips_and_prices_the_run(tmp_path):
    ran = [*MIXED, "hardware.host_op_us=8.0"]
    found = calibrate_megatron_log(log_of(tmp_path, ran), log_config(MIXED, None, []))
    again = LogCalibration.from_dict(found.calibration.to_dict())
    assert again == found.calibration
    assert again.fitted["hardware.host_op_us"] == pytest.approx(8.0, rel=HOST_TOLERANCE)
    path = tmp_path / "fit.json"
    path.write_text(__import__("json").dumps(again.to_dict()))
    cfg = load_config([*MIXED, f"hardware.host_calibration={path}"])
    m = run_point(cfg, [])
    assert m["environment"]["calibration"].startswith(f"fitted to megatron log {tmp_path / 'run.log'}")
    truth = run_point(load_config(ran), [])["metrics"]
    assert m["metrics"]["makespan_s"] == pytest.approx(truth["makespan_s"], rel=0.005)
    # --sensitivity's ranges: the fitted ones, the values in the config itself
    resolved, params = fitted_ranges(cfg, UNCERTAIN)
    assert resolved.hardware.host_calibration is None
    assert resolved.hardware.host_op_us == again.fitted["hardware.host_op_us"]
    host = next(p for p in params if p.key == "hardware.host_op_us")
    assert (host.low, host.high) == again.ranges()["hardware.host_op_us"] and "fitted to megatron log" in host.source
    assert any(p.key == "hardware.attention_bandwidth_efficiency" for p in params)  # fitted, not a default range


def test_a_log_calibration_is_refused_on_other_hardware_or_bad_values(tmp_path):
    found = calibrate_megatron_log(log_of(tmp_path, MIXED), log_config(MIXED, None, []))
    data = found.calibration.to_dict()
    path = tmp_path / "fit.json"
    path.write_text(__import__("json").dumps(data))
    with pytest.raises(ConfigError, match="fitted on hardware=h100, but this run is hardware=a100"):
        run_point(load_config([*MIXED, "hardware=a100", f"hardware.host_calibration={path}"]), [])
    with pytest.raises(ConfigError, match="host_profile=megatron's op counts"):
        run_point(load_config([*MIXED, "hardware.host_profile=vllm", f"hardware.host_calibration={path}"]), [])
    data["fitted"]["hardware.bandwidth_efficiency"] = 1.5
    with pytest.raises(ConfigError, match=r"fitted.hardware.bandwidth_efficiency: must be a number in \(0, 1\]"):
        LogCalibration.from_dict(data)
