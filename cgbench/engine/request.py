"""A request's life in the engine: prompt, chunks, tokens emitted, waits, outcome."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


# a written __init__ (it holds the defaults): 5x faster compiled (make native) than a dataclass-made one
@dataclass(slots=True, eq=False, init=False)
class Request:
    id: int
    prompt_len: int  # the original prompt
    output_len: int  # tokens to emit in total (after the max_sequence_length clamp)
    arrival_s: float
    arrival_step: int  # index of the first scheduling round that could see it
    # prefill progress of the current (re-)prefill pass
    remaining_prompt: int  # tokens still to prefill
    finished_chunk: int  # tokens prefilled so far in this pass
    # decode progress
    generated: int  # tokens emitted so far (all passes)
    kv_tokens: int  # tokens whose KV is stored (prompt prefilled + fed-back samples)
    blocks: int  # KV blocks held
    # gating
    cg_wait_iters: int  # Megatron's counter: consecutive rounds held back by gating
    deferrals: int  # all gating deferrals of this request
    max_cg_wait: int
    # accounting
    first_admit_step: int
    first_admit_s: float
    first_token_step: int
    first_token_s: float
    last_token_s: float
    finish_step: int
    finish_s: float
    chunks: int
    evictions: int
    pauses: int
    outcome: Outcome
    fail_reason: str

    def __init__(self, id: int, prompt_len: int, output_len: int, *,
                 arrival_s: float = 0.0, arrival_step: int = 0, remaining_prompt: int = 0,
                 finished_chunk: int = 0, generated: int = 0, kv_tokens: int = 0, blocks: int = 0,
                 cg_wait_iters: int = 0, deferrals: int = 0, max_cg_wait: int = 0, first_admit_step: int = -1,
                 first_admit_s: float = -1.0, first_token_step: int = -1, first_token_s: float = -1.0,
                 last_token_s: float = -1.0, finish_step: int = -1, finish_s: float = -1.0, chunks: int = 0,
                 evictions: int = 0, pauses: int = 0, outcome: Outcome = Outcome.WAITING,
                 fail_reason: str = "") -> None:
        self.id = id
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.arrival_s = arrival_s
        self.arrival_step = arrival_step
        self.remaining_prompt = remaining_prompt
        self.finished_chunk = finished_chunk
        self.generated = generated
        self.kv_tokens = kv_tokens
        self.blocks = blocks
        self.cg_wait_iters = cg_wait_iters
        self.deferrals = deferrals
        self.max_cg_wait = max_cg_wait
        self.first_admit_step = first_admit_step
        self.first_admit_s = first_admit_s
        self.first_token_step = first_token_step
        self.first_token_s = first_token_s
        self.last_token_s = last_token_s
        self.finish_step = finish_step
        self.finish_s = finish_s
        self.chunks = chunks
        self.evictions = evictions
        self.pauses = pauses
        self.outcome = outcome
        self.fail_reason = fail_reason

    def __copy__(self) -> Request:
        """A copy with the same fields (``copy.copy``: a repricing log keeps each admitted request as it
        was; a compiled class has no instance dictionary for the default copy to take)."""
        return Request(self.id, self.prompt_len, self.output_len, arrival_s=self.arrival_s,
                       arrival_step=self.arrival_step, remaining_prompt=self.remaining_prompt,
                       finished_chunk=self.finished_chunk, generated=self.generated, kv_tokens=self.kv_tokens,
                       blocks=self.blocks, cg_wait_iters=self.cg_wait_iters, deferrals=self.deferrals,
                       max_cg_wait=self.max_cg_wait, first_admit_step=self.first_admit_step,
                       first_admit_s=self.first_admit_s, first_token_step=self.first_token_step,
                       first_token_s=self.first_token_s, last_token_s=self.last_token_s,
                       finish_step=self.finish_step, finish_s=self.finish_s, chunks=self.chunks,
                       evictions=self.evictions, pauses=self.pauses, outcome=self.outcome,
                       fail_reason=self.fail_reason)

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
    room = max_sequence_length - prompt_tokens
    output_len = output_tokens if output_tokens < room else room  # comparisons, not builtin calls: hot
    return Request(id=id, prompt_len=prompt_tokens, output_len=output_len if output_len > 0 else 0,
                   arrival_s=arrival_s, arrival_step=arrival_step)
