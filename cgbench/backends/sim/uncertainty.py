"""The cost-model parameters that are not known for the user's machine, with the range each may take
and where that range comes from. ``cgbench run --sensitivity`` re-prices a run over these ranges.

A range is absolute (``low``/``high``) or relative to the configured value (``scale``); either way it
is widened to contain the configured value, so the point estimate is always inside its range.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cgbench.config.schema import BenchConfig


@dataclass(frozen=True)
class UncertainParameter:
    key: str  # dotted config key, e.g. hardware.host_op_us
    source: str  # why the range is what it is
    low: float | None = None
    high: float | None = None
    scale: tuple[float, float] | None = None  # (low factor, high factor) of the configured value
    at_most: float | None = None  # a physical bound (an efficiency is at most 1)

    def value(self, cfg: BenchConfig) -> float:
        section, name = self.key.split(".", 1)
        return float(getattr(getattr(cfg, section), name))

    def bounds(self, cfg: BenchConfig) -> tuple[float, float]:
        point = self.value(cfg)
        if self.scale is not None:
            lo, hi = point * self.scale[0], point * self.scale[1]
        else:
            assert self.low is not None and self.high is not None
            lo, hi = self.low, self.high
        if self.at_most is not None:
            hi = min(hi, self.at_most)
        return min(lo, point), max(hi, point)

    def applied(self, cfg: BenchConfig, value: float) -> BenchConfig:
        section, name = self.key.split(".", 1)
        part = getattr(cfg, section)
        kind = type(getattr(part, name))
        return replace(cfg, **{section: replace(part, **{name: kind(value)})})


UNCERTAIN: tuple[UncertainParameter, ...] = (
    UncertainParameter(
        "hardware.host_op_us", low=4.0, high=9.5,
        source="host time per framework op of an eager step: 4.0-4.1 us measured by `cgbench calibrate "
               "--host` on a 2-core x86 VM; 9.5 us fitted to one slow published eager path. It depends on "
               "the CPU, Python and the engine's own code, so it is the least known input"),
    UncertainParameter(
        "hardware.kernel_launch_us", low=2.0, high=5.0,
        source="host time per CUDA kernel launch: 2-5 us across published launch-latency measurements "
               "(driver, CPU and launch path dependent)"),
    UncertainParameter(
        "hardware.flops_efficiency", scale=(0.8, 1.15), at_most=1.0,
        source="fraction of peak FLOP/s reached: published GEMM and attention profiles spread about "
               "-20 % / +15 % around a single fitted value, by problem size"),
    UncertainParameter(
        "hardware.bandwidth_efficiency", scale=(0.85, 1.2), at_most=1.0,
        source="fraction of peak HBM bandwidth reached by weight-streaming kernels: 0.70 assumed, "
               "0.80-0.86 measured on H100 at 1 token, less on small matrices"),
)


def by_key() -> dict[str, UncertainParameter]:
    return {p.key: p for p in UNCERTAIN}


def describe(cfg: BenchConfig) -> list[dict[str, Any]]:
    """Each parameter's configured value and range for ``cfg`` (what a report prints first)."""
    out = []
    for p in UNCERTAIN:
        lo, hi = p.bounds(cfg)
        out.append({"key": p.key, "point": p.value(cfg), "low": lo, "high": hi, "source": p.source})
    return out
