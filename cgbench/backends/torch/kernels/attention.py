"""Causal attention of packed query tokens over a paged KV cache.

The cache of one layer is ``(num_blocks, block_size, kv_heads, head_dim)``; its LAST block is a trash block that
padding tokens write to and padding rows read from, so a padded batch needs no data-dependent branch. Each step
first writes the new keys / values (``write_kv``), then every query token attends to the positions
``0 .. position`` of its row (``paged_attention``): the cached prefix plus its own chunk up to itself.

Two paths: flash-attn (``flash_attn_varlen_func`` / ``flash_attn_with_kvcache`` with ``block_table``) when it is
importable, the tensors are on CUDA in fp16 / bf16 and the block size is a multiple of 256 (flash-attn 2's
paged-KV rule); otherwise pure torch, gathering each token's keys through its row's block table. Both read only
static shapes, so both can be captured in a CUDA graph.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:  # optional GPU kernels
    from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache
except Exception:  # noqa: BLE001 - any import failure means "fall back to torch"
    flash_attn_varlen_func = flash_attn_with_kvcache = None

_GATHER_ELEMS = 1 << 24  # torch path: gathered key elements per token tile (bounds the transient memory)


@dataclass(slots=True)
class PagedLayout:
    """Where each query token and row lives. Tensors are views of static buffers; ints are static."""

    token_row: torch.Tensor  # (T,) row of each token; padding tokens -> the dummy row R
    positions: torch.Tensor  # (T,) position of each token in its sequence (padding: 0)
    block_tables: torch.Tensor  # (R+1, >= kv_blocks) physical block per logical block; unused -> trash block
    cu_seqlens_q: torch.Tensor  # (R+1,) first token of each row, then the end of the real tokens
    seqlens_k: torch.Tensor  # (R,) keys per row after this step's write (cached + new); 0 for padding rows
    kv_blocks: int  # logical blocks read per row (a bound on every row's length)
    max_seqlen_q: int  # a bound on any row's query length
    decode_only: bool  # every row holds exactly one token and token i belongs to row i


def flash_available(q: torch.Tensor, block_size: int) -> bool:
    return (flash_attn_varlen_func is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and block_size % 256 == 0 and os.environ.get("CGBENCH_KERNELS", "") != "torch")


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """k, v (T, Hkv, d) into the caches at slot_mapping (T,) (block * block_size + offset); -1 -> trash block."""
    nblocks, block_size = k_cache.shape[:2]
    trash = (nblocks - 1) * block_size
    slots = torch.where(slot_mapping < 0, trash, slot_mapping)  # (T,)
    k_cache.view(nblocks * block_size, *k_cache.shape[2:]).index_copy_(0, slots, k)
    v_cache.view(nblocks * block_size, *v_cache.shape[2:]).index_copy_(0, slots, v)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, layout: PagedLayout,
                    scale: float) -> torch.Tensor:
    """q (T, H, d) -> (T, H, d). Rows of padding tokens are finite but meaningless."""
    if flash_available(q, k_cache.shape[1]):
        return _flash(q, k_cache, v_cache, layout, scale)
    return paged_attention_torch(q, k_cache, v_cache, layout.token_row, layout.positions, layout.block_tables,
                                 layout.kv_blocks, scale)


def paged_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          token_row: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
                          kv_blocks: int, scale: float) -> torch.Tensor:
    """Pure-torch paged attention: token t attends to positions 0..positions[t] of row token_row[t]."""
    ntok, heads, hdim = q.shape
    nblocks, block_size, kv_heads = k_cache.shape[:3]
    groups = heads // kv_heads
    span = kv_blocks * block_size
    acc = torch.promote_types(q.dtype, torch.float32)
    flat_k = k_cache.view(nblocks * block_size, kv_heads, hdim)
    flat_v = v_cache.view(nblocks * block_size, kv_heads, hdim)
    offsets = torch.arange(block_size, device=q.device)  # (BS,)
    key_pos = torch.arange(span, device=q.device)  # (S,)
    tables = block_tables[:, :kv_blocks].long()  # (R+1, KB)
    out = torch.empty_like(q)
    tile = max(1, _GATHER_ELEMS // (span * kv_heads * hdim))
    for s in range(0, ntok, tile):
        e = min(ntok, s + tile)
        slots = (tables[token_row[s:e]][..., None] * block_size + offsets).reshape(e - s, span)  # (t, S)
        keys = flat_k[slots].to(acc)  # (t, S, Hkv, d)
        vals = flat_v[slots].to(acc)  # (t, S, Hkv, d)
        qt = q[s:e].to(acc).view(e - s, kv_heads, groups, hdim)  # (t, Hkv, G, d)
        scores = torch.einsum("tkgd,tskd->tkgs", qt, keys) * scale  # (t, Hkv, G, S)
        allowed = key_pos[None, :] <= positions[s:e, None]  # (t, S)
        scores = scores.masked_fill(~allowed[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[s:e] = torch.einsum("tkgs,tskd->tkgd", probs, vals).reshape(e - s, heads, hdim).to(q.dtype)
    return out


def _flash(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, layout: PagedLayout,
           scale: float) -> torch.Tensor:
    nrows = layout.seqlens_k.shape[0]
    tables = layout.block_tables[:nrows, :layout.kv_blocks].to(torch.int32).contiguous()  # (R, KB)
    seqlens_k = layout.seqlens_k.to(torch.int32)  # (R,)
    if layout.decode_only:
        out = flash_attn_with_kvcache(q[:, None], k_cache, v_cache, cache_seqlens=seqlens_k,
                                      block_table=tables, softmax_scale=scale, causal=True)  # (R, 1, H, d)
        return out[:, 0]
    cu_k = F.pad(seqlens_k.cumsum(0, dtype=torch.int32), (1, 0))  # (R+1,)
    out = flash_attn_varlen_func(q, k_cache, v_cache, layout.cu_seqlens_q.to(torch.int32), cu_k,
                                 layout.max_seqlen_q, layout.kv_blocks * k_cache.shape[1],
                                 softmax_scale=scale, causal=True, block_table=tables)  # (T, H, d)
    # Tokens past the last row are left unwritten by the kernel; give them defined values.
    real = torch.arange(q.shape[0], device=q.device) < layout.cu_seqlens_q[-1]
    return torch.where(real[:, None, None], out, 0.0)
