"""How much device memory a config asks for: weights and the KV cache / Mamba state the engine
reserves, per GPU (tensor-parallel rank), from the roofline model's byte counts. An MoE model's
weights count every expert, ``num_experts / engine.ep_size`` of them on each GPU."""

from __future__ import annotations

from dataclasses import dataclass

from cgbench.backends.sim.cost_model import RooflineCostModel
from cgbench.config.content_memo import ContentMemo
from cgbench.config.schema import BenchConfig

GB = 1e9


@dataclass(frozen=True)
class MemoryNeed:
    weights_gb: float  # per GPU
    kv_gb: float  # per GPU: KV blocks (+ paused buffer) and Mamba state for max_requests
    capacity_gb: float  # hardware.memory_gb
    auto_kv: bool  # engine.kv_blocks=0: the pool is sized for max_requests full-length sequences

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.kv_gb

    def kv_blocks_that_fit(self, cfg: BenchConfig) -> int:
        """The largest engine.kv_blocks that fits next to the weights (0 if none does)."""
        e = cfg.engine
        blocks = e.resolved_kv_blocks() + e.paused_blocks
        per_block = (self.kv_gb - self.state_gb(cfg)) / blocks if blocks else 0.0
        room = self.capacity_gb - self.weights_gb - self.state_gb(cfg)
        return max(0, int(room / per_block)) if per_block > 0 else 0

    @staticmethod
    def state_gb(cfg: BenchConfig) -> float:
        rm = RooflineCostModel(cfg.model, cfg.hardware, cfg.engine.tp_size, ep_size=cfg.engine.ep_size)
        return cfg.engine.max_requests * rm.mamba_state_bytes / GB


# the needs of the last few (model, hardware, engine): a sweep's points mostly share them
_NEEDS: ContentMemo[MemoryNeed] = ContentMemo(8)


def memory_need(cfg: BenchConfig) -> MemoryNeed:
    """The device memory ``cfg`` asks for per GPU, and the device's."""
    return _NEEDS.get((cfg.model, cfg.hardware, cfg.engine), lambda: _memory_need(cfg))


def _memory_need(cfg: BenchConfig) -> MemoryNeed:
    rm = RooflineCostModel(cfg.model, cfg.hardware, cfg.engine.tp_size, ep_size=cfg.engine.ep_size)
    e = cfg.engine
    kv_tokens = (e.resolved_kv_blocks() + e.paused_blocks) * e.block_size
    kv = kv_tokens * rm.kv_bytes_per_token + e.max_requests * rm.mamba_state_bytes
    return MemoryNeed(rm.weight_bytes / GB, kv / GB, cfg.hardware.memory_gb, e.kv_blocks == 0)


def parameters(cfg: BenchConfig) -> float:
    """The model's parameter count (all ranks)."""
    return RooflineCostModel(cfg.model, cfg.hardware, 1).weight_bytes / cfg.model.dtype_bytes
