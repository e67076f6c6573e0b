"""A request's life in the engine: prompt, chunks, tokens emitted, waits, outcome."""

from __future__ import annotations

from dataclasses import dataclass
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

    def start_prefill(self, prompt_tokens: int, finished: int = 0) -> None:
        """A (re-)prefill pass with ``prompt_tokens`` still to prefill after ``finished`` already done."""
        self.remaining_prompt = prompt_tokens
        self.finished_chunk = finished

    @property
    def decode_remaining(self) -> int:
        return self.output_len - self.generated


def make_request(id: int, prompt_tokens: int, output_tokens: int, max_sequence_length: int, *,
                 arrival_s: float = 0.0, arrival_step: int = 0) -> Request:
    """A new request; its output is clamped so that prompt + output fits ``max_sequence_length``."""
    return Request(id=id, prompt_len=prompt_tokens,
                   output_len=max(0, min(output_tokens, max_sequence_length - prompt_tokens)),
                   arrival_s=arrival_s, arrival_step=arrival_step)
