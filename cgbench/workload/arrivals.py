"""Request records, arrival-time generators and the stream the engine consumes.

Arrival processes (``workload.arrival.process``), all seeded through the ``rng`` passed in:

* ``all_at_once``: every request at t = 0 (vLLM's ``--request-rate inf``).
* ``poisson``: exponential gaps with mean ``1 / rate``.
* ``gamma``: gaps ~ Gamma(shape = ``burstiness``, scale = ``1 / (rate * burstiness)``), vLLM bench
  serve's definition: mean gap ``1 / rate``, coefficient of variation ``1 / sqrt(burstiness)``
  (burstiness < 1 is burstier than Poisson, 1 is Poisson, > 1 is smoother). Unlike vLLM's newer
  code we do **not** rescale the gaps so that the last arrival lands exactly at ``N / rate``: the
  gaps are an unconditioned renewal process, so their distribution is exactly the gamma law above
  and the first ``k`` arrivals do not depend on ``N``.
* ``constant``: request ``i`` arrives at exactly ``i / rate``.
* ``closed_loop``: a fixed number of requests in flight. The first ``concurrency`` arrive at
  t = 0; each later one arrives when ``ArrivalStream.on_complete`` is called, at that time.

Convention for the open-loop processes: the first request arrives at t = 0 and request ``i`` at
the sum of ``i`` gaps (vLLM also draws a gap before the first request; we do not, so that the run
starts with work instead of an idle interval).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from cgbench.config.schema import ArrivalConfig


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request: when it arrives and how many tokens it reads and writes."""

    id: int
    arrival_s: float  # seconds from the start of the run
    prompt_tokens: int
    output_tokens: int


def arrival_times(a: ArrivalConfig, n: int, rng: random.Random) -> list[float]:
    """The ``n`` arrival times of an open-loop process, non-decreasing, starting at 0.0.

    ``all_at_once`` and ``closed_loop`` give zeros (closed-loop times are set when released). ``a`` is
    trusted as validated (``cgbench.config.schema.validate``): the rate of an open-loop process is > 0."""
    return list(itertools.islice(iter_arrival_times(a, rng), n))


def iter_arrival_times(a: ArrivalConfig, rng: random.Random) -> Iterator[float]:
    """``arrival_times`` one at a time, endlessly (the ``i``-th is the same float)."""
    if a.process in ("all_at_once", "closed_loop"):
        return itertools.repeat(0.0)
    if a.process == "constant":
        return (i / a.rate for i in itertools.count())
    if a.process == "poisson":
        def gap() -> float:
            return rng.expovariate(a.rate)
    else:  # gamma (the schema admits no other process)
        shape, scale = a.burstiness, 1.0 / (a.rate * a.burstiness)

        def gap() -> float:
            return rng.gammavariate(shape, scale)
    return _running_sum(gap)


def _running_sum(gap: Callable[[], float]) -> Iterator[float]:
    t = 0.0
    yield t
    while True:
        t += gap()
        yield t


class RequestStream(Protocol):
    """What the engine reads from a workload: requests due by a time, the next arrival, completions
    (closed loops release the next request on one) and whether anything is left."""

    @property
    def total(self) -> int: ...

    def pop_due(self, now_s: float) -> list[RequestSpec]: ...

    def next_arrival_s(self) -> float | None: ...

    def on_complete(self, now_s: float) -> None: ...

    def exhausted(self) -> bool: ...


class ArrivalStream:
    """Hands requests to the engine as simulated (or wall-clock) time passes.

    Open loop (``concurrency == 0``): each request is due at its ``arrival_s``.
    Closed loop (``concurrency > 0``): the first ``concurrency`` requests (in id order) are due at
    t = 0 with ``arrival_s = 0.0``; every ``on_complete(now)`` releases the next one with
    ``arrival_s = now``. Completions after every request has been released are ignored.
    """

    __slots__ = ("_pending", "_held", "_popped", "_total", "_concurrency")

    def __init__(self, specs: Iterable[RequestSpec], *, concurrency: int = 0) -> None:
        specs = list(specs)
        if len({s.id for s in specs}) != len(specs):
            raise ValueError("ArrivalStream: request ids must be unique")
        if concurrency < 0:
            raise ValueError(f"ArrivalStream: concurrency must be >= 0, got {concurrency}")
        self._total = len(specs)
        self._popped = 0
        self._concurrency = concurrency
        self._held: deque[RequestSpec] = deque()
        if concurrency:
            specs.sort(key=lambda s: s.id)
            self._held.extend(specs[concurrency:])
            specs = [replace(s, arrival_s=0.0) for s in specs[:concurrency]]
        # (arrival, id) is unique, so heap comparisons never reach the spec itself.
        self._pending = [(s.arrival_s, s.id, s) for s in specs]
        heapq.heapify(self._pending)

    @property
    def total(self) -> int:
        """Number of requests the stream will ever produce."""
        return self._total

    @property
    def concurrency(self) -> int:
        """Closed-loop concurrency; 0 for an open-loop stream."""
        return self._concurrency

    def pop_due(self, now_s: float) -> list[RequestSpec]:
        """Every request with ``arrival_s <= now_s`` not yet returned, in id order."""
        due = []
        while self._pending and self._pending[0][0] <= now_s:
            due.append(heapq.heappop(self._pending)[2])
        self._popped += len(due)
        due.sort(key=lambda s: s.id)
        return due

    def next_arrival_s(self) -> float | None:
        """Earliest pending arrival time; None when nothing is pending right now (a closed loop may
        still hold requests that wait for completions)."""
        return self._pending[0][0] if self._pending else None

    def on_complete(self, now_s: float) -> None:
        """A request left the engine (finished or failed); a closed loop releases one at ``now_s``."""
        if self._held:
            s = replace(self._held.popleft(), arrival_s=now_s)
            heapq.heappush(self._pending, (s.arrival_s, s.id, s))

    def exhausted(self) -> bool:
        """True when every request has been produced and popped."""
        return self._popped == self._total


class OrderedStream:
    """An open-loop stream whose requests come in id order with non-decreasing arrival times (a
    generated workload): the same requests, in the same order, as ``ArrivalStream`` over them, but
    drawn one at a time from ``specs``, so a long run never holds its whole workload."""

    __slots__ = ("_specs", "_next", "_popped", "_total")

    def __init__(self, specs: Iterator[RequestSpec], total: int) -> None:
        self._specs = specs
        self._total = total
        self._popped = 0
        self._next: RequestSpec | None = next(specs, None) if total > 0 else None

    @property
    def total(self) -> int:
        return self._total

    @property
    def concurrency(self) -> int:
        return 0

    def pop_due(self, now_s: float) -> list[RequestSpec]:
        due = []
        nxt = self._next
        while nxt is not None and nxt.arrival_s <= now_s:
            due.append(nxt)
            self._popped += 1
            after = next(self._specs, None) if self._popped < self._total else None
            if after is not None and (after.arrival_s < nxt.arrival_s or after.id <= nxt.id):
                raise ValueError(f"OrderedStream: request {after.id} comes out of order")
            nxt = after
        self._next = nxt
        return due

    def next_arrival_s(self) -> float | None:
        return self._next.arrival_s if self._next is not None else None

    def on_complete(self, now_s: float) -> None:
        """Open loop: a completion releases nothing."""

    def exhausted(self) -> bool:
        return self._popped == self._total
