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

import bisect
import heapq
import itertools
import math
import operator
import random
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from cgbench.config.schema import ArrivalConfig


@dataclass(slots=True, init=False)  # a written __init__: a dataclass-made one stays slow when compiled
class RequestSpec:
    """One request: when it arrives and how many tokens it reads and writes. Treated as immutable (a
    changed copy is ``dataclasses.replace``'s), but not frozen: a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``, four times the cost, once per request of a long run."""

    id: int
    arrival_s: float  # seconds from the start of the run
    prompt_tokens: int
    output_tokens: int
    # the prompt's prefix-block ids (a trace's hash_ids, or workload.prefix's), packed int64: what
    # engine.prefix_caching hashes (cgbench.workload.prefix_hashes); None without them
    prefix_blocks: array[int] | None

    def __init__(self, id: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 prefix_blocks: array[int] | None = None) -> None:
        self.id = id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.prefix_blocks = prefix_blocks


# Requests drawn at a time by a generated workload: big enough that the per-batch work vanishes, small
# enough that a run stopping early has drawn little in vain.
STREAM_BATCH = 1024

TimeDrawer = Callable[[int], list[float]]
"""``draw(n)``: the next ``n`` arrival times of one process, as a list."""


# The built-in processes' builders, each named by its record (``config/registry/workloads.py``,
# ``builder``): ``(record, rng) -> draw(n)``, the next ``n`` arrival times, so consecutive batches are
# one list cut in pieces (the same floats: one running sum of the gaps). ``a`` is trusted as
# validated: the rate of an open-loop process is > 0. ``cgbench.workload.sources`` picks the builder.


def zero_times(a: ArrivalConfig, rng: random.Random) -> TimeDrawer:
    """``all_at_once`` and ``closed_loop``: zeros (closed-loop times are set when released)."""
    return lambda n: [0.0] * n


def constant_times(a: ArrivalConfig, rng: random.Random) -> TimeDrawer:
    return _Constant(a.rate)


def poisson_times(a: ArrivalConfig, rng: random.Random) -> TimeDrawer:
    rate, rand, log = a.rate, rng.random, math.log
    # random.Random.expovariate(rate), operation for operation.
    return _RunningSum(lambda n: [-log(1.0 - rand()) / rate for _ in range(n)])


def gamma_times(a: ArrivalConfig, rng: random.Random) -> TimeDrawer:
    shape, scale, gamma = a.burstiness, 1.0 / (a.rate * a.burstiness), rng.gammavariate
    return _RunningSum(lambda n: [gamma(shape, scale) for _ in range(n)])


class _Constant:
    """Request ``i`` at ``i / rate``."""

    __slots__ = ("_rate", "_issued")

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._issued = 0

    def __call__(self, n: int) -> list[float]:
        rate, i = self._rate, self._issued
        self._issued = i + n
        return [j / rate for j in range(i, i + n)]


class _RunningSum:
    """Times 0.0, then each the previous plus the next gap of ``gaps(k)`` (the next ``k`` gaps)."""

    __slots__ = ("_gaps", "_last")

    def __init__(self, gaps: Callable[[int], list[float]]) -> None:
        self._gaps = gaps
        self._last: float | None = None  # the last time handed out; None before the first

    def __call__(self, n: int) -> list[float]:
        if n <= 0:
            return []
        last = self._last
        if last is None:
            out = list(itertools.accumulate(self._gaps(n - 1), initial=0.0))
        else:
            out = list(itertools.accumulate(self._gaps(n), initial=last))[1:]
        self._last = out[-1]
        return out


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
    drawn from ``specs`` a batch at a time, so a long run never holds its whole workload.

    ``pop_due`` runs every engine round; when nothing is due it is one comparison with the next
    arrival time. A batch that breaks the order is refused (``ValueError``) when it is drawn."""

    __slots__ = ("_specs", "_batch", "_times", "_i", "_next", "_last", "_popped", "_total")

    def __init__(self, specs: Iterator[RequestSpec], total: int) -> None:
        self._specs = specs
        self._total = total
        self._popped = 0
        self._batch: list[RequestSpec] = []
        self._times: list[float] = []  # the batch's arrival times
        self._i = 0  # the batch's first request not yet popped
        self._next: float | None = None  # its arrival time; None when no request is left
        self._last: RequestSpec | None = None  # the last request drawn (the order check across batches)
        self._draw()

    def _draw(self) -> None:
        """Replace the used-up batch with the next one (empty when every request has been drawn)."""
        left = self._total - self._popped
        batch = list(itertools.islice(self._specs, min(STREAM_BATCH, left))) if left > 0 else []
        chain = batch if self._last is None else [self._last, *batch]  # checked with the previous batch's last
        times = [s.arrival_s for s in chain]
        ids = [s.id for s in chain]
        if any(map(operator.lt, times[1:], times)) or any(map(operator.le, ids[1:], ids)):
            for prev, s in zip(chain, chain[1:], strict=False):
                if s.arrival_s < prev.arrival_s or s.id <= prev.id:
                    raise ValueError(f"OrderedStream: request {s.id} comes out of order")
        if chain is not batch:
            del times[0]
        self._batch, self._times, self._i = batch, times, 0
        self._next = times[0] if times else None
        if batch:
            self._last = batch[-1]

    @property
    def total(self) -> int:
        return self._total

    @property
    def concurrency(self) -> int:
        return 0

    def pop_due(self, now_s: float) -> list[RequestSpec]:
        nxt = self._next
        if nxt is None or not nxt <= now_s:  # nothing left, or nothing due (a NaN time included)
            return []
        due: list[RequestSpec] = []
        while True:
            times, i = self._times, self._i
            j = bisect.bisect_right(times, now_s, i)
            if j == i:
                break
            due += self._batch[i:j]
            self._popped += j - i
            if j < len(times):
                self._i, self._next = j, times[j]
                break
            self._draw()
        return due

    def next_arrival_s(self) -> float | None:
        return self._next

    def on_complete(self, now_s: float) -> None:
        """Open loop: a completion releases nothing."""

    def exhausted(self) -> bool:
        return self._popped == self._total
