"""Prefix caching in the KV pool (``engine.prefix_caching``), block for block as Megatron does it.

``Context`` owns one ``PrefixCache`` when prefix caching is on and calls it for every KV block a
request gains or loses. The cache models Megatron's ``KVBlockAllocator`` with prefix caching on, and
``DynamicInferenceContext._compute_prefix_match`` / ``add_request`` (megatron-core 0.19.2 and main
``d98e8a64``; docs/prefix-caching.md lists each rule with the function that decides it):

* **Block ids.** The pool's blocks have Megatron's ids: a free list used as a stack (the block bag),
  allocations taking the top ``n`` blocks in bag order, a release call putting its freed blocks back
  in ascending id order, an eviction putting its blocks back in eviction order. Ids matter: equal
  LRU stamps are broken by the lower id, so which cached block goes first depends on them. A
  release *call* of Megatron's is one group here: the blocks a step's finished requests release
  (one call), its evicted requests (another), its speculative rewinds (another); a group ends when
  another kind begins, at a round's start and before an allocation (``flush``).
* **Registration.** When a chunk is admitted, the complete prompt blocks it finishes are registered
  under their hashes (the partial block an earlier chunk left, now complete, and the chunk's own new
  blocks); the map names the last block registered under a hash; each registered block records its
  parent (the block the map names for the previous hash then) and adds one to that parent's child
  count. 0.19.2 registers again a block a chunk that ended mid-block had matched (the next chunk's
  first range covers it): its parent's child count then counts it twice, for good (Megatron's defect;
  the parent never becomes a leaf). Main skips a block that already carries the hash.
* **Match.** A chunk matches the longest run of its next block hashes (Megatron looks from the far
  end: the first hash found gives the run, whose every hash must then be in the map, or Megatron's
  lookup raises ``KeyError``: the run ends ``engine_assertion``). The skip: ``min(n * block, span -
  1)`` when the chunk starts on a block boundary; on a hybrid model's first chunk, up to the farthest
  matched block with a cached Mamba state (back to the one before when that covers the chunk), none
  without a Mamba cache; then the clamp to two computed tokens, rounded down to a block.
* **References and stamps.** Matched blocks gain a reference (and the current stamp) before the
  chunk's new blocks are allocated; a block's stamp is the round it was allocated or last matched.
* **Release.** A block whose last reference goes is free at once unless it is registered: under LRU
  (``eviction="lru"``) a registered block stays *cached* (found by its hash, evictable); under
  REF_ZERO it is deregistered and freed.
* **Eviction (LRU).** When the free pool is short, cached blocks are evicted: a leaf peel, only a
  cached block without registered children is evictable, the oldest own stamp first, ties to the
  lower id; a parent becomes evictable when its last child goes. Short of leaves while enough blocks
  are cached, Megatron asserts (``evict_lru_blocks``: "parent graph is not a forest"): the run ends
  ``engine_assertion`` (reached through the double-counted children of 0.19.2, or a child whose
  recorded parent is another request's block).
* **Mamba states** (hybrid models with a Mamba cache): ``cgbench.engine.mamba_cache``.

Counters (Megatron's ``prefix_cache_hits`` / ``blocks_matched``, prefill computed / skipped tokens,
the engine's ``_prefix_coordination_waits``) feed the result's ``prefix_cache`` metrics.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cgbench.config.schema import EngineConfig
from cgbench.engine.invariants import MegatronAssertion
from cgbench.engine.kv_rules import kv_rules
from cgbench.engine.mamba_cache import MambaCache
from cgbench.workload.prefix_hashes import engine_block_hashes, own_block_hashes

NO_BLOCK = -1  # no hash / no parent
EVICTIONS = ("lru", "ref_zero")


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
    """The prefix cache of one KV pool of ``pool_blocks`` blocks (see the module docstring).
    ``reregisters_matched``: 0.19.2's registration of a matched block a second time (main: False).
    ``mamba_overflow_raises``: 0.19.2's error when a step's Mamba states outnumber the slots (main
    drops them)."""

    def __init__(self, block_size: int, source_tokens: int, pool_blocks: int, *, eviction: str = "lru",
                 hybrid: bool = False, mamba_slots: int = 0, ssm_chunk: int = 0,
                 reregisters_matched: bool = True, mamba_overflow_raises: bool = True) -> None:
        if eviction not in EVICTIONS:
            raise ValueError(f"eviction: one of {', '.join(EVICTIONS)}, got {eviction!r}")
        self.block_size = block_size
        self.source_tokens = source_tokens  # tokens per source block of the requests' ids
        self.pool_blocks = pool_blocks
        self.lru = eviction == "lru"
        self.hybrid = hybrid
        self.reregisters_matched = reregisters_matched
        self.mamba_cache: MambaCache | None = None
        if hybrid and mamba_slots > 0:
            self.mamba_cache = MambaCache(mamba_slots, ssm_chunk or block_size, lru=self.lru,
                                          overflow_raises=mamba_overflow_raises)
        self.hashes: dict[int, list[int]] = {}  # request id -> its prompt's block hashes
        self.tables: dict[int, list[int]] = {}  # request id -> its block table (every block it holds)
        self.free: list[int] = list(range(pool_blocks))  # the block bag's free part: a stack, top last
        self.free_count = pool_blocks  # free blocks, the current release group's included
        self._released: list[int] = []  # the current release group's freed blocks (not in ``free`` yet)
        self._group = ""
        self.hash_of = [NO_BLOCK] * pool_blocks
        self.refs = [0] * pool_blocks
        self.stamp = [0] * pool_blocks
        self.parent = [NO_BLOCK] * pool_blocks
        self.children = [0] * pool_blocks
        self.block_of: dict[int, int] = {}  # hash -> the block the map names
        self.cached = 0  # registered blocks with no reference (LRU): evictable
        # (stamp, block) of blocks that became evictable leaves, stale entries included (checked when
        # popped): a lazy heap, not a scan of the pool per eviction
        self.leaves: list[tuple[int, int]] = []
        self.clock = 0
        self.counters = PrefixCounters()

    # -- requests -----------------------------------------------------------------------------------

    def arrive(self, rid: int, source_ids: Sequence[int] | None, prompt_tokens: int) -> None:
        """A request arrives with its source block ids (None: none). Every complete block of its prompt
        has a hash, as Megatron hashes every complete block: those its ids describe alike for every
        request with the same ids, the rest its own (``own_block_hashes``)."""
        described = (engine_block_hashes(source_ids, prompt_tokens, self.source_tokens, self.block_size)
                     if source_ids is not None and len(source_ids) > 0 else [])
        self.hashes[rid] = own_block_hashes(described, rid, prompt_tokens // self.block_size)

    def requeued(self, rid: int, prompt_tokens: int, keeps_hashes: bool) -> None:
        """An evicted request comes back with ``prompt_tokens`` (its prompt and what it generated).
        0.19.2's checkpoint rebuilds it without prefix-caching fields: no hashes (it matches and
        registers nothing). Main's recomputes them: its prompt's again, then its own for the blocks
        holding generated tokens."""
        if keeps_hashes:
            self.hashes[rid] = own_block_hashes(self.hashes.get(rid, []), rid, prompt_tokens // self.block_size)
        else:
            self.hashes.pop(rid, None)

    def forget(self, rid: int) -> None:
        """The request ended: its hashes go."""
        self.hashes.pop(rid, None)

    def request_hashes(self, rid: int) -> Sequence[int]:
        return self.hashes.get(rid, ())

    def begin_round(self) -> None:
        """A new round: the release group ends and the LRU clock moves on (Megatron's
        ``prefix_cache_lru_clock``, once a step)."""
        self.flush()
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
                        if b == NO_BLOCK:
                            raise MegatronAssertion(
                                f"_find_kv_match_count raises KeyError: request {rid}'s block {i} hash is cached "
                                f"but its block {j} hash is not (a block registered under a hash another block "
                                "also carried took the hash with it when it was evicted)")
                        blocks.append(b)
                    break
        n = len(blocks)
        aligned = finished % bs == 0
        skip = min(n * bs, span - 1) if n and aligned else 0
        if self.hybrid and finished == 0:
            skip = self._mamba_skip(hashes, n, span, aligned) if self.mamba_cache is not None else 0
        if span - skip < 2 <= span:
            skip = (span - 2) // bs * bs
        refs = self.refs
        cached = sum(1 for b in blocks if refs[b] == 0)
        return PrefixMatch(blocks, max(0, need - have - n), cached, skip, span - skip)

    def _mamba_skip(self, hashes: list[int] | None, n: int, span: int, aligned: bool) -> int:
        """The skip on a hybrid model's first chunk: up to the farthest matched block whose Mamba state
        is cached; when that covers the whole chunk, back off to the one before it that has one."""
        mc = self.mamba_cache
        assert mc is not None
        if not hashes or n == 0 or not aligned:
            return 0
        m = 0
        for i in range(n - 1, -1, -1):
            if mc.has(hashes[i]):
                m = i + 1
                break
        if m == 0:
            return 0
        if m * self.block_size < span:
            return m * self.block_size
        for j in range(m - 2, -1, -1):
            if mc.has(hashes[j]):
                return (j + 1) * self.block_size
        return 0

    def pending(self, rid: int) -> list[int]:
        """The request's hashes no registered block has yet (Megatron's pending-hash bookkeeping)."""
        block_of = self.block_of
        return [h for h in self.hashes.get(rid, ()) if h not in block_of]

    def conflicts(self, rid: int, pending: set[int]) -> bool:
        """The request shares a block hash with ``pending`` (the hashes this pass's admissions
        register): the scheduler holds it back for the pass, a coordination wait (counted here)."""
        if pending and any(h in pending for h in self.hashes.get(rid, ())):
            self.counters.coordination_waits += 1
            return True
        return False

    def span(self, finished: int, skip: int, computed: int, remaining: int) -> int:
        """The span of a chunk after ``finished`` prefilled tokens that skips ``skip`` cached tokens and
        computes ``computed`` (of ``remaining`` still to prefill): both together; with a Mamba cache a
        partial chunk ends on a block boundary when that still computes a token (so later chunks can
        record Mamba states at block boundaries)."""
        span = skip + computed
        if self.mamba_cache is not None and span < remaining:
            bs = self.block_size
            aligned = (finished + span) // bs * bs - finished
            if aligned > skip:
                span = aligned
        return span

    # -- admission ----------------------------------------------------------------------------------

    def is_memory_available(self, blocks: int, cached_matched: int) -> bool:
        """``KVBlockAllocator.is_memory_available``: the free pool, or under LRU the free pool and the
        cached blocks other than the ``cached_matched`` the request will pin."""
        if self.free_count >= blocks:
            return True
        return self.lru and self.free_count + self.cached - cached_matched >= blocks

    def admit(self, rid: int, finished: int, span: int, prompt_len: int, m: PrefixMatch) -> None:
        """``add_request``'s block work for a chunk of ``span`` tokens after ``finished`` of a
        ``prompt_len``-token prompt: pin the matched blocks, allocate the rest, register the blocks the
        chunk completes, record its Mamba states; count it."""
        refs, stamp = self.refs, self.stamp
        for b in m.blocks:
            if refs[b] == 0 and self.hash_of[b] != NO_BLOCK:
                self.cached -= 1
            refs[b] += 1
            if self.lru:
                stamp[b] = self.clock
        new = self._allocate(m.from_pool) if m.from_pool > 0 else []
        table = self.tables.setdefault(rid, [])
        have = len(table)
        table.extend(m.blocks)
        table.extend(new)
        c = self.counters
        c.admissions += 1
        if m.blocks:
            c.hits += 1
            c.blocks_matched += len(m.blocks)
        c.prefill_skipped_tokens += m.skip
        c.prefill_computed_tokens += m.computed
        hashes = self.hashes.get(rid)
        bs = self.block_size
        if hashes:
            complete = (finished + span) // bs
            previously = finished // bs
            top = complete if complete < len(hashes) else len(hashes)
            # the partial block an earlier chunk left, now complete; then the chunk's own new blocks
            self._register(table, hashes, previously, min(have, top))
            self._register(table, hashes, have + len(m.blocks), top)
        mc = self.mamba_cache
        if mc is not None:
            start = finished + m.skip
            mc.record(table, start, m.computed, len(m.blocks), prompt_len, len(table), bs,
                      finished + span >= prompt_len)

    def _register(self, table: list[int], hashes: list[int], lo: int, hi: int) -> None:
        """``register_kv_block_hashes`` for table positions ``lo .. hi - 1``."""
        if lo >= hi:
            return
        hash_of, block_of = self.hash_of, self.block_of
        batch = []
        for k in range(lo, hi):
            b, h = table[k], hashes[k]
            if not self.reregisters_matched and hash_of[b] == h:
                continue  # main: registration is idempotent
            batch.append((b, h, hashes[k - 1] if k > 0 else 0))
        for b, h, _ in batch:
            hash_of[b] = h
            block_of[h] = b
        if not self.lru:
            self.counters.registered_blocks += len(batch)
            return
        parent, children = self.parent, self.children
        for b, _, ph in batch:
            p = block_of.get(ph, NO_BLOCK) if ph != 0 else NO_BLOCK
            parent[b] = p
            if p != NO_BLOCK:
                children[p] += 1
        self.counters.registered_blocks += len(batch)

    def after_step(self) -> None:
        """The step ran: its recorded Mamba states take their slots."""
        if self.mamba_cache is not None:
            self.mamba_cache.commit(self)

    # -- blocks -------------------------------------------------------------------------------------

    def allocate_rows(self, grants: Sequence[tuple[int, int]]) -> None:
        """One allocation of ``Σ n`` blocks for ``(request id, n)`` grants in row order (a resume):
        each row takes its blocks in bag order, as Megatron hands a batch out."""
        total = sum(n for _, n in grants)
        if total == 0:
            return
        ids = self._allocate(total)
        k = 0
        for rid, n in grants:
            self.tables.setdefault(rid, []).extend(ids[k:k + n])
            k += n

    def _allocate(self, n: int) -> list[int]:
        """``allocate_memory_blocks(n)``: the top ``n`` of the bag, evicting cached blocks first when
        the free pool is short (LRU)."""
        self.flush()
        if self.free_count < n and not (self.lru and self._evict(n - self.free_count)):
            raise MegatronAssertion(f"allocate_memory_blocks({n}) returns None: {self.free_count} free, "
                                    f"{self.cached} cached (BlockOverflowError)")
        free = self.free
        ids = free[len(free) - n:]
        del free[len(free) - n:]
        self.free_count -= n
        refs, stamp, clock = self.refs, self.stamp, self.clock
        for b in ids:
            refs[b] = 1
            if self.lru:
                stamp[b] = clock
        return ids

    def _evict(self, n: int) -> bool:
        """``evict_lru_blocks(n)`` (see the module docstring); False when fewer are cached."""
        if self.cached < n:
            return False
        leaves, refs, children, stamp, hash_of, parent = (self.leaves, self.refs, self.children, self.stamp,
                                                          self.hash_of, self.parent)
        order: list[int] = []
        while len(order) < n:
            if not leaves:
                raise MegatronAssertion(
                    f"evict_lru_blocks asserts: leaf peel evicted {len(order)} of {n} requested from "
                    f"{self.cached + len(order)} cached blocks; parent graph is not a forest (likely a "
                    "block-hash collision)")
            t, b = heapq.heappop(leaves)
            if refs[b] != 0 or hash_of[b] == NO_BLOCK or children[b] != 0 or stamp[b] != t:
                continue  # stale: evicted, referenced again, or a parent again since it was pushed
            order.append(b)
            self.cached -= 1
            p = parent[b]
            if p != NO_BLOCK:
                children[p] -= 1
                parent[b] = NO_BLOCK
                if children[p] == 0 and refs[p] == 0 and hash_of[p] != NO_BLOCK:
                    heapq.heappush(leaves, (stamp[p], p))
            children[b] = -1  # not a leaf again while it waits for the batch's deregistration
        self._deregister(order, parents_done=True)
        self.free.extend(order)
        self.free_count += n
        self.counters.evicted_blocks += n
        return True

    def _deregister(self, blocks: Iterable[int], *, parents_done: bool = False) -> None:
        """``_deregister_blocks`` for a batch: the hashes leave the map (whichever block it names),
        the blocks' parents lose a child, the Mamba cache hears of it."""
        blocks = list(blocks)
        hash_of, block_of, parent, children, stamp, refs = (self.hash_of, self.block_of, self.parent,
                                                            self.children, self.stamp, self.refs)
        hashes = {hash_of[b] for b in blocks} - {NO_BLOCK}
        for h in hashes:
            block_of.pop(h, None)
        if self.mamba_cache is not None:
            self.mamba_cache.deregistered(blocks, hashes)
        for b in blocks:
            if self.lru and not parents_done:
                p = parent[b]
                if p != NO_BLOCK:
                    children[p] -= 1
            parent[b] = NO_BLOCK
            children[b] = 0
            stamp[b] = 0
            hash_of[b] = NO_BLOCK
            refs[b] = 0

    def release(self, rid: int, group: str) -> None:
        """The request gives back its table, in release group ``group`` (``finish``, ``evict``)."""
        table = self.tables.pop(rid, None)
        if table:
            self._release_blocks(table, group)

    def release_last(self, rid: int, n: int) -> None:
        """A speculative rewind gives back the request's last ``n`` blocks (group ``rewind``)."""
        table = self.tables[rid]
        gone = table[len(table) - n:]
        del table[len(table) - n:]
        self._release_blocks(gone, "rewind")

    def _release_blocks(self, blocks: Sequence[int], group: str) -> None:
        if group != self._group:
            self.flush()
            self._group = group
        refs, hash_of, children = self.refs, self.hash_of, self.children
        released = self._released
        for b in blocks:
            refs[b] -= 1
            if refs[b]:
                continue
            if hash_of[b] == NO_BLOCK or not self.lru:
                released.append(b)
                self.free_count += 1
            else:
                self.cached += 1
                if children[b] == 0:
                    heapq.heappush(self.leaves, (self.stamp[b], b))

    def flush(self) -> None:
        """The release group ends: its blocks go back to the bag in ascending id order (under REF_ZERO
        deregistered first, as one batch)."""
        self._group = ""
        if not self._released:
            return
        blocks = sorted(set(self._released))
        self._released = []
        if not self.lru:
            self._deregister(blocks)
        self.free.extend(blocks)

    def unique_blocks(self, rids: Iterable[int]) -> int:
        """Distinct blocks in the requests' tables (``get_active_used`` / ``get_paused_used``)."""
        seen: set[int] = set()
        for rid in rids:
            seen.update(self.tables.get(rid, ()))
        return len(seen)

    def unique_prefix_within(self, rids: Sequence[int], budget: int) -> int:
        """How many of ``rids``, from the first, hold at most ``budget`` distinct blocks together
        (main's ``_get_paused_request_count_within_block_budget``)."""
        seen: set[int] = set()
        n = 0
        for rid in rids:
            seen.update(self.tables.get(rid, ()))
            if len(seen) > budget:
                break
            n += 1
        return n

    def releasable_by_suffix(self, rids: Sequence[int]) -> list[int]:
        """For ``e = 0 .. len(rids)``: the blocks that become allocatable when the right-most ``e`` of
        ``rids`` give theirs back (main's ``_get_releasable_block_counts``): a block counts once every
        reference to it is among ``rids``, at the suffix that reaches its left-most holder."""
        k = len(rids)
        seen: dict[int, int] = {}
        leftmost: dict[int, int] = {}
        for i, rid in enumerate(rids):
            for b in self.tables.get(rid, ()):
                seen[b] = seen.get(b, 0) + 1
                leftmost.setdefault(b, i)
        by_depth = [0] * (k + 1)
        refs = self.refs
        for b, n in seen.items():
            if n == refs[b]:
                by_depth[k - leftmost[b]] += 1
        out, total = [], 0
        for d in by_depth:
            total += d
            out.append(total)
        return out

    def shared_extra(self) -> int:
        """Σ over held blocks of (references − 1): how often shared blocks are counted more than once
        in the requests' block counts."""
        return sum(r - 1 for r in self.refs if r > 1)

    def check(self, held: dict[int, int]) -> str | None:
        """Why the cache's books do not balance (None when they do). ``held``: request id -> its block
        count (``Request.blocks``) for every request holding blocks."""
        for rid, n in held.items():
            if len(self.tables.get(rid, ())) != n:
                return f"request {rid} holds {n} blocks but its table {len(self.tables.get(rid, ()))}"
        count = [0] * self.pool_blocks
        for table in self.tables.values():
            for b in table:
                count[b] += 1
        if count != self.refs:
            b = next(i for i in range(self.pool_blocks) if count[i] != self.refs[i])
            return f"block {b} has {self.refs[b]} references but {count[b]} table entries"
        cached = sum(1 for b in range(self.pool_blocks)
                     if self.lru and self.refs[b] == 0 and self.hash_of[b] != NO_BLOCK)
        if cached != self.cached:
            return f"cached count {self.cached} != {cached}"
        free = len(self.free) + len(set(self._released))
        if free != self.free_count:
            return f"free count {self.free_count} != {free} in the bag"
        if any(self.hash_of[b] != h for h, b in self.block_of.items()):
            return "the hash map names a block that carries another hash"
        return None

    # -- replay state ---------------------------------------------------------------------------------

    def to_state(self) -> dict:
        """Everything a saved round needs to replay with the cache."""
        self.flush()
        blocks = [[b, self.hash_of[b], self.refs[b], self.stamp[b], self.parent[b], self.children[b]]
                  for b in range(self.pool_blocks)
                  if self.refs[b] or self.hash_of[b] != NO_BLOCK or self.stamp[b] or self.children[b]]
        return {"clock": self.clock, "free": list(self.free), "blocks": blocks,
                "map": [[h, b] for h, b in self.block_of.items()],
                "tables": {str(k): v for k, v in sorted(self.tables.items())},
                "hashes": {str(k): v for k, v in sorted(self.hashes.items())},
                "mamba": self.mamba_cache.to_state() if self.mamba_cache is not None else None}

    def load_state(self, doc: dict) -> None:
        """The cache of ``to_state``'s document; a malformed one raises ``ValueError`` saying where."""
        _check_state(doc, self.pool_blocks)
        n = self.pool_blocks
        self.clock = int(doc["clock"])
        self.free = list(doc["free"])
        self.free_count = len(self.free)
        self._released, self._group = [], ""
        self.hash_of, self.refs, self.stamp = [NO_BLOCK] * n, [0] * n, [0] * n
        self.parent, self.children = [NO_BLOCK] * n, [0] * n
        for b, h, r, s, p, c in doc["blocks"]:
            self.hash_of[b], self.refs[b], self.stamp[b], self.parent[b], self.children[b] = h, r, s, p, c
        self.block_of = {h: b for h, b in doc["map"]}
        self.cached = sum(1 for b in range(n) if self.lru and self.refs[b] == 0 and self.hash_of[b] != NO_BLOCK)
        self.leaves = [(self.stamp[b], b) for b in range(n)
                       if self.lru and self.refs[b] == 0 and self.hash_of[b] != NO_BLOCK and self.children[b] == 0]
        heapq.heapify(self.leaves)
        self.tables = {int(k): list(v) for k, v in doc["tables"].items()}
        self.hashes = {int(k): list(v) for k, v in doc["hashes"].items()}
        if self.mamba_cache is not None and doc["mamba"] is not None:
            self.mamba_cache.load_state(doc["mamba"])


def new_prefix_cache(e: EngineConfig, hybrid: bool, source_tokens: int) -> PrefixCache:
    """The prefix cache of an engine of ``e`` (its pool, eviction policy, Mamba slots and rule set)."""
    rules = kv_rules(e.megatron_rules)
    return PrefixCache(e.block_size, source_tokens, e.resolved_kv_blocks() + e.paused_blocks,
                       eviction=e.prefix_caching_eviction, hybrid=hybrid, mamba_slots=e.prefix_caching_mamba_slots,
                       ssm_chunk=e.ssm_chunk_alignment, reregisters_matched=rules.reregisters_matched,
                       mamba_overflow_raises=rules.mamba_overflow_raises)


STATE_FIELDS = ("clock", "free", "blocks", "map", "tables", "hashes", "mamba")


def _ints(value: object, where: str, n: int | None = None) -> list[int]:
    if not isinstance(value, list) or any(type(v) is not int for v in value) or (n is not None and len(value) != n):
        raise ValueError(f"{where}: must be a list of {n or 'some'} integers")
    return value


def _check_state(doc: object, pool: int) -> None:
    if not isinstance(doc, dict) or set(doc) != set(STATE_FIELDS):
        raise ValueError(f"must be an object with exactly the keys {', '.join(STATE_FIELDS)}")
    if type(doc["clock"]) is not int or doc["clock"] < 0:
        raise ValueError("clock: must be an integer >= 0")
    free = _ints(doc["free"], "free")
    if any(not 0 <= b < pool for b in free) or len(set(free)) != len(free):
        raise ValueError(f"free: distinct block ids in 0..{pool - 1}")
    if not isinstance(doc["blocks"], list):
        raise ValueError("blocks: must be a list of [block, hash, references, stamp, parent, children]")
    ids = set()
    for i, row in enumerate(doc["blocks"]):
        b, _, refs, _, _, _ = _ints(row, f"blocks[{i}]", 6)
        if not 0 <= b < pool or refs < 0:
            raise ValueError(f"blocks[{i}]: a block id in 0..{pool - 1} and references >= 0")
        ids.add(b)
    if not isinstance(doc["map"], list):
        raise ValueError("map: must be a list of [hash, block]")
    for i, row in enumerate(doc["map"]):
        _ints(row, f"map[{i}]", 2)
    for k in ("tables", "hashes"):
        if not isinstance(doc[k], dict) or not all(isinstance(r, str) and r.isdigit() for r in doc[k]):
            raise ValueError(f"{k}: must map request ids to lists of integers")
        for r, v in doc[k].items():
            _ints(v, f"{k}.{r}")
    for r, table in doc["tables"].items():
        if any(not 0 <= b < pool for b in table):
            raise ValueError(f"tables.{r}: names a block outside the pool")
    m = doc["mamba"]
    if m is not None:
        if not isinstance(m, dict) or set(m) != {"slot_blocks", "hash_to_block"}:
            raise ValueError("mamba: null or an object with exactly the keys slot_blocks, hash_to_block")
        _ints(m["slot_blocks"], "mamba.slot_blocks")
        for i, row in enumerate(m["hash_to_block"] if isinstance(m["hash_to_block"], list) else [None]):
            _ints(row, f"mamba.hash_to_block[{i}]", 2)
