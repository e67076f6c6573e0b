"""What a replayed trace holds, gathered as its requests are read (in arrival order, the window
applied, before ``time_scale``): counts, span, token totals, the lengths the health flags compare
with the engine's limits, whether the arrivals look like milliseconds, and the prefix blocks.

Prefix blocks (Mooncake's ``hash_ids``): block ``i`` of a prompt covers its tokens
``[i * block_tokens, (i + 1) * block_tokens)`` (the last one may be partial). ``reused_prefix_tokens``
counts, for each request, the tokens of the longest prefix of its blocks that earlier requests
already had: the prompt tokens an unbounded prefix cache could have skipped (an upper bound; no
scheduler reads the blocks yet).

Memory: two 4-byte lengths per request (the limit checks need every length, not a maximum) and the
set of distinct block hashes.
"""

from __future__ import annotations

import statistics
from array import array
from dataclasses import dataclass, field
from typing import Any

from cgbench.workload.arrivals import RequestSpec

UNIT_SAMPLE = 1000  # requests whose gaps say whether "seconds" look like milliseconds
MS_LIKE_GAP_S = 10.0  # whole-number arrivals this far apart (median) are milliseconds, not seconds
_U32 = 2**32 - 1


def looks_like_ms(times: list[float]) -> bool:
    """Whole-number arrivals whose median gap is ``MS_LIKE_GAP_S`` or more: milliseconds, not seconds."""
    if len(times) < 3 or any(not float(t).is_integer() for t in times):
        return False
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    return bool(gaps) and statistics.median(gaps) >= MS_LIKE_GAP_S


@dataclass
class TraceSummary:
    """A trace as read; ``to_json`` is the result document's ``trace`` block."""

    file: str
    format: str
    format_how: str  # "detected from its header" / "workload.trace_format" / ...
    arrival_unit: str
    unit_how: str
    note: str = ""
    rows: int = 0  # records in the file
    requests: int = 0  # in the window
    first_arrival_s: float = 0.0
    last_arrival_s: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    max_prompt_tokens: int = 0
    max_request_tokens: int = 0  # prompt + output
    prompt_lengths: array = field(default_factory=lambda: array("I"), repr=False)
    request_lengths: array = field(default_factory=lambda: array("I"), repr=False)
    arrival_sample: list[float] = field(default_factory=list, repr=False)
    block_tokens: int = 0
    blocks: int = 0
    distinct_blocks: int = 0
    reused_prefix_tokens: int = 0
    time_scale: float = 1.0
    window: dict[str, Any] | None = None
    _seen: set[int] = field(default_factory=set, repr=False)

    def add(self, s: RequestSpec) -> None:
        if self.requests == 0:
            self.first_arrival_s = s.arrival_s
        self.requests += 1
        self.last_arrival_s = s.arrival_s
        p, total = s.prompt_tokens, s.prompt_tokens + s.output_tokens
        self.prompt_tokens += p
        self.output_tokens += s.output_tokens
        self.max_prompt_tokens = max(self.max_prompt_tokens, p)
        self.max_request_tokens = max(self.max_request_tokens, total)
        self.prompt_lengths.append(min(p, _U32))
        self.request_lengths.append(min(total, _U32))
        if len(self.arrival_sample) < UNIT_SAMPLE:
            self.arrival_sample.append(s.arrival_s)
        if s.prefix_blocks is not None:
            self._add_blocks(s.prefix_blocks, p)

    def _add_blocks(self, blocks: array, prompt: int) -> None:
        seen, size = self._seen, self.block_tokens
        reusing = True
        for i, h in enumerate(blocks):
            if reusing and h in seen:
                self.reused_prefix_tokens += max(0, min(size, prompt - i * size))
            else:
                reusing = False
                seen.add(h)
        self.blocks += len(blocks)
        self.distinct_blocks = len(seen)

    # -- what the health flags ask

    def over(self, limit: int) -> tuple[int, int]:
        """(prompts longer than ``limit``, requests whose prompt + output is longer)."""
        return sum(1 for x in self.prompt_lengths if x > limit), sum(1 for x in self.request_lengths if x > limit)

    def looks_like_ms(self) -> bool:
        """The first arrivals as read look like milliseconds read as seconds (``looks_like_ms``)."""
        return looks_like_ms(self.arrival_sample)

    @property
    def span_s(self) -> float:
        """Replayed arrival span (``time_scale`` applied)."""
        return (self.last_arrival_s - self.first_arrival_s) * self.time_scale

    def to_json(self) -> dict[str, Any]:
        span = self.span_s
        out: dict[str, Any] = {
            "file": self.file, "format": self.format, "format_how": self.format_how,
            "arrival_unit": self.arrival_unit, "arrival_unit_how": self.unit_how, "note": self.note,
            "rows": self.rows, "requests": self.requests, "window": self.window, "time_scale": self.time_scale,
            "span_s": span, "offered_req_s": (self.requests - 1) / span if span > 0 else None,
            "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
            "max_prompt_tokens": self.max_prompt_tokens, "max_request_tokens": self.max_request_tokens,
        }
        if self.block_tokens:
            out["prefix_blocks"] = {
                "block_tokens": self.block_tokens, "blocks": self.blocks, "distinct_blocks": self.distinct_blocks,
                "reused_prefix_tokens": self.reused_prefix_tokens,
                "reused_prefix_share": self.reused_prefix_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            }
        return out
