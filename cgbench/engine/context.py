"""The dynamic context: budgets, batch counters and the KV block pool.

Every KV block a request gains or loses goes through this class (admission, resume, release).
With ``engine.prefix_caching`` it owns the pool's ``PrefixCache`` (``prefix``) and calls it from
those same places (``cgbench.engine.prefix_cache`` holds all of its rules).

Counters follow Megatron's ``DynamicInferenceContext``: at the start of a round
``P = 0``, ``D`` = running (non-paused, non-hidden) requests and ``A = D * (1 + spec)``; each
admission adds its chunk to ``A`` and 1 to ``P``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cgbench.config.schema import EngineConfig
from cgbench.engine.acceptance import AcceptanceModel, acceptance_model
from cgbench.engine.contract import Admission
from cgbench.engine.handoff import HandoffPins
from cgbench.engine.invariants import MegatronAssertion
from cgbench.engine.kv_rules import KVRules, default_rules, kv_rules
from cgbench.engine.prefix_cache import PrefixCache
from cgbench.engine.request import Request


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(slots=True)
class Context:
    max_requests: int
    max_tokens: int
    max_sequence_length: int
    block_size: int
    num_speculative_tokens: int
    active_blocks: int  # Megatron's active_count: the pool the running requests draw on
    paused_block_budget: int  # Megatron's paused_blocks
    free_blocks: int  # free in the whole pool (Megatron's total_avail)
    active_tokens: int = 0  # A
    prefill_count: int = 0  # P
    decode_count: int = 0  # D
    paused_count: int = 0
    chunked_request_id: int = -1
    admitted: list[Admission] = field(default_factory=list)
    rules: KVRules = field(default_factory=default_rules)  # engine.megatron_rules (kv_rules.py)
    handoff: HandoffPins | None = None  # engine.handoff_pinning (handoff.py): pinned Mamba slots
    pinned_slots: int = 0  # Mamba slots pinned by handoffs for this round (0 without pinning)
    prefix: PrefixCache | None = None  # engine.prefix_caching: the pool's prefix cache
    head_computed: int = -1  # prefix caching: the tokens the last check_availability's request computes
    acceptance: AcceptanceModel | None = None  # None: every draft accepted (engine/acceptance.py)
    decode_tokens: int = field(init=False)  # tokens per decode row: 1 + num_speculative_tokens

    def __post_init__(self) -> None:
        self.decode_tokens = 1 + self.num_speculative_tokens

    @classmethod
    def from_engine(cls, e: EngineConfig, seed: int = 0) -> Context:
        """``seed``: the run's, for the acceptance model's draws."""
        blocks = e.resolved_kv_blocks()
        return cls(
            max_requests=e.max_requests,
            max_tokens=e.max_tokens,
            max_sequence_length=e.max_sequence_length,
            block_size=e.block_size,
            num_speculative_tokens=e.num_speculative_tokens,
            active_blocks=blocks,
            paused_block_budget=e.paused_blocks,
            free_blocks=blocks + e.paused_blocks,
            rules=kv_rules(e.megatron_rules),
            handoff=HandoffPins(e.handoff_release_steps) if e.handoff_pinning else None,
            acceptance=acceptance_model(e, seed),
        )

    @property
    def pool_blocks(self) -> int:
        return self.active_blocks + self.paused_block_budget

    @property
    def total_request_count(self) -> int:
        return self.decode_count + self.paused_count + self.prefill_count


    def begin_round(self, decodes: int, paused: int) -> None:
        self.prefill_count = 0
        self.decode_count = decodes
        self.paused_count = paused
        self.active_tokens = decodes * self.decode_tokens
        self.admitted = []  # a new list: the last step's StepWork may still hold the old one
        if self.prefix is not None:
            self.prefix.begin_round()

    def blocks_for(self, finished: int, tokens: int) -> int:
        """New blocks needed to append ``tokens`` after ``finished`` stored tokens."""
        bs = self.block_size
        return ceil_div(finished + tokens, bs) - ceil_div(finished, bs)

    def check_availability(self, req: Request) -> tuple[bool, bool, bool]:
        """(request_ok, tokens_ok, kv_ok) for the whole remaining prompt. With prefix caching the
        tokens are those it computes (``head_computed``) and the blocks those it takes from the pool,
        which may evict cached blocks other than the ones it matches."""
        # a pinned handoff holds a Mamba slot too (#6584): free slots = max_requests - requests - pinned
        request_ok = self.total_request_count + self.pinned_slots < self.max_requests and self.paused_count == 0
        if self.prefix is not None:
            m = self.prefix.match(req.id, req.finished_chunk, req.remaining_prompt)
            self.head_computed = m.computed
            tokens_ok = self.active_tokens + m.computed <= self.max_tokens
            return request_ok, tokens_ok, self.prefix.is_memory_available(m.from_pool, m.cached_matched)
        tokens_ok = self.active_tokens + req.remaining_prompt <= self.max_tokens
        kv_ok = self.free_blocks >= self.blocks_for(req.finished_chunk, req.remaining_prompt)
        return request_ok, tokens_ok, kv_ok

    def allocatable(self) -> int:
        """Blocks an allocation can get: the free pool, and the cached blocks it may evict (LRU)."""
        return self.free_blocks + (self.prefix.cached if self.prefix is not None else 0)

    def add_request(self, req: Request, chunk: int) -> Admission:
        """Admit ``chunk`` tokens of ``req`` (the whole remaining prompt when final)."""
        if self.prefix is not None:
            return self._add_with_prefix(req, chunk, self.prefix)
        need = self.blocks_for(req.finished_chunk, chunk)
        if need > self.free_blocks or chunk < 1 or chunk > req.remaining_prompt:
            raise AssertionError(f"request {req.id}: add_request({chunk}) breaks a budget")
        self.free_blocks -= need
        req.blocks += need
        req.finished_chunk += chunk
        req.remaining_prompt -= chunk
        self.active_tokens += chunk
        self.prefill_count += 1
        final = req.remaining_prompt == 0
        self.chunked_request_id = -1 if final else req.id
        adm = Admission(req, chunk, final)
        self.admitted.append(adm)
        return adm

    def _add_with_prefix(self, req: Request, chunk: int, pc: PrefixCache) -> Admission:
        """``add_request`` under prefix caching: the chunk's matched blocks are pinned (shared), the
        rest taken from the pool (evicting cached blocks if it is short); only the tokens past the
        skipped prefix are computed (``active_tokens``)."""
        if chunk < 1 or chunk > req.remaining_prompt:
            raise AssertionError(f"request {req.id}: add_request({chunk}) breaks a budget")
        m = pc.match(req.id, req.finished_chunk, chunk)
        if self.active_tokens + m.computed > self.max_tokens:
            # the scheduler sized the chunk with the skip of the whole remaining prompt; add_request's
            # own (a hybrid's Mamba back-off, the two-token clamp) can compute more
            raise MegatronAssertion(
                f"add_request raises TokenOverflowError: request {req.id}'s {chunk}-token chunk computes "
                f"{m.computed} tokens, {self.active_tokens} already in the step, max_tokens {self.max_tokens}")
        pc.admit(req.id, req.finished_chunk, chunk, req.finished_chunk + req.remaining_prompt, m)
        self.free_blocks = pc.free_count
        req.blocks += len(m.blocks) + m.from_pool
        req.finished_chunk += chunk
        req.remaining_prompt -= chunk
        self.active_tokens += m.computed
        self.prefill_count += 1
        final = req.remaining_prompt == 0
        self.chunked_request_id = -1 if final else req.id
        adm = Admission(req, chunk, final, m.computed)
        self.admitted.append(adm)
        return adm

    def release(self, req: Request, group: str = "finish") -> None:
        """``req`` gives back every block it holds: finished (``group`` ``finish``) or evicted
        (``evict``). Under prefix caching its blocks lose a reference; registered ones with none left
        stay cached (LRU); the group is Megatron's release call (the order blocks go back in)."""
        if self.prefix is not None:
            self.prefix.release(req.id, group)
            self.free_blocks = self.prefix.free_count
        else:
            self.free_blocks += req.blocks
        req.blocks = 0

    def unique_held(self, held: int) -> int:
        """``held`` blocks summed over requests, each shared block counted once."""
        return held - self.prefix.shared_extra() if self.prefix is not None else held

    def held_blocks(self, reqs: Sequence[Request]) -> int:
        """The blocks ``reqs`` hold, a shared block counted once under prefix caching (Megatron's
        ``get_active_used`` / ``get_paused_used``), else per request."""
        if self.prefix is not None:
            return self.prefix.unique_blocks(r.id for r in reqs)
        return sum(r.blocks for r in reqs)

    def after_step(self) -> None:
        """The step's forward ran (before its update): the prefix cache records its Mamba states."""
        if self.prefix is not None:
            self.prefix.after_step()

    def cached_blocks(self) -> int:
        return self.prefix.cached if self.prefix is not None else 0

    def decode_blocks_needed(self, req: Request) -> int:
        """Blocks ``req`` must gain before its next decode step (0 when its blocks hold it)."""
        need = -(-(req.kv_tokens + self.decode_tokens) // self.block_size) - req.blocks
        return need if need > 0 else 0

    def resumable(self, paused: Sequence[Request], held_active: int, room: int) -> int:
        """How many paused rows, from the right-most one, resume: the longest run whose blocks, each
        with the block its next step needs, fit the active pool left over by the active rows
        (``held_active`` blocks), capped by the free-block count (as a number of rows) and by
        ``room`` (free active row slots)."""
        avail = self.active_blocks - held_active
        n = cum = 0
        for r in reversed(paused):
            cum += r.blocks + self.decode_blocks_needed(r)
            if cum > avail:
                break
            n += 1
        # capped by the free pool: 0.19.2 does not count the cached blocks an allocation could evict
        return max(0, min(n, self.free_blocks, room))

    def rewind(self, req: Request) -> None:
        """After a decode step whose rejected drafts moved ``req.kv_tokens`` back: the block past the
        kept tokens goes back to the pool (Megatron's ``rewind_kv_cache`` releases the last block when
        the rewind crosses back into the one before it; the rewind is shorter than a block)."""
        extra = req.blocks - -(-req.kv_tokens // self.block_size)
        if extra > 0:
            if self.prefix is not None:
                self.prefix.release_last(req.id, extra)
                self.free_blocks = self.prefix.free_count
            else:
                self.free_blocks += extra
            req.blocks -= extra

    def grant_decode_blocks(self, reqs: Sequence[Request]) -> None:
        """Give resuming requests (in row order) the blocks their next decode step needs: one
        allocation, handed out in row order (under main it may evict cached blocks)."""
        grants = [(r, self.decode_blocks_needed(r)) for r in reqs]
        total = sum(n for _, n in grants)
        if self.prefix is not None:
            self.prefix.allocate_rows([(r.id, n) for r, n in grants])
            self.free_blocks = self.prefix.free_count
        else:
            if total > self.free_blocks:
                raise AssertionError(f"{total} KV blocks wanted, {self.free_blocks} free")
            self.free_blocks -= total
        for r, n in grants:
            r.blocks += n
