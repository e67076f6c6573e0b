"""A request's life in the engine: prompt, chunks, tokens emitted, waits, outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(slots=True, eq=False)
class Request:
    id: int
    prompt_len: int  # the original prompt
    output_len: int  # tokens to emit in total (after the max_sequence_length clamp)
    arrival_s: float = 0.0
    arrival_step: int = 0  # index of the first scheduling round that could see it
    # prefill progress of the current (re-)prefill pass
    remaining_prompt: int = 0  # tokens still to prefill
    finished_chunk: int = 0  # tokens prefilled so far in this pass
    # decode progress
    generated: int = 0  # tokens emitted so far (all passes)
    kv_tokens: int = 0  # tokens whose KV is stored (prompt prefilled + fed-back samples)
    blocks: int = 0  # KV blocks held
    # gating
    cg_wait_iters: int = 0  # Megatron's counter: consecutive rounds held back by gating
    deferrals: int = 0  # all gating deferrals of this request
    max_cg_wait: int = 0
    # accounting
    first_admit_step: int = -1
    first_admit_s: float = -1.0
    first_token_step: int = -1
    first_token_s: float = -1.0
    last_token_s: float = -1.0
    finish_step: int = -1
    finish_s: float = -1.0
    chunks: int = 0
    evictions: int = 0
    pauses: int = 0
    outcome: Outcome = Outcome.WAITING
    fail_reason: str = ""
    token_ids: list[int] = field(default_factory=list)  # real backends only
    # the event-proportional engine's anchor: state at the start of step anchor_step
    anchor_step: int = 0
    anchor_gen: int = 0
    anchor_kv: int = 0
    pos: int = 0  # row position (Megatron's active-row order)
    epoch: int = 0  # invalidates stale event-heap entries

    def start_prefill(self, prompt_tokens: int) -> None:
        self.remaining_prompt = prompt_tokens
        self.finished_chunk = 0

    @property
    def decode_remaining(self) -> int:
        return self.output_len - self.generated
