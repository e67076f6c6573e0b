"""The dynamic context: budgets, batch counters and the KV block pool.

Every KV block a request gains or loses goes through this class (admission, resume, release).

Counters follow Megatron's ``DynamicInferenceContext``: at the start of a round
``P = 0``, ``D`` = running (non-paused, non-hidden) requests and ``A = D * (1 + spec)``; each
admission adds its chunk to ``A`` and 1 to ``P``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cgbench.config.schema import EngineConfig
from cgbench.engine.contract import Admission
from cgbench.engine.handoff import HandoffPins
from cgbench.engine.kv_rules import KVRules, default_rules, kv_rules
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
    decode_tokens: int = field(init=False)  # tokens per decode row: 1 + num_speculative_tokens

    def __post_init__(self) -> None:
        self.decode_tokens = 1 + self.num_speculative_tokens

    @classmethod
    def from_engine(cls, e: EngineConfig) -> Context:
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

    def blocks_for(self, finished: int, tokens: int) -> int:
        """New blocks needed to append ``tokens`` after ``finished`` stored tokens."""
        bs = self.block_size
        return ceil_div(finished + tokens, bs) - ceil_div(finished, bs)

    def check_availability(self, req: Request) -> tuple[bool, bool, bool]:
        """(request_ok, tokens_ok, kv_ok) for the whole remaining prompt."""
        # a pinned handoff holds a Mamba slot too (#6584): free slots = max_requests - requests - pinned
        request_ok = self.total_request_count + self.pinned_slots < self.max_requests and self.paused_count == 0
        tokens_ok = self.active_tokens + req.remaining_prompt <= self.max_tokens
        kv_ok = self.free_blocks >= self.blocks_for(req.finished_chunk, req.remaining_prompt)
        return request_ok, tokens_ok, kv_ok

    def add_request(self, req: Request, chunk: int) -> Admission:
        """Admit ``chunk`` tokens of ``req`` (the whole remaining prompt when final)."""
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

    def release(self, req: Request) -> None:
        """``req`` gives back every block it holds (finished or evicted)."""
        self.free_blocks += req.blocks
        req.blocks = 0

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
        return max(0, min(n, self.free_blocks, room))

    def grant_decode_blocks(self, req: Request) -> None:
        """Give a resuming request the blocks its next decode step needs."""
        need = self.decode_blocks_needed(req)
        self.free_blocks -= need
        req.blocks += need
