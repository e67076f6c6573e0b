"""Seeded, deterministic request streams built from a ``WorkloadConfig``.

Randomness: arrival gaps, prompt lengths and output lengths each draw from their own
``random.Random``, seeded from ``(seed, stream name)`` through SHA-256 (not Python's salted
``hash``). So changing the output-length distribution leaves prompts and arrivals unchanged,
changing the arrival process leaves the lengths unchanged, and the same seed gives the same
requests on every machine and Python run. Each stream draws sequentially, so the first ``k``
requests of an ``n``-request workload do not depend on ``n``.

Trace replay: when ``workload.trace`` is set, the trace *is* the workload. ``num_requests`` and the
length distributions are ignored (every row is replayed; trim the file to replay fewer), arrival
times are the trace's ``arrival_s`` multiplied by ``time_scale`` (0.5 replays twice as fast), and
the arrival process is ignored except ``closed_loop``, which replays the trace's lengths in arrival
order at the configured concurrency.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator

from cgbench.config.schema import WorkloadConfig
from cgbench.workload.arrivals import (
    STREAM_BATCH,
    ArrivalStream,
    OrderedStream,
    RequestSpec,
    RequestStream,
)
from cgbench.workload.lengths import sample_lengths
from cgbench.workload.sources import lengths_drawer, times_drawer
from cgbench.workload.trace import read_trace, scale_arrivals, write_trace

__all__ = ["ArrivalStream", "OrderedStream", "RequestSpec", "RequestStream", "generate_requests", "iter_requests",
           "make_stream", "request_batches", "read_trace", "sample_lengths", "stream_rng", "write_trace"]


def stream_rng(seed: int, stream: str) -> random.Random:
    """An independent generator for one named random stream of one seed."""
    digest = hashlib.sha256(f"cgbench/{stream}/{seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generate_requests(w: WorkloadConfig, seed: int) -> list[RequestSpec]:
    """The workload's requests, ids ``0..n-1`` in arrival order (closed-loop arrivals are 0.0 here;
    the stream sets them on release). ``w`` is trusted as validated; a bad trace file is a ConfigError."""
    if w.trace:
        return scale_arrivals(read_trace(w.trace), w.time_scale)
    return next(request_batches(w, seed, max(w.num_requests, 1)), [])


def request_batches(w: WorkloadConfig, seed: int, batch: int = STREAM_BATCH) -> Iterator[list[RequestSpec]]:
    """``generate_requests`` of a generated (not trace) workload, ``batch`` requests at a time: each of
    the three random streams draws its next ``batch`` values, so the requests are the same for any
    ``batch``."""
    times = times_drawer(w.arrival, stream_rng(seed, "arrival"))
    prompts = lengths_drawer(w.prompt_len, stream_rng(seed, "prompt_len"))
    outputs = lengths_drawer(w.output_len, stream_rng(seed, "output_len"))
    n = w.num_requests
    for first in range(0, n, batch):
        k = min(batch, n - first)
        yield list(map(RequestSpec, range(first, first + k), times(k), prompts(k), outputs(k)))


def iter_requests(w: WorkloadConfig, seed: int) -> Iterator[RequestSpec]:
    """``generate_requests`` of a generated (not trace) workload, one request at a time."""
    return itertools.chain.from_iterable(request_batches(w, seed))


def make_stream(w: WorkloadConfig, seed: int) -> ArrivalStream | OrderedStream:
    """The stream the engine consumes for workload ``w`` and ``seed``. A generated open-loop workload
    is drawn as the run goes (``OrderedStream``: arrival times never decrease along the ids)."""
    closed = w.arrival.process == "closed_loop"
    if not w.trace and not closed:
        return OrderedStream(iter_requests(w, seed), w.num_requests)
    return ArrivalStream(generate_requests(w, seed), concurrency=w.arrival.concurrency if closed else 0)
