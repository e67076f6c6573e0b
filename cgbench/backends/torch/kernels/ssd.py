"""Mamba-2 SSD (state-space duality) scans.

The recurrence, per head, with ``a_t = dt_t * A`` (a log decay, <= 0) and ``x_t`` already scaled by ``dt_t``::

    h_t = exp(a_t) * h_{t-1} + x_t B_t^T        y_t = h_t C_t

``ssd_varlen`` evaluates it over a packed stream of ragged rows (a prefill batch) in the paper's chunked form:
a stable ``segsum`` and four einsums (intra-chunk outputs, chunk-end states, the inter-chunk recurrence, state to
output), with row masks so that rows never mix, a per-row initial state and a per-row final state. Every shape
depends only on the stream length, the row count and the chunk size, so it is CUDA-graph capturable.
``ssd_sequential`` is the token-by-token oracle; ``ssd_step`` the one-token decode update (mamba-ssm's
``selective_state_update`` on CUDA when importable).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

try:  # optional GPU kernel
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update as _mamba_ssm_step
except Exception:  # noqa: BLE001 - any import failure (no package, no triton, no CUDA) means "fall back"
    _mamba_ssm_step = None


def mamba_ssm_available(device: torch.device) -> bool:
    return (_mamba_ssm_step is not None and device.type == "cuda"
            and os.environ.get("CGBENCH_KERNELS", "") != "torch")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scans run in at least float32: exp and cumsum of log decays lose too much in half precision."""
    return torch.promote_types(dtype, torch.float32)


def segsum(a: torch.Tensor) -> torch.Tensor:
    """a (..., Q) -> (..., Q, Q) with out[..., i, j] = sum(a[..., j+1 : i+1]) for i >= j, -inf above the diagonal.

    Built by a masked cumsum rather than a difference of prefix sums, which would cancel catastrophically."""
    q = a.shape[-1]
    strict = torch.ones(q, q, dtype=torch.bool, device=a.device).tril(-1)  # (Q, Q) d > e
    rep = a[..., :, None].expand(*a.shape, q)  # (..., Q, Q) rep[..., d, e] = a[d]
    out = rep.masked_fill(~strict, 0.0).cumsum(dim=-2)  # out[i, e] = sum_{e < d <= i} a[d]
    lower = torch.ones(q, q, dtype=torch.bool, device=a.device).tril()
    return out.masked_fill(~lower, float("-inf"))


def ssd_varlen(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, row: torch.Tensor,
               h0: torch.Tensor, last: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD over a packed stream of ragged rows.

    x (L, H, P) inputs scaled by dt; a (L, H) log decays; b, c (L, H, N); row (L,) int row id of each token,
    each row one contiguous run, ids in [0, R] where R marks padding tokens; h0 (R, H, P, N) initial states;
    last (R,) stream index of each row's last token, -1 for an empty row; chunk: tokens per chunk (static).
    Returns y (L, H, P) and the final states (R, H, P, N) (h0 for an empty row)."""
    length, heads, pdim = x.shape
    nrows, nstate = h0.shape[0], b.shape[-1]
    q = chunk
    nc = -(-length // q)
    pad = nc * q - length
    # Padding tokens: their own row id, zero input and zero decay, so they touch nothing real.
    x = F.pad(x, (0, 0, 0, 0, 0, pad))
    a = F.pad(a, (0, 0, 0, pad))
    b = F.pad(b, (0, 0, 0, 0, 0, pad))
    c = F.pad(c, (0, 0, 0, 0, 0, pad))
    row = F.pad(row, (0, pad), value=nrows)
    h0e = torch.cat([h0, h0.new_zeros(1, heads, pdim, nstate)])  # (R+1, H, P, N) padding row starts at zero

    xc = x.view(nc, q, heads, pdim)
    ac = a.view(nc, q, heads)
    bc = b.view(nc, q, heads, nstate)
    cc = c.view(nc, q, heads, nstate)
    rc = row.view(nc, q)

    same = rc[:, :, None] == rc[:, None, :]  # (nc, Q, Q)
    seg = segsum(ac.transpose(1, 2))  # (nc, H, Q, Q)
    lmat = torch.where(same[:, None], seg.exp(), 0.0)  # (nc, H, Q, Q) decay i <- j within one row, causal

    # 1. outputs from inputs of the same chunk
    y = torch.einsum("cihn,cjhn,chij,cjhp->cihp", cc, bc, lmat, xc)  # (nc, Q, H, P)

    # 2. state of each chunk's end row at the chunk end, from this chunk's inputs (plus h0 if it starts here)
    end_row = rc[:, -1]  # (nc,)
    local = torch.einsum("chj,cjhn,cjhp->chpn", lmat[:, :, -1, :], bc, xc)  # (nc, H, P, N)
    in_end_row = (rc == end_row[:, None]).to(ac.dtype)  # (nc, Q)
    chunk_log = torch.einsum("cj,cjh->ch", in_end_row, ac)  # (nc, H) end row's log decay inside the chunk
    prev_end = torch.cat([end_row.new_full((1,), -1), end_row[:-1]])  # (nc,) row carried into each chunk
    continuing = (prev_end == end_row)[:, None, None, None]  # (nc, 1, 1, 1)
    start_term = chunk_log.exp()[..., None, None] * h0e[end_row]  # (nc, H, P, N)
    inject = local + torch.where(continuing, 0.0, start_term)  # (nc, H, P, N)

    # 3. inter-chunk recurrence: a chunk-end state flows to a later chunk end only within one row
    link = end_row[:, None] == end_row[None, :]  # (nc, nc)
    chunk_seg = segsum(chunk_log.transpose(0, 1))  # (H, nc, nc)
    weights = torch.where(link[None], chunk_seg.exp(), 0.0)  # (H, nc, nc)
    state_end = torch.einsum("hcs,shpn->chpn", weights, inject)  # (nc, H, P, N)

    # 4. outputs from the state each token's row segment starts from: the carried chunk state or its h0
    state_in = torch.cat([state_end.new_zeros(1, heads, pdim, nstate), state_end[:-1]])  # (nc, H, P, N)
    carried = rc == prev_end[:, None]  # (nc, Q)
    causal_same = same & torch.ones(q, q, dtype=torch.bool, device=x.device).tril()  # (nc, Q, Q)
    since_start = torch.einsum("cij,cjh->cih", causal_same.to(ac.dtype), ac)  # (nc, Q, H) log decay so far
    base = torch.where(carried[..., None, None, None], state_in[:, None], h0e[rc])  # (nc, Q, H, P, N)
    decay_in = since_start.exp()  # (nc, Q, H)
    y = y + decay_in[..., None] * torch.einsum("cihn,cihpn->cihp", cc, base)

    # 5. final state of each row: the state after its last token
    pos = last.clamp(min=0)
    cr, ir = pos // q, pos % q  # (R,) chunk and offset of the last token
    lrow = lmat.permute(0, 2, 1, 3)[cr, ir]  # (R, H, Q) decay from each chunk token to the last token
    final = torch.einsum("rhj,rjhn,rjhp->rhpn", lrow, bc[cr], xc[cr])  # (R, H, P, N)
    final = final + decay_in[cr, ir][..., None, None] * base[cr, ir]
    final = torch.where((last >= 0)[:, None, None, None], final, h0)
    return y.reshape(nc * q, heads, pdim)[:length], final


def ssd_chunked(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk: int,
                initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched equal-length SSD. x (B, L, H, P) scaled by dt; a (B, L, H); b, c (B, L, H, N);
    initial_state (B, H, P, N) or None (zeros). Returns y (B, L, H, P) and the final state (B, H, P, N)."""
    nb, length, heads, pdim = x.shape
    nstate = b.shape[-1]
    if initial_state is None:
        initial_state = x.new_zeros(nb, heads, pdim, nstate)
    row = torch.arange(nb, device=x.device).repeat_interleave(length)  # (B*L,)
    last = torch.arange(nb, device=x.device) * length + length - 1  # (B,)
    y, final = ssd_varlen(x.reshape(nb * length, heads, pdim), a.reshape(nb * length, heads),
                          b.reshape(nb * length, heads, nstate), c.reshape(nb * length, heads, nstate),
                          row, initial_state, last, chunk)
    return y.view(nb, length, heads, pdim), final


def ssd_sequential(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                   initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token oracle with the shapes of ``ssd_chunked``."""
    nb, length, heads, pdim = x.shape
    h = x.new_zeros(nb, heads, pdim, b.shape[-1]) if initial_state is None else initial_state.clone()
    ys = []
    for t in range(length):
        h = h * a[:, t].exp()[..., None, None] + torch.einsum("bhp,bhn->bhpn", x[:, t], b[:, t])
        ys.append(torch.einsum("bhpn,bhn->bhp", h, c[:, t]))
    return torch.stack(ys, dim=1), h


def ssd_step(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, a_head: torch.Tensor, b: torch.Tensor,
             c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode token per row. state (R, H, P, N); x (R, H, P) unscaled; dt (R, H) after softplus;
    a_head (H,) the (negative) A; b, c (R, H, N). Returns y (R, H, P) without the D skip, and the new state."""
    if mamba_ssm_available(x.device):
        new = state.float().contiguous()  # the kernel updates it in place
        pdim, nstate = x.shape[-1], b.shape[-1]
        y = _mamba_ssm_step(new, x, dt[..., None].expand(*dt.shape, pdim),
                            a_head.float()[:, None, None].expand(-1, pdim, nstate), b, c)
        return y, new.to(state.dtype)
    decay = (dt * a_head).exp()  # (R, H)
    new = state * decay[..., None, None] + torch.einsum("rh,rhp,rhn->rhpn", dt, x, b)  # (R, H, P, N)
    return torch.einsum("rhpn,rhn->rhp", new, c), new
