"""The step-pricer registry: one record (``PricerSpec``) per ``backend.cost_model`` of the ``sim``
backend, the only place a built-in is named.

A record holds the pricer's name, its summary, the ``backend`` keys it reads (``fields``: a dataclass
of them, named and typed as in ``schema.BackendConfig``, which a test checks; ``reads`` derives from
it, and so do the unread keys, ``schema.unread_keys``), its own rule (``check``: the ``backend``
record; raises ``ConfigError`` naming ``backend.<field>``) and its builder, named
``"module:function"`` (``builder``) so that the config layer lists it without importing the backends:
``cgbench.backends.sim.factory.make_cost_model`` resolves it (``records.builder``) and calls it with
``(backend, model, hardware, engine)``; it returns a ``cgbench.engine.contract.StepPricer``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from cgbench.config.registry.records import field_names
from cgbench.config.rules.base import require


@dataclass(frozen=True)
class PricerSpec:
    name: str
    summary: str = ""
    fields: type | None = None
    check: Callable[[Any], None] | None = None
    builder: str = ""

    @property
    def reads(self) -> tuple[str, ...]:
        return field_names(self.fields)


@dataclass
class Calibration:
    calibration: Optional[str]


def _check_calibrated(backend: Any) -> None:
    require(bool(backend.calibration), "backend.calibration",
            f"cost_model={backend.cost_model} needs a calibration table path")


_FACTORY = "cgbench.backends.sim.factory"

COST_MODELS: dict[str, PricerSpec] = {s.name: s for s in (
    PricerSpec("roofline", "FLOPs and bytes over the hardware's rates, kernel floors, launch costs",
               builder=f"{_FACTORY}:build_roofline"),
    PricerSpec("calibrated", "measured step times (cgbench calibrate), interpolated", Calibration,
               _check_calibrated, builder=f"{_FACTORY}:make_calibrated"),
)}
