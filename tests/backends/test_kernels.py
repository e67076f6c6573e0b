"""Kernels against independent oracles: the SSD scans against the token-by-token recurrence, paged attention
against a naive per-row softmax over contiguous keys."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # the real torch engine's kernels

torch = pytest.importorskip("torch")

from cgbench.backends.torch.kernels import (  # noqa: E402
    attention,
    paged_attention_torch,
    segsum,
    ssd_chunked,
    ssd_sequential,
    ssd_step,
    ssd_varlen,
    write_kv,
)

F64 = torch.float64


def _ssm_inputs(gen, lengths_or_shape, heads, pdim, nstate):
    shape = tuple(lengths_or_shape)
    x = torch.randn(*shape, heads, pdim, generator=gen, dtype=F64)
    a = -torch.rand(*shape, heads, generator=gen, dtype=F64) * 0.7  # log decays <= 0
    b = torch.randn(*shape, heads, nstate, generator=gen, dtype=F64)
    c = torch.randn(*shape, heads, nstate, generator=gen, dtype=F64)
    return x, a, b, c


def test_segsum_is_the_sum_over_each_interval():
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(3, 6, generator=gen, dtype=F64)
    out = segsum(a)
    for i in range(6):
        for j in range(6):
            want = a[:, j + 1:i + 1].sum(-1) if i >= j else torch.full((3,), -math.inf, dtype=F64)
            torch.testing.assert_close(out[:, i, j], want)


@pytest.mark.parametrize("batch,length,heads,pdim,nstate,chunk", [
    (2, 32, 3, 4, 5, 8),    # chunk divides the length
    (3, 29, 2, 3, 4, 7),    # it does not
    (1, 5, 1, 2, 2, 16),    # one partial chunk
    (2, 13, 4, 16, 16, 1),  # one token per chunk
    (2, 40, 2, 4, 3, 64),
])
@pytest.mark.parametrize("with_initial", [False, True])
def test_ssd_chunked_equals_the_recurrence(batch, length, heads, pdim, nstate, chunk, with_initial):
    gen = torch.Generator().manual_seed(batch * 100 + length)
    x, a, b, c = _ssm_inputs(gen, (batch, length), heads, pdim, nstate)
    h0 = torch.randn(batch, heads, pdim, nstate, generator=gen, dtype=F64) if with_initial else None
    y, final = ssd_chunked(x, a, b, c, chunk, h0)
    y_ref, final_ref = ssd_sequential(x, a, b, c, h0)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(final, final_ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk", [3, 5, 16])
def test_ssd_chunked_resumes_from_a_final_state(chunk):
    """Splitting a sequence anywhere and feeding each piece the previous piece's final state changes nothing."""
    gen = torch.Generator().manual_seed(7)
    x, a, b, c = _ssm_inputs(gen, (2, 23), 2, 3, 4)
    y_whole, final_whole = ssd_chunked(x, a, b, c, chunk)
    state, ys = None, []
    for lo, hi in ((0, 4), (4, 5), (5, 17), (17, 23)):
        y, state = ssd_chunked(x[:, lo:hi], a[:, lo:hi], b[:, lo:hi], c[:, lo:hi], chunk, state)
        ys.append(y)
    torch.testing.assert_close(torch.cat(ys, dim=1), y_whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, final_whole, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk", [1, 4, 6, 32])
def test_ssd_varlen_keeps_ragged_rows_apart(chunk):
    """Rows of 7, 0, 1, 12, 3 tokens, then 4 padding tokens: each real row equals its own recurrence from its
    own initial state, an empty row keeps its state, and neither padding nor neighbours leak in."""
    gen = torch.Generator().manual_seed(chunk)
    lengths, heads, pdim, nstate, n_pad = [7, 0, 1, 12, 3], 2, 3, 4, 4
    nrows, real = len(lengths), sum(lengths)
    x, a, b, c = _ssm_inputs(gen, (real + n_pad,), heads, pdim, nstate)
    row = torch.tensor([r for r, n in enumerate(lengths) for _ in range(n)] + [nrows] * n_pad)
    h0 = torch.randn(nrows, heads, pdim, nstate, generator=gen, dtype=F64)
    ends = torch.tensor(lengths).cumsum(0)
    last = torch.where(torch.tensor(lengths) > 0, ends - 1, -1)
    y, final = ssd_varlen(x, a, b, c, row, h0, last, chunk)
    start = 0
    for r, n in enumerate(lengths):
        if n == 0:
            torch.testing.assert_close(final[r], h0[r])
            continue
        sl = slice(start, start + n)
        y_ref, f_ref = ssd_sequential(x[None, sl], a[None, sl], b[None, sl], c[None, sl], h0[r:r + 1])
        torch.testing.assert_close(y[sl], y_ref[0], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(final[r], f_ref[0], rtol=1e-10, atol=1e-10)
        start += n


def test_ssd_step_is_one_step_of_the_recurrence():
    gen = torch.Generator().manual_seed(3)
    rows, heads, pdim, nstate = 3, 4, 5, 6
    x = torch.randn(rows, heads, pdim, generator=gen, dtype=F64)
    dt = torch.rand(rows, heads, generator=gen, dtype=F64)
    a_head = -torch.rand(heads, generator=gen, dtype=F64) * 4
    b = torch.randn(rows, heads, nstate, generator=gen, dtype=F64)
    c = torch.randn(rows, heads, nstate, generator=gen, dtype=F64)
    state = torch.randn(rows, heads, pdim, nstate, generator=gen, dtype=F64)
    y, new = ssd_step(state, x, dt, a_head, b, c)
    y_ref, new_ref = ssd_sequential((x * dt[..., None])[:, None], (dt * a_head)[:, None], b[:, None],
                                    c[:, None], state)
    torch.testing.assert_close(y, y_ref[:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new, new_ref, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------- attention

def _naive_attention(q, keys, vals, context, scale):
    """q (n, H, d) are the last n positions of a sequence whose keys / values are (context + n, Hkv, d)."""
    heads, kv_heads = q.shape[1], keys.shape[1]
    out = torch.empty_like(q)
    for i in range(q.shape[0]):
        visible = context + i + 1
        for h in range(heads):
            kh = h // (heads // kv_heads)
            scores = [float(q[i, h] @ keys[j, kh]) * scale for j in range(visible)]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            out[i, h] = sum(w / total * vals[j, kh] for j, w in enumerate(weights))
    return out


@pytest.mark.parametrize("tile_elems", [1 << 24, 1])  # one tile, and one token per tile
def test_paged_attention_matches_naive_softmax(monkeypatch, tile_elems):
    """Rows with (cached, new) = (0, 5), (6, 1), (9, 3), (3, 1), (0, 1) in shuffled blocks of 4, 2 padding
    tokens, GQA 4/2: each real token equals softmax attention over its row's prefix and itself."""
    monkeypatch.setattr(attention, "_GATHER_ELEMS", tile_elems)
    gen = torch.Generator().manual_seed(11)
    heads, kv_heads, hdim, bs, n_blocks = 4, 2, 8, 4, 12
    rows = [(0, 5), (6, 1), (9, 3), (3, 1), (0, 1)]
    nrows, n_pad = len(rows), 2
    k_cache = torch.randn(n_blocks + 1, bs, kv_heads, hdim, generator=gen, dtype=F64)  # garbage everywhere
    v_cache = torch.randn(n_blocks + 1, bs, kv_heads, hdim, generator=gen, dtype=F64)
    free = torch.randperm(n_blocks, generator=gen).tolist()
    max_blocks = 4
    tables = torch.full((nrows + 1, max_blocks), n_blocks)
    seqs, q_parts, new_k, new_v, slot_mapping, token_row, positions = [], [], [], [], [], [], []
    for r, (ctx, n) in enumerate(rows):
        total = ctx + n
        blocks = [free.pop() for _ in range(-(-total // bs))]
        tables[r, :len(blocks)] = torch.tensor(blocks)
        keys = torch.randn(total, kv_heads, hdim, generator=gen, dtype=F64)
        vals = torch.randn(total, kv_heads, hdim, generator=gen, dtype=F64)
        for p in range(total):
            slot = blocks[p // bs] * bs + p % bs
            if p < ctx:  # the cached prefix is already in place
                k_cache.view(-1, kv_heads, hdim)[slot] = keys[p]
                v_cache.view(-1, kv_heads, hdim)[slot] = vals[p]
            else:
                new_k.append(keys[p])
                new_v.append(vals[p])
                slot_mapping.append(slot)
                token_row.append(r)
                positions.append(p)
        q_parts.append(torch.randn(n, heads, hdim, generator=gen, dtype=F64))
        seqs.append((keys, vals))
    for _ in range(n_pad):
        new_k.append(torch.randn(kv_heads, hdim, generator=gen, dtype=F64))
        new_v.append(torch.randn(kv_heads, hdim, generator=gen, dtype=F64))
        slot_mapping.append(-1)
        token_row.append(nrows)
        positions.append(0)
    q = torch.cat(q_parts + [torch.randn(n_pad, heads, hdim, generator=gen, dtype=F64)])
    before = k_cache.clone().view(-1, kv_heads, hdim)
    write_kv(k_cache, v_cache, torch.stack(new_k), torch.stack(new_v), torch.tensor(slot_mapping))
    flat = k_cache.view(-1, kv_heads, hdim)
    for slot in range(n_blocks * bs):  # real slots: new keys where written, untouched elsewhere
        if slot in slot_mapping:
            torch.testing.assert_close(flat[slot], new_k[slot_mapping.index(slot)])
        else:
            torch.testing.assert_close(flat[slot], before[slot])
    assert any(torch.equal(flat[n_blocks * bs], k) for k in new_k[-n_pad:])  # padding -> the trash block

    scale = hdim ** -0.5
    out = paged_attention_torch(q, k_cache, v_cache, torch.tensor(token_row), torch.tensor(positions), tables,
                                max_blocks, scale)
    assert torch.isfinite(out).all()
    start = 0
    for r, (ctx, n) in enumerate(rows):
        keys, vals = seqs[r]
        want = _naive_attention(q[start:start + n], keys, vals, ctx, scale)
        torch.testing.assert_close(out[start:start + n], want, rtol=1e-10, atol=1e-10)
        start += n


def test_paged_attention_ignores_blocks_beyond_the_bound():
    """Reading 2 or 5 logical blocks gives the same result when every row fits in 2: masked keys weigh 0."""
    gen = torch.Generator().manual_seed(5)
    k_cache = torch.randn(8, 4, 1, 4, generator=gen, dtype=F64)
    v_cache = torch.randn(8, 4, 1, 4, generator=gen, dtype=F64)
    tables = torch.tensor([[3, 1, 5, 6, 0], [7, 7, 7, 7, 7]])
    q = torch.randn(3, 2, 4, generator=gen, dtype=F64)
    row, pos = torch.tensor([0, 0, 0]), torch.tensor([2, 5, 7])
    short = paged_attention_torch(q, k_cache, v_cache, row, pos, tables, 2, 0.5)
    long = paged_attention_torch(q, k_cache, v_cache, row, pos, tables, 5, 0.5)
    torch.testing.assert_close(short, long, rtol=1e-12, atol=1e-12)
