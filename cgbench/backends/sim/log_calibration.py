"""A calibration fitted to a production log (``cgbench calibrate --megatron-log``), as the simulator reads it.

The file is named by ``hardware.host_calibration``, the key that already names a machine's measured
host cost (``cgbench calibrate --host``): this one holds the host's µs per op and the GPU's
efficiencies, each fitted to the steps of a Megatron log on that machine, with its uncertainty,
and the log it came from. ``applied`` puts the fitted values in place of the hardware preset's;
``ranges`` gives ``--sensitivity`` the fitted range of each identified parameter instead of its
default one. Schema ``cgbench.log_calibration/1``::

    {"schema": "cgbench.log_calibration/1", "hardware": "h100", "model": {"name": ..., "kind": ...},
     "host_profile": "megatron",                                          # whose op counts host_op_us is per
     "fitted": {"hardware.bandwidth_efficiency": 0.83, ...},            # identified: applied
     "kept": {"hardware.attention_efficiency": "why it was not identified", ...},
     "uncertainty": {"hardware.bandwidth_efficiency": {"sigma_rel": 0.004, "low": 0.82, "high": 0.84}},
     "source": {"megatron_log": PATH, "sha256": ..., "bytes": ..., "steps": ..., "format": "0.19"},
     "residuals": {...}, "created_at": ..., "notes": [...]}

A fitted value outside what the config accepts (an efficiency above 1) is refused when read.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cgbench.config.schema import ConfigError, HardwareConfig

LOG_CALIBRATION_SCHEMA = "cgbench.log_calibration/1"
FITTABLE = ("hardware.flops_efficiency", "hardware.bandwidth_efficiency", "hardware.attention_efficiency",
            "hardware.attention_bandwidth_efficiency", "hardware.scan_efficiency", "hardware.host_op_us")
_AT_MOST = {k: 1.0 for k in FITTABLE if k.endswith("efficiency")}
_MAX_HOST_OP_US = 1e6


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class LogCalibration:
    hardware: str
    model: dict[str, str]
    fitted: dict[str, float]
    host_profile: str = "megatron"  # the host profile whose op counts the host's µs per op was fitted with
    kept: dict[str, str] = field(default_factory=dict)
    uncertainty: dict[str, dict[str, float]] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    residuals: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    created_at: str = field(default_factory=_now)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": LOG_CALIBRATION_SCHEMA, "hardware": self.hardware, "model": dict(self.model),
                "host_profile": self.host_profile, "fitted": dict(self.fitted), "kept": dict(self.kept),
                "uncertainty": dict(self.uncertainty),
                "source": dict(self.source), "residuals": dict(self.residuals), "notes": list(self.notes),
                "created_at": self.created_at}

    def log_name(self) -> str:
        return str(self.source.get("megatron_log", "?"))

    def describe(self) -> str:
        """One line for a run's header and provenance: the log it came from."""
        sha = str(self.source.get("sha256", ""))[:12]
        steps = self.source.get("steps")
        return (f"fitted to megatron log {self.log_name()} (" + (f"sha256 {sha}…; " if sha else "")
                + (f"{steps:,}" if isinstance(steps, int) else "?") + f" steps; {len(self.fitted)} parameter(s) "
                "fitted)")

    def applied(self, hardware: HardwareConfig, source: str = "hardware.host_calibration") -> HardwareConfig:
        """``hardware`` with the fitted values in place (its preset must be the one fitted)."""
        if hardware.name != self.hardware:
            raise ConfigError(f"{source}: fitted on hardware={self.hardware}, but this run is "
                              f"hardware={hardware.name}: fit again with the run's hardware, or run with the fitted")
        if "hardware.host_op_us" in self.fitted and hardware.host_profile != self.host_profile:
            raise ConfigError(f"{source}: its host µs per op was fitted with host_profile={self.host_profile}'s op "
                              f"counts, but this run's hardware.host_profile is {hardware.host_profile}")
        return dataclasses.replace(hardware, **{k.split(".", 1)[1]: v for k, v in self.fitted.items()})

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Each fitted parameter's (low, high): the fit's ±2 standard errors."""
        return {k: (u["low"], u["high"]) for k, u in self.uncertainty.items() if k in self.fitted}

    @classmethod
    def from_dict(cls, data: Any, source: str = "<log calibration>") -> LogCalibration:
        def fail(key: str, message: str) -> ConfigError:
            return ConfigError(f"{source}: {key}: {message}")

        if not isinstance(data, dict) or data.get("schema") != LOG_CALIBRATION_SCHEMA:
            raise fail("schema", f"expected {LOG_CALIBRATION_SCHEMA!r}")
        hardware = data.get("hardware")
        if not isinstance(hardware, str) or not hardware:
            raise fail("hardware", f"must be a non-empty string, got {hardware!r}")
        profile = data.get("host_profile", "megatron")
        if not isinstance(profile, str) or not profile:
            raise fail("host_profile", f"must be a non-empty string, got {profile!r}")
        model = data.get("model")
        if not isinstance(model, dict) or not all(isinstance(v, str) for v in model.values()):
            raise fail("model", "must be an object of strings (name, kind)")
        fitted = data.get("fitted")
        if not isinstance(fitted, dict):
            raise fail("fitted", "must be an object {hardware key: value}")
        for key, v in fitted.items():
            if key not in FITTABLE:
                raise fail(f"fitted.{key}", f"not a fitted parameter (one of {', '.join(FITTABLE)})")
            top = _AT_MOST.get(key, _MAX_HOST_OP_US)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not 0 < v <= top:
                raise fail(f"fitted.{key}", f"must be a number in (0, {top:g}], got {v!r}")
        uncertainty = data.get("uncertainty", {})
        if not isinstance(uncertainty, dict):
            raise fail("uncertainty", "must be an object")
        for key, u in uncertainty.items():
            if not isinstance(u, dict) or not all(isinstance(u.get(k), (int, float)) and not isinstance(u.get(k), bool)
                                                  for k in ("low", "high")) or not u["low"] <= u["high"]:
                raise fail(f"uncertainty.{key}", "must be an object with numbers low <= high")
        for key in ("kept", "source", "residuals"):
            if not isinstance(data.get(key, {}), dict):
                raise fail(key, "must be an object")
        notes = data.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise fail("notes", "must be a list of strings")
        return cls(hardware=hardware, model=dict(model), host_profile=profile,
                   fitted={k: float(v) for k, v in fitted.items()},
                   kept=dict(data.get("kept", {})),
                   uncertainty={k: {kk: float(vv) for kk, vv in u.items() if isinstance(vv, (int, float))}
                                for k, u in uncertainty.items()},
                   source=dict(data.get("source", {})), residuals=dict(data.get("residuals", {})),
                   notes=tuple(notes), created_at=str(data.get("created_at", "")))


def load_machine_calibration(path: str | Path) -> Any:
    """The file ``hardware.host_calibration`` names: a ``LogCalibration`` (fitted to a log) or a
    ``HostCalibration`` (``cgbench calibrate --host``), told by its schema."""
    from cgbench.backends.sim.calibrated import HostCalibration
    from cgbench.safeio import read_json

    data = read_json(path, "hardware.host_calibration")
    if isinstance(data, dict) and data.get("schema") == LOG_CALIBRATION_SCHEMA:
        return LogCalibration.from_dict(data, source=str(path))
    return HostCalibration.from_dict(data, source=str(path))


def log_calibration_of(hardware: HardwareConfig) -> LogCalibration | None:
    """The log calibration ``hardware.host_calibration`` names, or None (none, or a host-only file)."""
    if not hardware.host_calibration:
        return None
    found = load_machine_calibration(hardware.host_calibration)
    return found if isinstance(found, LogCalibration) else None
