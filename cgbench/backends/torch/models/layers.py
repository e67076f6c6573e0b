"""Transformer building blocks: RMSNorm, rotary embedding, GQA attention over a paged cache, SwiGLU MLP.

Each mixer has two forwards: ``forward(h, step, cache)`` over a packed, possibly padded batch with caches (what
the runner uses), and ``forward_dense(h)`` over one whole sequence without any cache (the oracle path).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cgbench.backends.torch.kernels import PagedLayout, paged_attention, write_kv
from cgbench.backends.torch.models.step import ModelCache, StepInputs
from cgbench.config.schema import ModelConfig

ROPE_THETA = 10_000.0
NORM_EPS = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = x.to(torch.promote_types(x.dtype, torch.float32))
        acc = acc * torch.rsqrt(acc.pow(2).mean(-1, keepdim=True) + self.eps)
        return acc.to(x.dtype) * self.weight


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float = ROPE_THETA) -> torch.Tensor:
    """Rotary embedding, rotate-half layout. x (T, heads, d), positions (T,)."""
    half = x.shape[-1] // 2
    acc = torch.promote_types(x.dtype, torch.float32)
    inv_freq = theta ** (-torch.arange(half, device=x.device, dtype=acc) / half)  # (d/2,)
    angles = positions.to(acc)[:, None] * inv_freq  # (T, d/2)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]  # (T, 1, d/2)
    x1, x2 = x[..., :half].to(acc), x[..., half:].to(acc)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, cache_index: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_kv_heads, cfg.head_dim
        self.cache_index = cache_index
        self.wq = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)
        self.scale = self.head_dim ** -0.5

    def _qkv(self, h: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ntok = h.shape[0]
        q = rotate(self.wq(h).view(ntok, self.heads, self.head_dim), positions)  # (T, H, d)
        k = rotate(self.wk(h).view(ntok, self.kv_heads, self.head_dim), positions)  # (T, Hkv, d)
        v = self.wv(h).view(ntok, self.kv_heads, self.head_dim)  # (T, Hkv, d)
        return q, k, v

    def forward(self, h: torch.Tensor, step: StepInputs, cache: ModelCache, layout: PagedLayout) -> torch.Tensor:
        q, k, v = self._qkv(h, step.positions)
        k_cache, v_cache = cache.k[self.cache_index], cache.v[self.cache_index]
        write_kv(k_cache, v_cache, k, v, step.slot_mapping)
        out = paged_attention(q, k_cache, v_cache, layout, self.scale)  # (T, H, d)
        return self.wo(out.reshape(h.shape[0], -1))

    def forward_dense(self, h: torch.Tensor) -> torch.Tensor:
        ntok = h.shape[0]
        q, k, v = self._qkv(h, torch.arange(ntok, device=h.device))
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (L, H, d)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                             is_causal=True, scale=self.scale)  # (H, L, d)
        return self.wo(out.transpose(0, 1).reshape(ntok, -1))


class MLP(nn.Module):
    """SwiGLU."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=False)

    def forward(self, h: torch.Tensor, *_: object) -> torch.Tensor:
        return self.down(F.silu(self.gate(h)) * self.up(h))

    def forward_dense(self, h: torch.Tensor) -> torch.Tensor:
        return self.forward(h)
