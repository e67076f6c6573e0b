"""Tensor-parallel collectives as latency + size / bandwidth, per protocol and algorithm (docs/cost-model.md).

NCCL moves a collective with one of its protocols and picks, per size, the one its tuner predicts
fastest. Two are modelled, each an α–β line:

* the **bulk** protocols (LL128, Simple): a ring all-reduce over ``t`` ranks takes ``2(t-1)`` steps
  and moves ``2(t-1)/t`` of the payload over each link; a tree (NCCL's double binary tree) takes
  ``2·ceil(log2 t)`` steps and moves the whole payload twice; both pay a fixed ``alpha``;
* the **low-latency** protocol (LL): a ring with a small fixed cost and a small cost per step, at a
  fraction of the link bandwidth (LL sends a flag with every 8 bytes). It wins small messages,
  the decode steps' all-reduces. Within one node NCCL's tree is a chain with as many steps as the
  ring, so the ring is LL's only form here.

A collective costs the cheapest of the forms its ``algorithm`` allows (``auto``: all of them, as
NCCL's tuner does; ``ring`` / ``tree``: that algorithm's bulk form, or the LL ring). A zero LL
bandwidth turns the low-latency protocol off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cgbench.config.schema import HardwareConfig


@dataclass(frozen=True, slots=True)
class Collectives:
    """``alpha_s``: the bulk protocols' fixed seconds per collective; ``hop_s``: their seconds per ring
    step or tree level; ``bandwidth``: their bytes/s per link; ``ll_alpha_s``, ``ll_hop_s``,
    ``ll_bandwidth``: the same of the low-latency protocol (``ll_bandwidth`` 0: none);
    ``algorithm``: ``auto`` | ``ring`` | ``tree``."""

    ranks: int
    alpha_s: float
    hop_s: float
    bandwidth: float
    algorithm: str = "auto"
    ll_alpha_s: float = 0.0
    ll_hop_s: float = 0.0
    ll_bandwidth: float = 0.0

    @classmethod
    def from_hardware(cls, hardware: HardwareConfig, ranks: int) -> Collectives:
        return cls(ranks, hardware.interconnect_latency_us * 1e-6, hardware.interconnect_hop_us * 1e-6,
                   hardware.interconnect_bandwidth, hardware.allreduce_algorithm,
                   hardware.interconnect_ll_latency_us * 1e-6, hardware.interconnect_ll_hop_us * 1e-6,
                   hardware.interconnect_ll_bandwidth)

    def ring_allreduce(self, nbytes: float) -> float:
        t = self.ranks
        return self.alpha_s + 2 * (t - 1) * self.hop_s + 2 * (t - 1) / t * nbytes / self.bandwidth

    def tree_allreduce(self, nbytes: float) -> float:
        levels = math.ceil(math.log2(self.ranks))
        return self.alpha_s + 2 * levels * self.hop_s + 2 * nbytes / self.bandwidth

    def ll_allreduce(self, nbytes: float) -> float:
        """The low-latency protocol's ring all-reduce (infinite when it is off)."""
        if self.ll_bandwidth <= 0:
            return math.inf
        t = self.ranks
        return self.ll_alpha_s + 2 * (t - 1) * self.ll_hop_s + 2 * (t - 1) / t * nbytes / self.ll_bandwidth

    def allreduce(self, nbytes: float) -> float:
        if self.ranks <= 1:
            return 0.0
        if self.algorithm == "ring":
            bulk = self.ring_allreduce(nbytes)
        elif self.algorithm == "tree":
            bulk = self.tree_allreduce(nbytes)
        else:
            bulk = min(self.ring_allreduce(nbytes), self.tree_allreduce(nbytes))
        return min(bulk, self.ll_allreduce(nbytes))

    def allgather(self, nbytes: float) -> float:
        """A ring all-gather of ``nbytes`` in all: ``t-1`` steps, ``(t-1)/t`` of it over each link, by
        the cheaper protocol."""
        t = self.ranks
        if t <= 1:
            return 0.0
        bulk = self.alpha_s + (t - 1) * self.hop_s + (t - 1) / t * nbytes / self.bandwidth
        if self.ll_bandwidth <= 0:
            return bulk
        return min(bulk, self.ll_alpha_s + (t - 1) * self.ll_hop_s + (t - 1) / t * nbytes / self.ll_bandwidth)
