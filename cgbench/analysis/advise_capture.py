"""A rough estimate of what capturing a graph list costs: GPU memory and capture time.

The simulator prices replayed and eager steps but not the capture itself, so ``advise`` budgets
with this stand-in (an order of magnitude, not a measurement):

* **memory**: the graphs share one memory pool, so the pool holds the largest graph's working set
  (its activations, ``ACTIVATION_WIDTHS`` values per token of the model's widths, plus fp32 logits
  for every request slot), and every graph adds ``GRAPH_OVERHEAD_MB`` of its own (kernel-node
  parameters, static input and output buffers);
* **time**: each graph is run ``CAPTURE_RUNS`` times eagerly on its own shape (warm-up and the
  recorded run), priced by the backend's cost model, plus ``GRAPH_INSTANTIATE_S`` to instantiate it.

The constants are in the range engines report when they capture (tens of graphs in seconds and
well under a GiB for an 8B model); replace the estimate with a measured one where available.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cgbench.config.schema import EngineConfig, ModelConfig
from cgbench.engine.contract import StepPricer, StepWork

GRAPH_OVERHEAD_MB = 6.0
CAPTURE_RUNS = 3
GRAPH_INSTANTIATE_S = 0.03
LOGIT_BYTES = 4


@dataclass(frozen=True, slots=True)
class CaptureEstimate:
    memory_gb: float
    capture_s: float

    def to_dict(self) -> dict[str, float]:
        return {"memory_gb": round(self.memory_gb, 3), "capture_s": round(self.capture_s, 3)}


class CaptureEstimator:
    """``estimate(graphs)``: the capture cost of a graph list (see the module docstring)."""

    def __init__(self, model: ModelConfig, engine: EngineConfig, pricer: StepPricer) -> None:
        tp = engine.tp_size
        widths = (4 * model.hidden_size + 2 * model.ffn_hidden_size / tp
                  + 3 * model.mamba_num_heads * model.mamba_head_dim / tp * model.is_hybrid)
        self._bytes_per_token = widths * model.dtype_bytes
        self._bytes_per_slot = model.vocab_size / tp * LOGIT_BYTES
        self._pricer = pricer
        self._eager: dict[tuple[int, int, int], float] = {}

    def working_set_gb(self, graph: tuple[int, int, int]) -> float:
        T, P, D = graph
        return (T * self._bytes_per_token + (P + D) * self._bytes_per_slot) / 2**30

    def capture_time_s(self, graph: tuple[int, int, int]) -> float:
        t = self._eager.get(graph)
        if t is None:
            T, P, D = graph
            t = self._eager[graph] = self._pricer.step_time(StepWork(T, P, D, T, None))
        return CAPTURE_RUNS * t + GRAPH_INSTANTIATE_S

    def estimate(self, graphs: Iterable[tuple[int, int, int]]) -> CaptureEstimate:
        gs = [tuple(g) for g in graphs]
        if not gs:
            return CaptureEstimate(0.0, 0.0)
        pool = max(self.working_set_gb(g) for g in gs)
        memory = pool + len(gs) * GRAPH_OVERHEAD_MB / 1024
        return CaptureEstimate(memory, sum(self.capture_time_s(g) for g in gs))
