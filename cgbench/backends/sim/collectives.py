"""Tensor-parallel collectives as latency + size / bandwidth, per algorithm (docs/cost-model.md).

A ring all-reduce over ``t`` ranks takes ``2(t-1)`` steps and moves ``2(t-1)/t`` of the payload
over each link; a tree (NCCL's double binary tree) takes ``2·ceil(log2 t)`` steps and moves the
whole payload twice. Both pay a fixed ``alpha`` (the launch and protocol set-up that dominates
small messages). ``auto`` takes the faster, as NCCL's tuner does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cgbench.config.schema import HardwareConfig


@dataclass(frozen=True, slots=True)
class Collectives:
    """``alpha_s``: fixed seconds per collective; ``hop_s``: seconds per ring step or tree level;
    ``bandwidth``: bytes/s per link; ``algorithm``: ``auto`` | ``ring`` | ``tree``."""

    ranks: int
    alpha_s: float
    hop_s: float
    bandwidth: float
    algorithm: str = "auto"

    @classmethod
    def from_hardware(cls, hardware: HardwareConfig, ranks: int) -> Collectives:
        return cls(ranks, hardware.interconnect_latency_us * 1e-6, hardware.interconnect_hop_us * 1e-6,
                   hardware.interconnect_bandwidth, hardware.allreduce_algorithm)

    def ring_allreduce(self, nbytes: float) -> float:
        t = self.ranks
        return self.alpha_s + 2 * (t - 1) * self.hop_s + 2 * (t - 1) / t * nbytes / self.bandwidth

    def tree_allreduce(self, nbytes: float) -> float:
        levels = math.ceil(math.log2(self.ranks))
        return self.alpha_s + 2 * levels * self.hop_s + 2 * nbytes / self.bandwidth

    def allreduce(self, nbytes: float) -> float:
        if self.ranks <= 1:
            return 0.0
        if self.algorithm == "ring":
            return self.ring_allreduce(nbytes)
        if self.algorithm == "tree":
            return self.tree_allreduce(nbytes)
        return min(self.ring_allreduce(nbytes), self.tree_allreduce(nbytes))

    def allgather(self, nbytes: float) -> float:
        """A ring all-gather of ``nbytes`` in all: ``t-1`` steps, ``(t-1)/t`` of it over each link."""
        t = self.ranks
        if t <= 1:
            return 0.0
        return self.alpha_s + (t - 1) * self.hop_s + (t - 1) / t * nbytes / self.bandwidth
