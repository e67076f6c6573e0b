"""Megatron's KV-pool rules, one function per rule set (``engine.megatron_rules``).

cgbench follows megatron-core 0.19.2 by default. Megatron-LM main (``d98e8a64``) changed how a
request's KV footprint is checked at arrival and how the pool is shared between running and paused
requests:

* **#5950** (``1a8e3f8b``, ``engines/dynamic_engine.py`` ``_add_request``): a request fails at arrival
  when the blocks of the tokens it will ever *store* exceed the usable pool. It stores its prompt,
  every generated token but the last, and the last decode step's speculative drafts:
  ``prompt + (G - 1) + num_speculative_tokens`` when ``G > 1``, the prompt alone otherwise. (0.19.2
  checks ``prompt + G``.) After #5995 the usable pool is ``pool_size - 1`` (the dummy block excluded),
  the same number of blocks 0.19.2 compares with (``total_count - 1``).
* **#5995** (``d0151a92``, ``contexts/dynamic_context.py``): there is no active/paused split any more.
  Running requests draw on the whole pool; ``paused_limit`` (cgbench's ``engine.paused_blocks``) is
  only a retention budget for paused requests.
  - resume (``resume_paused_requests``) counts only the *new* blocks the paused rows need (one for a
    row whose last block is full), from the right-most row, against the free pool, after capping the
    candidates by the free active row slots;
  - eviction (``evict_overflow_paused_requests``) keeps the longest left-most paused run whose blocks
    fit the budget and evicts the smallest right-most suffix of the rest whose released blocks let
    every remaining overflow row resume;
  - the end-of-update assertion accepts an engine with no request left at all, so evicting every row
    re-prefills them instead of crashing.

Both engines (``core.Engine``, the oracle, and ``fast.FastEngine``) call these through
``Context.rules``; nothing else in the engine knows which rule set runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cgbench.engine.request import Request
from cgbench.engine.rows import evict_count as evict_count_0192_blocks

DEFAULT_RULES = "0.19.2"


class SharedBlocks(Protocol):
    """What the rules read of the pool's prefix cache (``cgbench.engine.prefix_cache.PrefixCache``
    meets it; the cache reads the rule sets, so they name it here rather than import it)."""

    def unique_prefix_within(self, rids: Sequence[int], budget: int) -> int: ...

    def releasable_by_suffix(self, rids: Sequence[int]) -> list[int]: ...


class KVPool(Protocol):
    """What the rules read of the KV pool (``cgbench.engine.context.Context`` meets it): the rule sets
    are the context's, so they name what they need here rather than import the context."""

    max_requests: int
    active_blocks: int
    paused_block_budget: int
    free_blocks: int

    @property
    def prefix(self) -> SharedBlocks | None: ...

    def allocatable(self) -> int: ...

    def held_blocks(self, reqs: Sequence[Request]) -> int: ...

    def decode_blocks_needed(self, req: Request) -> int: ...

    def resumable(self, paused: Sequence[Request], held_active: int, room: int) -> int: ...


@dataclass(frozen=True)
class KVRules:
    """One Megatron version's KV rules. ``label`` names it in run headers and docs."""

    name: str
    label: str
    # blocks a request of (prompt, generated length, speculative tokens, block size) must fit at arrival
    arrival_blocks: Callable[[int, int, int, int], int]
    # how many paused rows resume, from the right (ctx, paused rows, blocks the active rows hold, free row slots)
    resumable: Callable[[KVPool, Sequence[Request], int, int], int]
    # whether the m rows that just paused at a block boundary (nothing else paused) all resume at once:
    # (ctx, blocks the active rows hold once they got theirs, blocks they need, m, active rows)
    resumes_at_once: Callable[[KVPool, int, int, int, int], bool]
    # how many right-most paused rows are evicted (ctx, paused rows, free row slots)
    evict_count: Callable[[KVPool, Sequence[Request], int], int]
    # Megatron asserts when update_requests leaves no active row, no chunked request and no paused row
    asserts_when_emptied: bool
    # prefix caching: a chunk ending mid-block matched a cached block that the next chunk registers
    # again (0.19.2: its parent then counts it twice; main's registration skips it)
    reregisters_matched: bool
    # prefix caching: an evicted request comes back with its block hashes (main) or without (0.19.2)
    evicted_keeps_hashes: bool
    # hybrid prefix caching: more new Mamba states in a step than slots raises (0.19.2) or drops the
    # states that do not fit (main)
    mamba_overflow_raises: bool


# -- megatron-core 0.19.2 ---------------------------------------------------------------------------


def _arrival_blocks_0192(prompt: int, generate: int, spec: int, block_size: int) -> int:
    return -(-(prompt + generate) // block_size)


def _resumable_0192(ctx: KVPool, paused: Sequence[Request], held_active: int, room: int) -> int:
    return ctx.resumable(paused, held_active, room)


def _resumes_at_once_0192(ctx: KVPool, held_active: int, granted: int, m: int, rows: int) -> bool:
    return held_active <= ctx.active_blocks and m <= ctx.free_blocks and rows <= ctx.max_requests


def _evict_count_0192(ctx: KVPool, paused: Sequence[Request], room: int) -> int:
    """Nothing goes while the paused rows hold no more than the budget, a shared block counted once
    under prefix caching (``get_paused_used``); the rest counts each row's own blocks."""
    return evict_count_0192_blocks([r.blocks for r in paused], ctx.paused_block_budget,
                                   ctx.held_blocks(paused))


# -- Megatron-LM main d98e8a64 (#5950, #5995) -------------------------------------------------------


def _arrival_blocks_main(prompt: int, generate: int, spec: int, block_size: int) -> int:
    stored = prompt + (generate - 1 + spec if generate > 1 else 0)
    return -(-stored // block_size)


def _needs_block(ctx: KVPool, r: Request) -> int:
    """1 when the row's last block is full (its next step needs a new one): Megatron's
    ``needs_new_block``."""
    return 1 if ctx.decode_blocks_needed(r) > 0 else 0


def _resumable_main(ctx: KVPool, paused: Sequence[Request], held_active: int, room: int) -> int:
    """The first ``min(paused, room)`` rows from the right are candidates; of those, the longest run
    whose new blocks (one per row with a full last block) fit the free pool resumes."""
    candidates = min(len(paused), room) if room > 0 else 0
    rows = paused[len(paused) - candidates:]
    wanted = sum(_needs_block(ctx, r) for r in rows)
    # the free pool, or when that is short what an allocation can get (cached blocks it may evict)
    avail = ctx.free_blocks if wanted <= ctx.free_blocks else ctx.allocatable()
    n = new = 0
    for r in reversed(rows):
        new += _needs_block(ctx, r)
        if new > avail:
            break
        n += 1
    return n


def _resumes_at_once_main(ctx: KVPool, held_active: int, granted: int, m: int, rows: int) -> bool:
    return granted <= ctx.free_blocks and rows <= ctx.max_requests


def _evict_count_main(ctx: KVPool, paused: Sequence[Request], room: int) -> int:
    """Keep the longest left run within the paused budget; of the overflow rows to its right, evict
    the fewest right-most ``e`` whose released blocks, with the free pool, give every surviving
    overflow row the new block it needs (and leave no more survivors than free row slots)."""
    budget = ctx.paused_block_budget
    pc = ctx.prefix
    retained = held = 0
    if budget > 0 and pc is not None:  # shared blocks once (_get_paused_request_count_within_block_budget)
        retained = pc.unique_prefix_within([r.id for r in paused], budget)
    elif budget > 0:
        for r in paused:
            held += r.blocks
            if held > budget:
                break
            retained += 1
    overflow = len(paused) - retained
    if overflow == 0:
        return 0
    rows = paused[retained:]
    new_by_survivors = [0]  # new blocks the left-most s overflow rows need, for s = 0 .. overflow
    for r in rows:
        new_by_survivors.append(new_by_survivors[-1] + _needs_block(ctx, r))
    if pc is not None:  # a block is released once every holder is evicted (_get_releasable_block_counts)
        releasable = pc.releasable_by_suffix([r.id for r in rows])
    else:
        releasable = [0]
        for r in reversed(rows):
            releasable.append(releasable[-1] + r.blocks)
    avail = ctx.allocatable()
    for e in range(overflow + 1):
        survivors = overflow - e
        if survivors <= room and new_by_survivors[survivors] <= avail + releasable[e]:
            return e
    return overflow  # unreachable: e = overflow leaves no survivor


MEGATRON_RULES: dict[str, KVRules] = {
    "0.19.2": KVRules("0.19.2", "megatron-core 0.19.2", _arrival_blocks_0192, _resumable_0192,
                      _resumes_at_once_0192, _evict_count_0192, asserts_when_emptied=True,
                      reregisters_matched=True, evicted_keeps_hashes=False, mamba_overflow_raises=True),
    "main": KVRules("main", "Megatron main d98e8a64", _arrival_blocks_main, _resumable_main,
                    _resumes_at_once_main, _evict_count_main, asserts_when_emptied=False,
                    reregisters_matched=False, evicted_keeps_hashes=True, mamba_overflow_raises=False),
}


def kv_rules(name: str) -> KVRules:
    """The rule set ``name`` (``engine.megatron_rules``, validated by the config)."""
    return MEGATRON_RULES[name]


def default_rules() -> KVRules:
    """megatron-core 0.19.2's rules, the default."""
    return MEGATRON_RULES[DEFAULT_RULES]
