"""The step-pricer registry's config half: every ``backend.cost_model`` of the ``sim`` backend and
the ``backend`` keys it reads (``requires``: keys that must be set). The pricers themselves are
built by ``cgbench.backends.sim.pricers``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PricerSpec:
    name: str
    reads: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    summary: str = ""


COST_MODELS: dict[str, PricerSpec] = {s.name: s for s in (
    PricerSpec("roofline", summary="FLOPs and bytes over the hardware's rates, kernel floors, launch costs"),
    PricerSpec("calibrated", ("calibration",), ("calibration",),
               summary="measured step times (cgbench calibrate), interpolated"),
)}
