"""Mamba-2 mixer (Nemotron-H layout): in_proj -> causal conv1d -> SSD -> gated RMSNorm -> out_proj."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cgbench.backends.torch.kernels import ssd_chunked, ssd_step, ssd_varlen
from cgbench.backends.torch.kernels.ssd import compute_dtype
from cgbench.backends.torch.models.conv import conv_dense, conv_varlen
from cgbench.backends.torch.models.layers import NORM_EPS
from cgbench.backends.torch.models.step import ModelCache, StepInputs
from cgbench.config.schema import ModelConfig


class Mamba2Mixer(nn.Module):
    def __init__(self, cfg: ModelConfig, cache_index: int, chunk: int):
        super().__init__()
        self.heads, self.head_dim = cfg.mamba_num_heads, cfg.mamba_head_dim
        self.groups, self.state_dim = cfg.mamba_num_groups, cfg.mamba_state_dim
        self.inner = self.heads * self.head_dim
        self.conv_dim = self.inner + 2 * self.groups * self.state_dim
        self.cache_index, self.chunk = cache_index, chunk
        self.in_proj = nn.Linear(cfg.hidden_size, self.inner + self.conv_dim + self.heads, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(self.conv_dim, cfg.mamba_conv_kernel))
        self.conv_bias = nn.Parameter(torch.zeros(self.conv_dim))
        self.dt_bias = nn.Parameter(torch.zeros(self.heads))
        self.a_log = nn.Parameter(torch.zeros(self.heads))
        self.d_skip = nn.Parameter(torch.ones(self.heads))
        self.norm_weight = nn.Parameter(torch.ones(self.inner))
        self.out_proj = nn.Linear(self.inner, cfg.hidden_size, bias=False)

    def _split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z, xbc, dt = self.in_proj(h).split([self.inner, self.conv_dim, self.heads], dim=-1)
        return z, xbc, dt  # (T, inner), (T, conv_dim), (T, H)

    def _per_head(self, t: torch.Tensor) -> torch.Tensor:
        """(T, G*N) -> (T, H, N): head h reads group h // (H/G). An expand, not repeat_interleave, which may size
        its output on the host (a sync a CUDA graph cannot hold)."""
        ntok, per_group = t.shape[0], self.heads // self.groups
        grouped = t.reshape(ntok, self.groups, 1, self.state_dim)  # (T, G, 1, N)
        return grouped.expand(ntok, self.groups, per_group, self.state_dim).reshape(ntok, self.heads, self.state_dim)

    def _ssm_inputs(self, xbc: torch.Tensor, dt: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ntok = xbc.shape[0]
        acc = compute_dtype(xbc.dtype)
        x, b, c = F.silu(xbc).to(acc).split([self.inner, self.groups * self.state_dim,
                                              self.groups * self.state_dim], dim=-1)
        x = x.view(ntok, self.heads, self.head_dim)  # (T, H, P)
        b, c = self._per_head(b), self._per_head(c)  # (T, H, N)
        dt = F.softplus(dt.to(acc) + self.dt_bias.to(acc))  # (T, H)
        a_head = -self.a_log.to(acc).exp()  # (H,)
        return x, b, c, dt, a_head

    def _output(self, y: torch.Tensor, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = y + self.d_skip.to(y.dtype)[:, None] * x  # (T, H, P)
        gated = y.reshape(y.shape[0], self.inner) * F.silu(z.to(y.dtype))  # (T, inner)
        grouped = gated.view(y.shape[0], self.groups, -1)  # (T, G, inner/G): Nemotron-H normalises per group
        normed = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        out = normed.reshape(y.shape[0], self.inner).to(z.dtype) * self.norm_weight
        return self.out_proj(out)

    def forward(self, h: torch.Tensor, step: StepInputs, cache: ModelCache, *_: object) -> torch.Tensor:
        conv_state, ssm_state = cache.conv[self.cache_index], cache.ssm[self.cache_index]
        nrows = step.num_rows
        slots = step.state_slot[:nrows]  # (R,)
        z, xbc, dt = self._split(h)
        xbc, new_conv = conv_varlen(xbc, conv_state, step, self.conv_weight, self.conv_bias)
        conv_state.index_copy_(0, slots, new_conv.to(conv_state.dtype))
        x, b, c, dt, a_head = self._ssm_inputs(xbc, dt)
        valid = step.token_valid()[:, None]  # (T, 1)
        x = torch.where(valid[..., None], x, 0.0)  # padding tokens carry nothing into any state
        dt = torch.where(valid, dt, 0.0)
        h0 = ssm_state[slots].to(x.dtype)  # (R, H, P, N)
        h0 = torch.where((step.context_len[:nrows] == 0)[:, None, None, None], 0.0, h0)
        if step.decode_only:
            y, final = ssd_step(h0, x, dt, a_head, b, c)
        else:
            y, final = ssd_varlen(x * dt[..., None], dt * a_head, b, c, step.token_row, h0, step.last_token,
                                  self.chunk)
        ssm_state.index_copy_(0, slots, final.to(ssm_state.dtype))
        return self._output(y, x, z)

    def forward_dense(self, h: torch.Tensor) -> torch.Tensor:
        z, xbc, dt = self._split(h)
        x, b, c, dt, a_head = self._ssm_inputs(conv_dense(xbc, self.conv_weight, self.conv_bias), dt)
        y, _ = ssd_chunked((x * dt[..., None])[None], (dt * a_head)[None], b[None], c[None], self.chunk)
        return self._output(y[0], x, z)
