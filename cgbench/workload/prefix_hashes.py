"""Prefix-block hashes of a request at the engine's KV block size.

A prompt's content is described by *source blocks*: ``source_tokens`` tokens each, block ``i``
covering prompt tokens ``[i * source_tokens, (i + 1) * source_tokens)`` (the last one may be
partial), each named by an integer id. Two prompts hold the same tokens wherever they hold the same
source ids at the same positions (Mooncake's ``hash_ids``: 512-token blocks; the synthetic prefix
model's ids: ``cgbench.workload.prefix_model``).

The engine hashes only *complete* blocks of its own size ``block_size`` (Megatron's
``precomputed_block_hashes``: the trailing partial block has none), and its hashes are chained: the
hash of engine block ``j`` mixes the hash of block ``j - 1`` with the ids of the source blocks that
cover block ``j``'s tokens and where block ``j`` starts inside the first of them. So engine block
``j`` of two prompts hashes alike exactly when their source ids agree on every source block up to
the one holding block ``j``'s last token, whatever the two sizes are (a 512-token Mooncake block is
two 256-token engine blocks; four 128-token ones; half of a 1024-token one). A prompt's tokens past
its last source block have no id: an engine block that reaches them gets no hash, nor does any
after it.
"""

from __future__ import annotations

from collections.abc import Sequence

_MASK = (1 << 63) - 1


def mix(h: int, v: int) -> int:
    """A 63-bit hash of ``(h, v)`` (splitmix64's finalizer over their sum): deterministic across runs
    and machines, unlike Python's ``hash`` of strings. Never 0 (0 is Megatron's "no parent")."""
    x = (h * 0x9E3779B97F4A7C15 + v + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    x = (x ^ (x >> 31)) & _MASK
    return x if x else 1


# mixed into the hash of a block holding content no other request has (see ``own_block_hashes``)
OWN_CONTENT = 0x5EED_0F_0C0FFEE


def own_block_hashes(hashes: Sequence[int], request_id: int, blocks: int) -> list[int]:
    """``hashes`` continued to ``blocks`` blocks: a block past the described ones (prompt tokens
    without a source id, or tokens a request generated before it was evicted) holds content only
    this request has, so its chained hash mixes in the request's id and the block's index (the
    same request hashes it alike again; no other request does)."""
    out = list(hashes[:blocks])
    h = out[-1] if out else 0
    for j in range(len(out), blocks):
        h = mix(h, mix(OWN_CONTENT, mix(request_id, j)))
        out.append(h)
    return out


def engine_block_hashes(source_ids: Sequence[int], prompt_tokens: int, source_tokens: int,
                        block_size: int) -> list[int]:
    """The chained hashes of the complete ``block_size``-token blocks of a ``prompt_tokens``-token
    prompt described by ``source_ids`` (blocks of ``source_tokens`` tokens), up to the first block
    that reaches past the described tokens (see the module docstring)."""
    described = min(prompt_tokens, len(source_ids) * source_tokens)
    out: list[int] = []
    h = 0
    for j in range(described // block_size):
        start, end = j * block_size, (j + 1) * block_size
        first, last = start // source_tokens, (end - 1) // source_tokens
        h = mix(h, start - first * source_tokens)
        for s in range(first, last + 1):
            h = mix(h, source_ids[s])
        out.append(h)
    return out
