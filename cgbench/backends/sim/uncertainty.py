"""The cost-model parameters that are not known for the user's machine, with the range each may take
and where that range comes from. ``cgbench run --sensitivity`` re-prices a run over these ranges.

A numeric range is absolute (``low``/``high``) or relative to the configured value (``scale``); either
way it is widened to contain the configured value, so the point estimate is always inside its range.
A choice (``choices``) is tried at each of its values and at the configured one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cgbench.backends.sim.host_profiles import DEFAULT_HOST_OP_SUMMARY, HOST_OP_RANGE_US, host_profile
from cgbench.config.schema import BenchConfig

Value = float | str


@dataclass(frozen=True)
class UncertainParameter:
    key: str  # dotted config key, e.g. hardware.host_op_us
    source: str  # why the range is what it is
    low: float | None = None
    high: float | None = None
    scale: tuple[float, float] | None = None  # (low factor, high factor) of the configured value
    at_most: float | None = None  # a physical bound (an efficiency is at most 1)
    choices: tuple[str, ...] = ()  # a setting, not a number: each value is tried
    effective: Callable[[BenchConfig], float] | None = None  # the value in force when the key is null

    def value(self, cfg: BenchConfig) -> Value:
        section, name = self.key.split(".", 1)
        raw = getattr(getattr(cfg, section), name)
        if raw is None and self.effective is not None:
            return self.effective(cfg)
        return raw if self.choices else float(raw)

    def bounds(self, cfg: BenchConfig) -> tuple[Value, Value]:
        """The range's ends (a choice: its first and last value)."""
        point = self.value(cfg)
        if self.choices:
            return self.choices[0], self.choices[-1]
        assert isinstance(point, float)
        if self.scale is not None:
            lo, hi = point * self.scale[0], point * self.scale[1]
        else:
            assert self.low is not None and self.high is not None
            lo, hi = self.low, self.high
        if self.at_most is not None:
            hi = min(hi, self.at_most)
        return min(round(lo, 6), point), max(round(hi, 6), point)  # no 0.8800000000000001 in a report

    def values(self, cfg: BenchConfig) -> list[Value]:
        """What the run is priced at: the range's ends and the configured value, in order."""
        point = self.value(cfg)
        if self.choices:
            return list(dict.fromkeys([*self.choices, point]))
        lo, hi = self.bounds(cfg)
        return sorted({lo, point, hi})  # type: ignore[type-var]

    def applied(self, cfg: BenchConfig, value: Value) -> BenchConfig:
        section, name = self.key.split(".", 1)
        part = getattr(cfg, section)
        new = value if self.choices else float(value)
        return replace(cfg, **{section: replace(part, **{name: new})})


UNCERTAIN: tuple[UncertainParameter, ...] = (
    UncertainParameter(
        "hardware.host_op_us", low=HOST_OP_RANGE_US[0], high=HOST_OP_RANGE_US[1],
        effective=lambda cfg: host_profile(cfg.hardware).op_us,
        source="host time per framework op of an eager step (the megatron profile's): " + DEFAULT_HOST_OP_SUMMARY),
    UncertainParameter(
        "hardware.kernel_launch_us", low=2.0, high=5.0,
        source="host time per CUDA kernel launch: 2-5 us across published launch-latency measurements "
               "(driver, CPU and launch path dependent)"),
    UncertainParameter(
        "hardware.flops_efficiency", scale=(0.85, 1.1), at_most=1.0,
        source="fraction of peak FLOP/s large GEMMs reach: fitted on Vidur's profiles; the validation "
               "table's linear class has a 4 % median and a 34 % worst error (small GEMMs)"),
    UncertainParameter(
        "hardware.bandwidth_efficiency", scale=(0.9, 1.1), at_most=1.0,
        source="fraction of peak HBM bandwidth weight-streaming kernels reach: 80-86 % measured on H100 at 1 "
               "token (Vidur), less on small matrices"),
    UncertainParameter(
        "hardware.attention_efficiency", scale=(0.75, 1.25), at_most=1.0,
        source="prefill attention rests on two published anchors only (a 512-token chunk at ~0.3 of peak, "
               "FlashAttention-2's long-sequence range), no per-shape profile"),
    UncertainParameter(
        "hardware.scan_efficiency", scale=(0.85, 1.7), at_most=1.0,
        source="fraction of peak FLOP/s the Mamba-2 chunked scan's tensor-core dots reach: fitted to vLLM's "
               "end-to-end SSD benchmark on H100 (PR 27299; held-back points within 11 %); a tuned single "
               "kernel (tilelang's chunk_scan, PR 1109) reaches 1.7 times it"),
    UncertainParameter(
        "model.padded_slot_cost", choices=("shared", "full"),
        source="what a padded request slot of a graph costs the Mamba state traffic: shared (Megatron's -1 "
               "rows read one dummy slot, from its code, not measured) or full (a state read/write each)"),
)


def by_key() -> dict[str, UncertainParameter]:
    return {p.key: p for p in UNCERTAIN}


def describe(cfg: BenchConfig, params: tuple[UncertainParameter, ...] = UNCERTAIN) -> list[dict[str, Any]]:
    """Each parameter's configured value and range for ``cfg`` (what a report prints first)."""
    out = []
    for p in params:
        lo, hi = p.bounds(cfg)
        out.append({"key": p.key, "point": p.value(cfg), "low": lo, "high": hi, "source": p.source})
    return out
