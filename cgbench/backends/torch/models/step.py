"""What one forward step reads: the batch description and the per-layer caches.

A step is ``T`` packed tokens in ``R`` rows (prefill chunks and decodes; padding rows are empty) plus a dummy row
``R`` that owns the padding tokens. Tensors are views of a runner's static buffers; the ints fix every shape, so
the same step can be replayed from a CUDA graph after new values are copied into the buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cgbench.backends.torch.kernels import PagedLayout


@dataclass(slots=True)
class StepInputs:
    input_ids: torch.Tensor  # (T,) int64
    positions: torch.Tensor  # (T,) position of each token in its sequence
    slot_mapping: torch.Tensor  # (T,) KV slot (block * block_size + offset); -1 for padding
    token_row: torch.Tensor  # (T,) row of each token; padding tokens -> R
    query_start: torch.Tensor  # (R+1,) first token of each row; [R] = number of real tokens
    query_len: torch.Tensor  # (R+1,) tokens of each row in this step (0 for padding rows)
    context_len: torch.Tensor  # (R+1,) tokens already cached before this step (the row's start_pos)
    state_slot: torch.Tensor  # (R+1,) Mamba state slot; padding rows -> the trash slot
    block_tables: torch.Tensor  # (R+1, max_blocks) physical KV block per logical block; unused -> trash
    last_token: torch.Tensor  # (R,) index of each row's last token; -1 for an empty row
    num_rows: int  # R
    kv_blocks: int  # logical KV blocks attention reads per row (static bound)
    decode_only: bool  # every row has one token and token i is row i (T == R)

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]

    def token_valid(self) -> torch.Tensor:
        return self.token_row < self.num_rows  # (T,)

    def attention_layout(self) -> PagedLayout:
        rows = self.num_rows
        return PagedLayout(
            token_row=self.token_row, positions=self.positions, block_tables=self.block_tables,
            cu_seqlens_q=self.query_start, seqlens_k=self.context_len[:rows] + self.query_len[:rows],
            kv_blocks=self.kv_blocks, max_seqlen_q=self.num_tokens, decode_only=self.decode_only)


@dataclass(slots=True)
class ModelCache:
    """Per-layer state. The last KV block and the last state slot are trash targets for padding."""

    k: list[torch.Tensor]  # per attention layer (blocks + 1, block_size, kv_heads, head_dim)
    v: list[torch.Tensor]
    conv: list[torch.Tensor]  # per Mamba layer (slots + 1, conv_kernel - 1, conv_dim)
    ssm: list[torch.Tensor]  # per Mamba layer (slots + 1, heads, head_dim, state_dim)

    @property
    def trash_block(self) -> int:
        return self.k[0].shape[0] - 1 if self.k else 0

    @property
    def trash_slot(self) -> int:
        return self.ssm[0].shape[0] - 1 if self.ssm else 0
