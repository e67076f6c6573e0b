"""The data-parallel coordinator's routing: which rank a new request goes to.

One owner for routing, read by the expert-parallel engine (``cgbench.engine.ep``) and the
data-parallel one (``cgbench.engine.dp``). The policies are Megatron 0.19.2's coordinator's
(``data_parallel_inference_coordinator/coordinator.py``):

* ``least_loaded`` (the default, Megatron's ``load_balanced`` and its fallback): the rank with the
  fewest in-flight requests (routed, not yet reported finished), ties to the lowest index.
* ``round_robin``: the next rank in turn (the coordinator of earlier releases; kept as a baseline).
* ``prefix_first_block`` / ``prefix_longest`` (Megatron's ``first_prefix_block`` /
  ``longest_prefix``): the highest ``alpha * match + (1 - alpha) * free / max_requests``, where
  ``free = max(0, max_requests - in_flight)`` and ``match`` is ``(i + 1) / n`` for the ranks that were
  routed the request's deepest known block hash ``i`` (of its ``n`` hashes; ``first_prefix_block``
  looks at the first hash only, so its match is 0 or 1), 0 for the others. Ties go to the rank that
  was routed that hash most recently, then to the lowest index. A request without hashes (a prompt
  shorter than a block) is routed ``least_loaded``. The hashes are the engine's block hashes of the
  prompt (``compute_request_hashes``: every complete ``block_size``-token block, chained, as the
  prefix cache hashes them), not the trace's source-block ids. The coordinator remembers every hash
  it routed (never forgets one: it does not see the ranks' prefix caches), and so does this router:
  its own per-rank table, independent of any engine's cache.

``scripts/megatron_diff.py routing`` checks the choices against the coordinator's own message
handlers (``handle_submit_request``, ``handle_engine_reply``) on random submissions and completions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cgbench.workload.prefix_hashes import engine_block_hashes, own_block_hashes
from cgbench.workload.stream import RequestSpec

LEAST_LOADED = "least_loaded"
ROUND_ROBIN = "round_robin"
PREFIX_FIRST_BLOCK = "prefix_first_block"
PREFIX_LONGEST = "prefix_longest"
PREFIX_ROUTINGS = (PREFIX_FIRST_BLOCK, PREFIX_LONGEST)
ROUTINGS = (LEAST_LOADED, ROUND_ROBIN, *PREFIX_ROUTINGS)


def least_loaded(loads: Sequence[int]) -> int:
    """The rank with the fewest in-flight requests, ties to the lowest index."""
    return list(loads).index(min(loads))


@dataclass
class Router:
    """Routes requests over ``size`` ranks with ``policy`` (see the module docstring); ``max_requests``
    (a rank's) normalises the free capacity of the prefix-aware score, weighted ``1 - alpha``."""

    size: int
    policy: str = LEAST_LOADED
    alpha: float = 0.5
    max_requests: int = 1
    block_size: int = 256  # the engine's KV block: the size of the blocks the coordinator hashes
    source_tokens: int = 512  # tokens per source block of the requests' prefix ids
    _next: int = 0
    _stamp: int = 0
    # block hash -> {rank: the assignment stamp of the last request with it routed there}
    _hashes: dict[int, dict[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy not in ROUTINGS:
            raise ValueError(f"unknown routing {self.policy!r}; one of {', '.join(ROUTINGS)}")

    def route(self, spec: RequestSpec, loads: Sequence[int], alive: Sequence[bool] | None = None) -> int:
        """The rank ``spec`` goes to, given each rank's in-flight requests ``loads`` now, among the
        ranks ``alive`` (all by default; at least one)."""
        ranks = range(self.size) if alive is None else [r for r in range(self.size) if alive[r]]
        if self.policy == ROUND_ROBIN:
            i = self._next
            while alive is not None and not alive[i]:
                i = (i + 1) % self.size
            self._next = (i + 1) % self.size
            return i
        if self.policy == LEAST_LOADED:
            return least_loaded(loads) if alive is None else min(ranks, key=lambda r: (loads[r], r))
        hashes = self.request_hashes(spec)
        if self.policy == PREFIX_FIRST_BLOCK:
            hashes = hashes[:1]
        if not hashes:
            return min(ranks, key=lambda r: (loads[r], r))
        match, recency = self.match(hashes)
        a, cap = self.alpha, self.max_requests
        scores = [a * m + (1.0 - a) * (max(0, cap - load) / cap) for m, load in zip(match, loads, strict=True)]
        best = min(ranks, key=lambda r: (-scores[r], -recency[r], r))
        self._stamp += 1
        for h in hashes:
            self._hashes.setdefault(h, {})[best] = self._stamp
        return best

    def request_hashes(self, spec: RequestSpec) -> list[int]:
        """The prompt's block hashes, as the coordinator computes them from its tokens."""
        ids = spec.prefix_blocks
        described = (engine_block_hashes(ids, spec.prompt_tokens, self.source_tokens, self.block_size)
                     if ids is not None and len(ids) > 0 else [])
        return own_block_hashes(described, spec.id, spec.prompt_tokens // self.block_size)

    def match(self, hashes: Sequence[int]) -> tuple[list[float], list[int]]:
        """Per rank: the match of ``hashes`` (``(i + 1) / n`` for the ranks holding the deepest hash ``i``
        any rank holds, else 0) and the stamp with which such a rank got that hash (else 0)."""
        n = len(hashes)
        for i in range(n - 1, -1, -1):
            row = self._hashes.get(hashes[i])
            if row:
                depth = (i + 1.0) / n
                return ([depth if r in row else 0.0 for r in range(self.size)],
                        [row.get(r, 0) for r in range(self.size)])
        return [0.0] * self.size, [0] * self.size

    def seen_blocks(self, rank: int) -> int:
        """How many distinct block hashes were routed to ``rank``."""
        return sum(1 for row in self._hashes.values() if rank in row)
