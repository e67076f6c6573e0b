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
    ArrivalStream,
    OrderedStream,
    RequestSpec,
    RequestStream,
    arrival_times,
    iter_arrival_times,
)
from cgbench.workload.lengths import iter_lengths, sample_lengths
from cgbench.workload.trace import read_trace, scale_arrivals, write_trace

__all__ = ["ArrivalStream", "OrderedStream", "RequestSpec", "RequestStream", "generate_requests", "iter_requests",
           "make_stream", "read_trace", "sample_lengths", "stream_rng", "write_trace"]


def stream_rng(seed: int, stream: str) -> random.Random:
    """An independent generator for one named random stream of one seed."""
    digest = hashlib.sha256(f"cgbench/{stream}/{seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generate_requests(w: WorkloadConfig, seed: int) -> list[RequestSpec]:
    """The workload's requests, ids ``0..n-1`` in arrival order (closed-loop arrivals are 0.0 here;
    the stream sets them on release). ``w`` is trusted as validated; a bad trace file is a ConfigError."""
    if w.trace:
        return scale_arrivals(read_trace(w.trace), w.time_scale)
    n = w.num_requests
    times = arrival_times(w.arrival, n, stream_rng(seed, "arrival"))
    prompts = sample_lengths(w.prompt_len, n, stream_rng(seed, "prompt_len"), "workload.prompt_len")
    outputs = sample_lengths(w.output_len, n, stream_rng(seed, "output_len"), "workload.output_len")
    return [RequestSpec(i, t, p, o) for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))]


def iter_requests(w: WorkloadConfig, seed: int) -> Iterator[RequestSpec]:
    """``generate_requests`` of a generated (not trace) workload, one request at a time."""
    times = iter_arrival_times(w.arrival, stream_rng(seed, "arrival"))
    prompts = iter_lengths(w.prompt_len, stream_rng(seed, "prompt_len"))
    outputs = iter_lengths(w.output_len, stream_rng(seed, "output_len"))
    return itertools.islice(map(RequestSpec, itertools.count(), times, prompts, outputs), w.num_requests)


def make_stream(w: WorkloadConfig, seed: int) -> ArrivalStream | OrderedStream:
    """The stream the engine consumes for workload ``w`` and ``seed``. A generated open-loop workload
    is drawn as the run goes (``OrderedStream``: arrival times never decrease along the ids)."""
    closed = w.arrival.process == "closed_loop"
    if not w.trace and not closed:
        return OrderedStream(iter_requests(w, seed), w.num_requests)
    return ArrivalStream(generate_requests(w, seed), concurrency=w.arrival.concurrency if closed else 0)
