"""``cgbench calibrate --megatron-log LOG``: fit the cost model to a production log and write the
calibration file the simulator reads (``hardware.host_calibration``, ``cgbench.backends.sim.log_calibration``).

The log is refused when it disagrees with the config by name (``grid``: another model's
emitted log, another grid's capture listing or replayed graphs): a fit of another model's steps
would price this one wrongly. ``fitted_ranges`` gives ``--sensitivity`` the fitted ranges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from cgbench.analysis.megatron_log.config import LogConfig
from cgbench.analysis.megatron_log.digest import LogDigest, digest_log
from cgbench.analysis.megatron_log.fit import Fit, fit
from cgbench.analysis.megatron_log.grid import LogGrid, log_grid, refuse_unchecked
from cgbench.backends.sim.log_calibration import LogCalibration, log_calibration_of
from cgbench.backends.sim.uncertainty import UncertainParameter
from cgbench.config.schema import BenchConfig, ConfigError


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def default_calibration_path(cfg: BenchConfig, log: str | Path) -> Path:
    """``<out_dir>/calibration/megatron_log_<log name>_<hardware>.json``."""
    stem = Path(log).name.split(".")[0] or "log"
    return Path(cfg.out_dir) / "calibration" / f"megatron_log_{stem}_{cfg.hardware.name}.json"


@dataclass
class LogFit:
    calibration: LogCalibration
    fit: Fit
    digest: LogDigest
    grid: LogGrid


def calibration_of(found: Fit, digest: LogDigest, cfg: BenchConfig, sha256: str, rank: int | None) -> LogCalibration:
    """The calibration file's record of a fit."""
    fitted = {p.key: p.value for p in found.parameters if p.identified}
    bounded = {p.key: p.value for p in found.parameters if not p.identified and p.value != p.preset}
    kept = {p.key: p.note for p in found.parameters if not p.identified}
    uncertainty = {p.key: {"sigma_rel": round(p.sigma_rel, 6), "low": p.low, "high": p.high}
                   for p in found.parameters if p.identified and p.sigma_rel is not None}
    source = {"megatron_log": str(digest.path), "sha256": sha256, "bytes": digest.size_bytes,
              "step_lines": digest.stats.step_lines, "steps": found.steps, "observations": found.observations,
              "steps_left_out": found.steps_left_out, "ranks": sorted(digest.ranks) if rank is None else [rank],
              "formats": dict(digest.stats.versions), "preset": {p.key: p.preset for p in found.parameters},
              "block_size": cfg.engine.block_size, "tp_size": cfg.engine.tp_size}
    notes = list(found.notes) + [f"{k}: {kept[k]}" for k in bounded]
    return LogCalibration(hardware=cfg.hardware.name, model={"name": cfg.model.name, "kind": cfg.model.kind},
                          host_profile=cfg.hardware.host_profile, fitted={**fitted, **bounded}, kept={
                              k: v for k, v in kept.items() if k not in bounded}, uncertainty=uncertainty,
                          source=source, residuals=found.residuals, notes=tuple(notes))


def calibrate_megatron_log(path: str | Path, lc: LogConfig, *, rank: int | None = None,
                           progress: Callable[[int, int], None] | None = None) -> LogFit:
    """Fit ``lc``'s cost model to the log at ``path`` (refused when the log is of another model or grid)."""
    refuse_unchecked(lc.cfg, "calibrate --megatron-log")
    cfg = lc.cfg
    assert cfg is not None
    if not lc.model_named:
        raise ConfigError("calibrate --megatron-log: name the model the log ran (model=... or --megatron-args): "
                          f"the default model={cfg.model.name} would be fitted to another model's steps")
    if cfg.backend.cost_model != "roofline":
        raise ConfigError("calibrate --megatron-log: fits the roofline cost model (backend.cost_model=roofline)")
    digest = digest_log(path, progress=progress)
    lg = log_grid(digest, cfg, lc.text)
    refusal = lg.check.refusal(digest.label)
    if refusal:
        raise ConfigError(refusal)
    if rank is not None:
        digest.rank(rank)
    found = fit(digest, cfg, rank=rank)
    return LogFit(calibration_of(found, digest, cfg, sha256_of(path), rank), found, digest, lg)


Parameters = tuple[UncertainParameter, ...]


def fitted_ranges(cfg: BenchConfig, params: Parameters) -> tuple[BenchConfig, Parameters]:
    """``cfg`` and the uncertain parameters ``--sensitivity`` prices it over: unchanged, unless
    ``hardware.host_calibration`` names a log calibration; then its fitted values are put in the
    config itself (so that pricing another value of one takes effect) and each fitted parameter's
    range is the fit's (±2 standard errors) instead of its default."""
    found = log_calibration_of(cfg.hardware)
    if found is None:
        return cfg, params
    from cgbench.backends.sim.factory import resolve_hardware

    resolved = replace(resolve_hardware(cfg.hardware), host_calibration=None)
    ranges = found.ranges()

    def source(key: str) -> str:
        return (f"fitted to megatron log {found.log_name()}: ±2 standard errors "
                f"(±{200 * found.uncertainty[key].get('sigma_rel', 0.0):.1f}%)")

    out = []
    for p in params:
        if p.key in ranges:
            lo, hi = ranges[p.key]
            p = replace(p, low=lo, high=hi, scale=None, effective=None, source=source(p.key))
        out.append(p)
    known = {p.key for p in params}
    for key, (lo, hi) in ranges.items():  # fitted, and uncertain too, though not in the default list
        if key not in known:
            out.append(UncertainParameter(key, source(key), low=lo, high=hi))
    return replace(cfg, hardware=resolved), tuple(out)

