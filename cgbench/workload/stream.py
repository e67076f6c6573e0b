"""Seeded, deterministic request streams built from a ``WorkloadConfig``.

Randomness: arrival gaps, prompt lengths and output lengths each draw from their own
``random.Random``, seeded from ``(seed, stream name)`` through SHA-256 (not Python's salted
``hash``). So changing the output-length distribution leaves prompts and arrivals unchanged,
changing the arrival process leaves the lengths unchanged, and the same seed gives the same
requests on every machine and Python run. Each stream draws sequentially, so the first ``k``
requests of an ``n``-request workload do not depend on ``n``.

Trace replay: when ``workload.trace`` is set, the trace *is* the workload (any format
``cgbench.workload.trace`` reads). ``num_requests`` and the length distributions are ignored (the
rows of ``workload.window``, every row without one, are replayed), arrival times are the trace's
multiplied by ``time_scale`` (0.5 replays twice as fast), and the arrival process is ignored except
``closed_loop``, which replays the trace's lengths in arrival order at the configured concurrency.
An open-loop replay streams the file (``OrderedStream`` over ``TraceSource.specs``): a trace of any
length replays in bounded memory.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator
from dataclasses import replace

from cgbench.config.schema import WorkloadConfig
from cgbench.workload.arrivals import (
    STREAM_BATCH,
    ArrivalStream,
    OrderedStream,
    RequestSpec,
    RequestStream,
)
from cgbench.workload.prefix_model import with_prefix_blocks
from cgbench.workload.sources import lengths_drawer, sample_lengths, times_drawer
from cgbench.workload.trace import TraceOptions, TraceSource, check_time_scale, read_trace, scale_arrivals, write_trace
from cgbench.workload.trace_summary import TraceSummary

__all__ = ["ArrivalStream", "OrderedStream", "RequestSpec", "RequestStream", "generate_requests", "iter_requests",
           "make_stream", "open_workload", "request_batches", "read_trace", "sample_lengths", "stream_rng",
           "write_trace"]


def stream_rng(seed: int, stream: str) -> random.Random:
    """An independent generator for one named random stream of one seed."""
    digest = hashlib.sha256(f"cgbench/{stream}/{seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generate_requests(w: WorkloadConfig, seed: int) -> list[RequestSpec]:
    """The workload's requests, ids ``0..n-1`` in arrival order (closed-loop arrivals are 0.0 here;
    the stream sets them on release). ``w`` is trusted as validated; a bad trace file is a ConfigError."""
    if w.trace:
        return scale_arrivals(read_trace(w.trace, TraceOptions.of(w)), w.time_scale)
    specs = next(request_batches(w, seed, max(w.num_requests, 1)), [])
    if w.prefix.is_set:  # workload.prefix: prompts grown by their sessions, prefix ids set
        return list(with_prefix_blocks(iter(specs), w.prefix, stream_rng(seed, "prefix")))
    return specs


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


def _generated(w: WorkloadConfig, seed: int) -> Iterator[RequestSpec]:
    """``iter_requests``, with ``workload.prefix``'s prompts and prefix ids when it is set."""
    specs = iter_requests(w, seed)
    if w.prefix.is_set:
        return with_prefix_blocks(specs, w.prefix, stream_rng(seed, "prefix"))
    return specs


def iter_requests(w: WorkloadConfig, seed: int) -> Iterator[RequestSpec]:
    """``generate_requests`` of a generated (not trace) workload, one request at a time."""
    return itertools.chain.from_iterable(request_batches(w, seed))


def make_stream(w: WorkloadConfig, seed: int) -> ArrivalStream | OrderedStream:
    """The stream the engine consumes for workload ``w`` and ``seed``. A generated open-loop workload
    is drawn as the run goes (``OrderedStream``: arrival times never decrease along the ids), and so
    is a trace's (read again as the run goes)."""
    return open_workload(w, seed)[0]


def _scaled(specs: Iterator[RequestSpec], time_scale: float) -> Iterator[RequestSpec]:
    for s in specs:
        yield replace(s, arrival_s=s.arrival_s * time_scale)


def open_workload(w: WorkloadConfig, seed: int) -> tuple[ArrivalStream | OrderedStream, TraceSummary | None]:
    """``make_stream``'s stream and, for a trace, what the trace holds (``TraceSummary``: the result
    document's ``trace`` block and the trace health flags read it)."""
    closed = w.arrival.process == "closed_loop"
    if not w.trace:
        if closed:
            return ArrivalStream(generate_requests(w, seed), concurrency=w.arrival.concurrency), None
        return OrderedStream(_generated(w, seed), w.num_requests), None
    source = TraceSource(w.trace, TraceOptions.of(w), time_scale=w.time_scale)
    check_time_scale(source.summary, w.time_scale)
    if closed:
        specs = scale_arrivals(list(source.specs()), w.time_scale)
        return ArrivalStream(specs, concurrency=w.arrival.concurrency), source.summary
    return OrderedStream(_scaled(source.specs(), w.time_scale), source.total), source.summary
