"""Depthwise causal conv1d over packed ragged rows, resuming from and returning per-row conv states.

Window element k of token t multiplies ``weight[:, k]`` with the row input at offset ``t - (K-1) + k``; offsets
before the row's first token of this step come from its conv state (the last K-1 inputs seen so far, zeros for a
fresh row). Everything is one gather from ``[states; inputs]`` with static shapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cgbench.backends.torch.models.step import StepInputs


def conv_varlen(xbc: torch.Tensor, conv_state: torch.Tensor, step: StepInputs, weight: torch.Tensor,
                bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """xbc (T, C) raw inputs; conv_state (slots, K-1, C); weight (C, K); bias (C,).
    Returns the conv output (T, C) (before the activation) and each row's new state (R, K-1, C)."""
    ntok, channels = xbc.shape
    width = weight.shape[1] - 1
    nrows = step.num_rows
    starts = step.query_start.long()  # (R+1,)
    fresh = step.context_len == 0  # (R+1,)
    states = conv_state[step.state_slot]  # (R+1, K-1, C)
    states = torch.where(fresh[:, None, None], 0.0, states).to(xbc.dtype)
    source = torch.cat([states.reshape((nrows + 1) * width, channels), xbc])  # ((R+1)(K-1) + T, C)

    def index(row: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        from_state = row * width + width + offset  # offset in [-(K-1), 0)
        from_input = (nrows + 1) * width + starts[row] + offset
        return torch.where(offset < 0, from_state, from_input)

    rows = step.token_row  # (T,)
    offset = torch.arange(ntok, device=xbc.device) - starts[rows]  # (T,) offset of each token in its row
    taps = torch.arange(width + 1, device=xbc.device) - width  # (K,) -(K-1) .. 0
    windows = source[index(rows[:, None], offset[:, None] + taps)]  # (T, K, C)
    out = torch.einsum("tkc,ck->tc", windows, weight) + bias  # (T, C)

    row_ids = torch.arange(nrows, device=xbc.device)  # (R,)
    tail = step.query_len[:nrows, None] - width + torch.arange(width, device=xbc.device)  # (R, K-1)
    new_state = source[index(row_ids[:, None], tail)]  # (R, K-1, C)
    return out, new_state


def conv_dense(xbc: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One whole sequence from a zero state: xbc (L, C) -> (L, C)."""
    width = weight.shape[1] - 1
    out = F.conv1d(xbc.T[None], weight[:, None, :], bias, padding=width, groups=xbc.shape[1])  # (1, C, L+K-1)
    return out[0, :, : xbc.shape[0]].T
