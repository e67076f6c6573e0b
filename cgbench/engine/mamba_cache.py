"""The Mamba state cache of prefix caching on hybrid models (``engine.prefix_caching_mamba_slots``).

Megatron's ``MambaSlotAllocator``, at the level its decisions are made (no state is stored):

* **Slots belong to KV blocks.** ``slots`` durable slots; a slot holds the Mamba state at the end of
  one KV block (``block_to_slot``). A state is *found* by its block's hash: ``hash_to_block``, the
  hashes whose state is cached (what a hybrid first chunk's skip may restore).
* **Recording** (``compute_and_store_offsets`` at admission, ``commit_intermediate_states`` after the
  forward): a chunk records states at up to three block boundaries inside the tokens it computes
  (the end of its KV match, the prompt's last complete block, the block before its last one), each at
  a multiple of the SSM chunk (``ssm_chunk``, Megatron's ``mamba_chunk_size`` in 0.19.2,
  ``ssm_chunk_alignment`` on main) counted from the chunk's first computed token; and, on a prompt's
  last chunk when the prompt ends on a block boundary, the state at its end. After the step the
  step's chunks (admission order: each chunk's boundaries, then the end states) take slots, in one
  batch: a block that holds one keeps it, new blocks take free slots, then slots of blocks no request
  holds (reference 0), least recently used block first (LRU; ties to the lowest block id) or lowest
  block id first (REF_ZERO). Short of slots, 0.19.2 raises (``RuntimeError: No evictable Mamba cache
  slots available``: the run ends ``engine_assertion``); main keeps the new blocks that fit, in
  order, and drops the rest. Then every recorded block's hash names it (the last one wins).
* **Losing states.** An evicted slot takes its block's hash out of the map (whichever block the map
  names). When KV blocks are deregistered (LRU eviction, or REF_ZERO release) and any of their
  hashes has a state, those hashes go and every block of that batch loses its slot; a batch none of
  whose hashes has a state keeps its slots (Megatron's behaviour: such a slot stays on the block id).

``PrefixCache`` owns one and gives it what it reads of the KV pool (references, stamps, hashes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cgbench.engine.invariants import MegatronAssertion


class KVBlocks(Protocol):
    """What the Mamba cache reads of the KV pool, per block id."""

    refs: list[int]
    stamp: list[int]
    hash_of: list[int]


class MambaCache:
    """Megatron's Mamba slot allocator's bookkeeping (see the module docstring)."""

    def __init__(self, slots: int, ssm_chunk: int, *, lru: bool, overflow_raises: bool) -> None:
        self.slots = slots
        self.ssm_chunk = ssm_chunk
        self.lru = lru
        self.overflow_raises = overflow_raises  # 0.19.2 raises when short of slots; main drops states
        self.slot_blocks: set[int] = set()  # blocks holding a slot
        self.hash_to_block: dict[int, int] = {}  # hashes whose state is cached -> the block holding it
        # the step's recordings, in admission order: (boundary blocks, end-of-prompt block or -1)
        self._pending: list[tuple[list[int], int]] = []

    def states(self) -> int:
        """How many hashes have a cached state."""
        return len(self.hash_to_block)

    def has(self, h: int) -> bool:
        return h in self.hash_to_block

    # -- recording -----------------------------------------------------------------------------------

    def record(self, table: Sequence[int], start: int, computed: int, kv_match: int, prompt_len: int,
               required: int, block_size: int, last_chunk: bool) -> None:
        """A chunk computing ``computed`` tokens from prompt position ``start`` (``kv_match`` blocks
        matched, ``required`` blocks after it, a ``prompt_len``-token prompt): the blocks whose end
        states it records (``compute_and_store_offsets``)."""
        offsets = set()
        last_aligned = prompt_len // block_size * block_size
        for boundary in (kv_match * block_size, last_aligned, (required - 1) * block_size):
            offset = boundary - start
            if 0 < offset < computed and offset % self.ssm_chunk == 0:
                offsets.add(offset)
        boundary_blocks = [table[(start + o) // block_size - 1] for o in sorted(offsets)]
        end_block = table[prompt_len // block_size - 1] if last_chunk and last_aligned == prompt_len > 0 else -1
        if boundary_blocks or end_block >= 0:
            self._pending.append((boundary_blocks, end_block))

    def commit(self, kv: KVBlocks) -> None:
        """After the step: the recorded blocks take slots and their hashes name them
        (``commit_intermediate_states``)."""
        pending, self._pending = self._pending, []
        blocks = [b for bounds, _ in pending for b in bounds] + [e for _, e in pending if e >= 0]
        if not blocks:
            return
        hashes = [kv.hash_of[b] for b in blocks]
        new: list[int] = []
        for b in blocks:
            if b not in self.slot_blocks and b not in new:
                new.append(b)
        free = self.slots - len(self.slot_blocks)
        if len(new) > free:
            candidates = self._evictable(kv)
            if len(new) > free + len(candidates):
                if self.overflow_raises:
                    raise MegatronAssertion("MambaSlotAllocator raises RuntimeError: No evictable Mamba cache "
                                            f"slots available ({len(new)} new states, {free} free slots, "
                                            f"{len(candidates)} evictable)")
                keep = set(new[:free + len(candidates)])
                kept = [i for i, b in enumerate(blocks) if b in self.slot_blocks or b in keep]
                blocks, hashes = [blocks[i] for i in kept], [hashes[i] for i in kept]
                new = [b for b in new if b in keep]
            for b in candidates[:len(new) - free]:
                self.slot_blocks.discard(b)
                h = kv.hash_of[b]
                if h > 0:
                    self.hash_to_block.pop(h, None)
        self.slot_blocks.update(new)
        for b, h in zip(blocks, hashes, strict=True):
            if h > 0:
                self.hash_to_block[h] = b

    def _evictable(self, kv: KVBlocks) -> list[int]:
        """Blocks whose slot may be taken (no request holds the block), in eviction order."""
        candidates = sorted(b for b in self.slot_blocks if kv.refs[b] == 0)
        if self.lru:
            candidates.sort(key=lambda b: kv.stamp[b])  # stable: ties stay by block id
        return candidates

    # -- losing states -------------------------------------------------------------------------------

    def deregistered(self, blocks: Sequence[int], hashes: set[int]) -> None:
        """KV blocks ``blocks`` (carrying ``hashes``) were deregistered in one batch."""
        if not self.hash_to_block:
            return
        gone = [h for h in hashes if h in self.hash_to_block]
        if not gone:
            return
        for h in gone:
            del self.hash_to_block[h]
        self.slot_blocks.difference_update(blocks)

    # -- replay state -------------------------------------------------------------------------------

    def to_state(self) -> dict:
        return {"slot_blocks": sorted(self.slot_blocks),
                "hash_to_block": [[h, b] for h, b in self.hash_to_block.items()]}

    def load_state(self, doc: dict) -> None:
        self.slot_blocks = set(doc["slot_blocks"])
        self.hash_to_block = {h: b for h, b in doc["hash_to_block"]}
        self._pending = []
