"""What capturing a graph list costs, for ``advise``'s budgets: the cost model's capture estimate
(``cgbench.backends.sim.capture.grid_capture_estimate``, the same one every run document records
as ``capture``), cached per list.

``memory_gb`` is the graph pool (the largest graph's activations plus a per-node overhead for every
graph), the memory the graphs add; ``capture_s`` the estimated capture time; ``total_gb`` and
``fits_device`` whether weights, KV pool, Mamba state, eager activations and the graph pool fit the
device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig
from cgbench.grids.shapes import BatchShape


@dataclass(frozen=True, slots=True)
class CaptureEstimate:
    memory_gb: float  # the graph pool
    capture_s: float
    total_gb: float = 0.0  # everything on the device, graph pool included
    device_gb: float = 0.0
    fits_device: bool = True

    def to_dict(self) -> dict[str, float | bool]:
        return {"memory_gb": round(self.memory_gb, 4), "capture_s": round(self.capture_s, 4),
                "total_gb": round(self.total_gb, 4), "device_gb": self.device_gb, "fits_device": self.fits_device}


@dataclass(frozen=True)
class _Graphs:
    """The one attribute ``grid_capture_estimate`` reads of a grid."""

    graphs: tuple[BatchShape, ...]


class CaptureEstimator:
    """``estimate(graphs)``: the capture cost of a graph list (see the module docstring)."""

    def __init__(self, model: ModelConfig, hardware: HardwareConfig, engine: EngineConfig) -> None:
        self._args = (model, hardware, engine)
        self._cache: dict[tuple[tuple[int, int, int], ...], CaptureEstimate] = {}

    def estimate(self, graphs: Iterable[tuple[int, int, int]]) -> CaptureEstimate:
        from cgbench.backends.sim.capture import grid_capture_estimate

        key = tuple(tuple(g) for g in graphs)
        est = self._cache.get(key)
        if est is None:
            if not key:
                est = CaptureEstimate(0.0, 0.0)
            else:
                d = grid_capture_estimate(_Graphs(tuple(BatchShape(*g) for g in key)), *self._args)
                mem = d["memory_gb"]
                est = CaptureEstimate(d["graph_pool_gb"], d["capture_s"], mem["total"], mem["device"], d["fits"])
            self._cache[key] = est
        return est
