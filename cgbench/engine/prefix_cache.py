"""Prefix caching in the KV pool (``engine.prefix_caching``), as megatron-core 0.19.2 does it.

``Context`` owns one ``PrefixCache`` when prefix caching is on and calls it from its budget checks,
admissions and releases (a small hook each); everything of the cache is here. Megatron's pieces
(``DynamicInferenceContext._compute_prefix_match`` / ``add_request``, ``KVBlockAllocator``):

* **Blocks.** A complete prompt block of a request is *registered* under its block hash when the
  chunk that completes it is admitted (``add_request`` registers at admission, before the step runs).
  A registered block has a reference count (the requests whose block table holds it) and an LRU
  stamp (the round it was allocated or last matched). A request's other blocks (the partial last
  prompt block, decode blocks) are private. Released, a private block is free at once; a
  registered one stays *cached* (reference count 0, its hash still found) until evicted.
* **Match.** A chunk that starts on a block boundary matches the cached blocks that continue its
  prompt: the longest run of its next block hashes found (Megatron searches from the end; hashes
  are chained, so that is the longest prefix). Matched blocks are shared (reference count + 1); the
  chunk skips their tokens, clamped so that at least one token is computed, and, when the chunk has
  two or more tokens, at least two (the skip rounded down to a block boundary: a single-token
  prefill would run the flash-attention decode kernel).
* **Hybrid models.** The skip restores the Mamba state at the skip boundary, so on a hybrid model it
  is limited to blocks whose Mamba state is cached (``MambaSlotAllocator``; only on a request's
  first chunk). Without a Mamba cache (``engine.prefix_caching_mamba_slots`` 0, Megatron's
  ``prefix_caching_mamba_gb`` unset) a hybrid model runs in memory-only mode: blocks are shared,
  no token is skipped. A chunk records Mamba states at up to three block boundaries that fall inside
  the tokens it computes (the end of the KV match, the prompt's last complete block, the last block
  of the chunk's block range); the Mamba cache holds ``mamba_slots`` of them, least recently used
  evicted first, and loses a block's state when the block is evicted.
* **Eviction.** A block is taken from the free pool first; when it is empty, cached blocks are
  evicted least recently used first, a parent never before its children (a leaf peel: only a cached
  block without cached children is evictable, oldest own stamp first, ties by block id).
* **KV conservation** counts a shared block once: ``Σ blocks held by requests − Σ over registered
  blocks of (references − 1) + cached blocks + free blocks = pool`` (``unique_held``).

Counters (Megatron's ``prefix_cache_hits`` / ``blocks_matched`` and prefill computed / skipped
tokens, the engine's ``_prefix_coordination_waits``) feed the result's ``prefix_cache`` metrics.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from cgbench.workload.prefix_hashes import engine_block_hashes

NO_BLOCK = -1  # a private (unregistered) entry of a block table


@dataclass(slots=True)
class PrefixMatch:
    """What a chunk of ``span`` prompt tokens finds in the cache (``PrefixCache.match``): the matched
    block ids, the blocks it must take from the pool, how many matched blocks are cached now (they
    leave the evictable count when pinned), the tokens it skips and the tokens it computes."""

    blocks: list[int]
    from_pool: int
    cached_matched: int
    skip: int
    computed: int


@dataclass(slots=True)
class PrefixCounters:
    admissions: int = 0  # chunks admitted
    hits: int = 0  # admissions (chunks) that matched at least one block
    blocks_matched: int = 0
    prefill_skipped_tokens: int = 0
    prefill_computed_tokens: int = 0
    coordination_waits: int = 0  # requests a pass held back for a hash another admission registers
    evicted_blocks: int = 0  # cached blocks evicted to make room
    registered_blocks: int = 0


class PrefixCache:
    """The prefix cache of one KV pool (see the module docstring)."""

    def __init__(self, block_size: int, source_tokens: int, *, hybrid: bool = False,
                 mamba_slots: int = 0) -> None:
        self.block_size = block_size
        self.source_tokens = source_tokens  # tokens per source block of the requests' ids
        self.hybrid = hybrid
        self.mamba_slots = mamba_slots
        self.hashes: dict[int, list[int]] = {}  # request id -> its prompt's block hashes
        self.tables: dict[int, list[int]] = {}  # request id -> its prompt block table (NO_BLOCK: private)
        self.block_of: dict[int, int] = {}  # hash -> registered block id
        self.hash_of: dict[int, int] = {}  # registered block id -> hash
        self.refs: dict[int, int] = {}
        self.stamp: dict[int, int] = {}
        self.parent: dict[int, int] = {}  # registered block id -> parent block id (NO_BLOCK: a root)
        self.children: dict[int, int] = {}  # registered block id -> registered children
        self.cached = 0  # registered blocks with no reference: evictable
        # (stamp, block) of every block that became an evictable leaf (no reference, no registered
        # child), stale entries included: checked when popped (a lazy heap, not a scan per eviction)
        self.leaves: list[tuple[int, int]] = []
        self.mamba: dict[int, int] = {}  # hash -> stamp of the cached Mamba state at that block's end
        self.clock = 0
        self.next_id = 0
        self.counters = PrefixCounters()

    # -- requests -----------------------------------------------------------------------------------

    def arrive(self, rid: int, source_ids: Sequence[int] | None, prompt_tokens: int) -> None:
        """A request arrives with its source block ids (None: no hashes, it never matches)."""
        if source_ids is not None and len(source_ids) > 0:
            self.hashes[rid] = engine_block_hashes(source_ids, prompt_tokens, self.source_tokens,
                                                   self.block_size)

    def forget(self, rid: int) -> None:
        """The request ended: its hashes go (its blocks went with ``release``)."""
        self.hashes.pop(rid, None)

    def tick(self) -> None:
        """A new round: the LRU clock moves on (Megatron's ``prefix_cache_lru_clock``, once a step)."""
        self.clock += 1

    # -- matching -----------------------------------------------------------------------------------

    def match(self, rid: int, finished: int, span: int) -> PrefixMatch:
        """Megatron's ``_compute_prefix_match`` for a chunk of ``span`` tokens after ``finished``."""
        bs = self.block_size
        have = -(-finished // bs)
        need = -(-(finished + span) // bs)
        hashes = self.hashes.get(rid)
        blocks: list[int] = []
        if hashes:
            end = need if need < len(hashes) else len(hashes)
            block_of = self.block_of
            for i in range(end - 1, have - 1, -1):
                if hashes[i] in block_of:
                    for j in range(have, i + 1):
                        b = block_of.get(hashes[j], NO_BLOCK)
                        if b == NO_BLOCK:  # a hash popped by a duplicate's eviction: the run ends here
                            break
                        blocks.append(b)
                    break
        n = len(blocks)
        aligned = finished % bs == 0
        skip = min(n * bs, span - 1) if n and aligned else 0
        if self.hybrid and finished == 0:
            skip = self._mamba_skip(hashes, n, span, aligned) if self.mamba_slots > 0 else 0
        if span - skip < 2 <= span:
            skip = (span - 2) // bs * bs
        cached = sum(1 for b in blocks if self.refs[b] == 0)
        return PrefixMatch(blocks, max(0, need - have - n), cached, skip, span - skip)

    def _mamba_skip(self, hashes: list[int] | None, n: int, span: int, aligned: bool) -> int:
        """The skip on a hybrid model's first chunk: up to the farthest matched block whose Mamba state
        is cached; when that covers the whole chunk, back off to the one before it that has one."""
        if not hashes or n == 0 or not aligned:
            return 0
        m = 0
        for i in range(n - 1, -1, -1):
            if hashes[i] in self.mamba:
                m = i + 1
                break
        if m == 0:
            return 0
        if m * self.block_size < span:
            return m * self.block_size
        for j in range(m - 2, -1, -1):
            if hashes[j] in self.mamba:
                return (j + 1) * self.block_size
        return 0

    # -- admission ----------------------------------------------------------------------------------

    def pin(self, m: PrefixMatch) -> None:
        """The matched blocks gain a reference before any allocation (so eviction cannot take them)."""
        for b in m.blocks:
            if self.refs[b] == 0:
                self.cached -= 1
            self.refs[b] += 1
            self.stamp[b] = self.clock

    def admit(self, rid: int, finished: int, span: int, m: PrefixMatch, new_blocks: int) -> None:
        """After ``pin`` and the allocation: append ``m``'s blocks and ``new_blocks`` fresh private ones
        to the request's table, register the blocks the chunk completes, record its Mamba states;
        count the hit."""
        table = self.tables.setdefault(rid, [])
        c = self.counters
        c.admissions += 1
        if m.blocks:
            c.hits += 1
            c.blocks_matched += len(m.blocks)
        c.prefill_skipped_tokens += m.skip
        c.prefill_computed_tokens += m.computed
        previously_complete = finished // self.block_size
        have = len(table)
        table.extend(m.blocks)
        table.extend([NO_BLOCK] * new_blocks)
        hashes = self.hashes.get(rid)
        if hashes:
            complete = (finished + span) // self.block_size
            top = complete if complete < len(hashes) else len(hashes)
            # the partial block an earlier chunk left, now complete; then the chunk's own new blocks
            for k in (*range(previously_complete, min(have, top)), *range(have + len(m.blocks), top)):
                self._register(table, k, hashes)
            if self.hybrid and self.mamba_slots > 0:
                self._record_mamba(hashes, finished, span, m, have + len(m.blocks) + new_blocks)

    def pending(self, rid: int) -> list[int]:
        """The request's hashes no registered block has yet (Megatron's pending-hash bookkeeping)."""
        block_of = self.block_of
        return [h for h in self.hashes.get(rid, ()) if h not in block_of]

    def conflicts(self, rid: int, pending: set[int]) -> bool:
        """The request shares a block hash with ``pending`` (the hashes this pass's admissions
        register): the scheduler holds it back for the pass, a coordination wait (counted here)."""
        if any(h in pending for h in self.hashes.get(rid, ())):
            self.counters.coordination_waits += 1
            return True
        return False

    def span(self, finished: int, skip: int, computed: int, remaining: int) -> int:
        """The span of a chunk after ``finished`` prefilled tokens that skips ``skip`` cached tokens and
        computes ``computed`` (of ``remaining`` still to prefill): both together; on a hybrid model
        with a Mamba cache a partial chunk ends on a block boundary when that still computes a token
        (so later chunks can record Mamba states at block boundaries)."""
        span = skip + computed
        if self.hybrid and self.mamba_slots > 0 and span < remaining:
            bs = self.block_size
            aligned = (finished + span) // bs * bs - finished
            if aligned > skip:
                span = aligned
        return span

    def _register(self, table: list[int], k: int, hashes: list[int]) -> None:
        if table[k] != NO_BLOCK:  # a matched block of this chunk, registered already
            return
        b = self.next_id
        self.next_id += 1
        table[k] = b
        h = hashes[k]
        self.block_of[h] = b  # a second block under a hash takes the map's entry (Megatron's update)
        self.hash_of[b] = h
        self.refs[b] = 1
        self.stamp[b] = self.clock
        # the parent is the block before it in this request's own table: the block Megatron's hash
        # lookup finds, except where a second block took the hash's entry, when it keeps "a referenced
        # block's ancestors are referenced" (so every cached block can be evicted leaf first)
        parent = table[k - 1] if k > 0 else NO_BLOCK
        self.parent[b] = parent
        self.children[b] = 0
        if parent != NO_BLOCK:
            self.children[parent] += 1
        self.counters.registered_blocks += 1

    def _record_mamba(self, hashes: list[int], finished: int, span: int, m: PrefixMatch,
                      required: int) -> None:
        """Mamba states at the block boundaries inside the computed tokens (``compute_and_store_offsets``)."""
        bs = self.block_size
        start = finished + m.skip
        computed = span - m.skip
        prompt_end = len(hashes) * bs  # the last complete block boundary with a hash
        for boundary in (len(m.blocks) * bs, prompt_end, (required - 1) * bs):
            offset = boundary - start
            # states are taken at SSM-chunk boundaries measured from the chunk's start (SSM chunk = block)
            if 0 < offset < computed and start % bs == 0 and boundary // bs <= len(hashes):
                self._store_mamba(hashes[boundary // bs - 1])

    def _store_mamba(self, h: int) -> None:
        if h not in self.block_of:
            return
        mamba = self.mamba
        if h not in mamba and len(mamba) >= self.mamba_slots:
            del mamba[min(mamba, key=mamba.__getitem__)]  # the least recently used state
        mamba[h] = self.clock

    # -- blocks -------------------------------------------------------------------------------------

    def registered_in(self, rid: int) -> int:
        """Registered (possibly shared) blocks in the request's table."""
        return sum(1 for b in self.tables.get(rid, ()) if b != NO_BLOCK)

    def release(self, rid: int) -> int:
        """The request gives back its table: registered blocks lose a reference (at 0 they stay cached).
        Returns how many registered blocks its table held (the rest of its blocks are free again)."""
        table = self.tables.pop(rid, None)
        if table is None:
            return 0
        registered = 0
        for b in table:
            if b == NO_BLOCK:
                continue
            registered += 1
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self.cached += 1
                if self.children[b] == 0:
                    heapq.heappush(self.leaves, (self.stamp[b], b))
        return registered

    def evict(self, n: int) -> int:
        """Evict ``n`` cached blocks (leaf peel, least recently used first); returns how many."""
        if n <= 0:
            return 0
        leaves, refs, children, stamp = self.leaves, self.refs, self.children, self.stamp
        done = 0
        while leaves and done < n:
            t, b = heapq.heappop(leaves)
            if refs.get(b, 1) != 0 or children[b] != 0 or stamp[b] != t:
                continue  # stale: evicted, referenced again, or a parent again since it was pushed
            parent = self.parent[b]
            self._deregister(b)
            done += 1
            if parent != NO_BLOCK and parent in self.refs:
                self.children[parent] -= 1
                if self.children[parent] == 0 and self.refs[parent] == 0:
                    heapq.heappush(leaves, (self.stamp[parent], parent))
        self.counters.evicted_blocks += done
        return done

    def _deregister(self, b: int) -> None:
        h = self.hash_of.pop(b)
        self.block_of.pop(h, None)  # Megatron pops the hash, whichever block the map names
        self.mamba.pop(h, None)
        del self.refs[b], self.stamp[b], self.parent[b], self.children[b]
        self.cached -= 1

    def shared_extra(self) -> int:
        """Σ over referenced registered blocks of (references − 1): how often shared blocks are
        counted more than once in the requests' block counts."""
        return sum(r - 1 for r in self.refs.values() if r > 0)

    def check(self) -> str | None:
        """Why the cache's books do not balance (None when they do): every reference is a table entry,
        the cached count is the registered blocks without a reference, the map names registered blocks."""
        held: dict[int, int] = {}
        for table in self.tables.values():
            for b in table:
                if b != NO_BLOCK:
                    held[b] = held.get(b, 0) + 1
        for b, r in self.refs.items():
            if held.get(b, 0) != r:
                return f"block {b} has {r} references but {held.get(b, 0)} table entries"
        if self.cached != sum(1 for r in self.refs.values() if r == 0):
            return f"cached count {self.cached} drifted"
        if any(b not in self.refs for b in self.block_of.values()):
            return "the hash map names an evicted block"
        return None

    # -- replay state ---------------------------------------------------------------------------------

    def to_state(self) -> dict:
        """Everything a saved round needs to replay with the cache."""
        return {"clock": self.clock, "next_id": self.next_id,
                "blocks": [[b, self.hash_of[b], self.refs[b], self.stamp[b], self.parent[b]]
                           for b in sorted(self.refs)],
                "tables": {str(k): v for k, v in sorted(self.tables.items())},
                "hashes": {str(k): v for k, v in sorted(self.hashes.items())},
                "mamba": [[h, s] for h, s in self.mamba.items()]}

    def load_state(self, doc: dict) -> None:
        """The cache of ``to_state``'s document; a malformed one raises ``ValueError`` saying where."""
        _check_state(doc)
        self.clock, self.next_id = int(doc["clock"]), int(doc["next_id"])
        self.block_of, self.hash_of, self.refs, self.stamp, self.parent, self.children = {}, {}, {}, {}, {}, {}
        for b, h, r, s, p in doc["blocks"]:
            self.hash_of[b], self.refs[b], self.stamp[b], self.parent[b] = h, r, s, p
            self.block_of[h] = b
            self.children[b] = 0
        for p in self.parent.values():
            if p != NO_BLOCK and p in self.children:
                self.children[p] += 1
        self.cached = sum(1 for r in self.refs.values() if r == 0)
        self.leaves = [(self.stamp[b], b) for b, r in self.refs.items() if r == 0 and self.children[b] == 0]
        heapq.heapify(self.leaves)
        self.tables = {int(k): list(v) for k, v in doc["tables"].items()}
        self.hashes = {int(k): list(v) for k, v in doc["hashes"].items()}
        self.mamba = {h: s for h, s in doc["mamba"]}


STATE_FIELDS = ("clock", "next_id", "blocks", "tables", "hashes", "mamba")


def _ints(value: object, where: str, n: int | None = None) -> list[int]:
    if not isinstance(value, list) or any(type(v) is not int for v in value) or (n is not None and len(value) != n):
        raise ValueError(f"{where}: must be a list of {n or 'some'} integers")
    return value


def _check_state(doc: object) -> None:
    if not isinstance(doc, dict) or set(doc) != set(STATE_FIELDS):
        raise ValueError(f"must be an object with exactly the keys {', '.join(STATE_FIELDS)}")
    for k in ("clock", "next_id"):
        if type(doc[k]) is not int or doc[k] < 0:
            raise ValueError(f"{k}: must be an integer >= 0")
    if not isinstance(doc["blocks"], list):
        raise ValueError("blocks: must be a list of [block, hash, references, stamp, parent]")
    ids = set()
    for i, row in enumerate(doc["blocks"]):
        b, _, refs, _, _ = _ints(row, f"blocks[{i}]", 5)
        if b < 0 or refs < 0 or b >= doc["next_id"]:
            raise ValueError(f"blocks[{i}]: a block id in 0..next_id-1 and references >= 0")
        ids.add(b)
    for k in ("tables", "hashes"):
        if not isinstance(doc[k], dict) or not all(isinstance(r, str) and r.isdigit() for r in doc[k]):
            raise ValueError(f"{k}: must map request ids to lists of integers")
        for r, v in doc[k].items():
            _ints(v, f"{k}.{r}")
    for r, table in doc["tables"].items():
        if any(b != NO_BLOCK and b not in ids for b in table):
            raise ValueError(f"tables.{r}: names a block not in blocks")
    for i, row in enumerate(doc["mamba"] if isinstance(doc["mamba"], list) else [None]):
        _ints(row, f"mamba[{i}]", 2)
