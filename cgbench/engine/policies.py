"""Admission policies: what the scheduler does when no captured graph would cover a batch.

Each policy answers three questions the scheduler asks (see ``cgbench.engine.scheduler``):
``gates`` (does it gate admission at all), ``on_non_chunked_miss`` and ``on_chunk_miss``
(defer, or admit and run eager), plus ``forward_guard`` at forward time.
"""

from __future__ import annotations

from dataclasses import dataclass

from cgbench.config.schema import PolicyConfig

DEFER = "defer"
EAGER = "eager"


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    gates: bool  # gating can be active (still needs the reference's three conditions)
    # the chunked path is gated like the non-chunked one: a miss defers (unless the engine is idle),
    # and continuing chunks are guarded too (snapped or deferred when they would miss)
    gates_chunks: bool = False
    timeout_iters: int = -1  # >= 0: admit eager after this many consecutive deferrals
    pad_ratio: float = 0.0  # > 0: a prefill/mixed graph padding T beyond ratio x real runs eager

    def on_non_chunked_miss(self, cg_wait_iters: int) -> str:
        if self.timeout_iters >= 0 and cg_wait_iters >= self.timeout_iters:
            return EAGER
        return DEFER

    def on_chunk_miss(self, cg_wait_iters: int, engine_idle: bool) -> str:
        if not self.gates_chunks or engine_idle:
            return EAGER
        if self.timeout_iters >= 0 and cg_wait_iters >= self.timeout_iters:
            return EAGER
        return DEFER

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        """True when the graph must NOT be used (padding-waste guard)."""
        return self.pad_ratio > 0 and prefills > 0 and graph_tokens > self.pad_ratio * real_tokens


def make_policy(cfg: PolicyConfig) -> Policy:
    if cfg.name == "budget":
        return Policy("budget", gates=False)
    if cfg.name == "megatron":
        return Policy("megatron", gates=True)
    if cfg.name == "defer":
        return Policy("defer", gates=True, gates_chunks=True)
    if cfg.name == "pad_guard":
        return Policy("pad_guard", gates=False, pad_ratio=cfg.pad_guard.max_ratio)
    if cfg.name == "wait_timeout":
        return Policy("wait_timeout", gates=True, gates_chunks=True,
                      timeout_iters=cfg.wait_timeout.iters)
    raise ValueError(f"unknown policy {cfg.name!r}")
