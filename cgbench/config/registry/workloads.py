"""The workload-source registry's config half: every arrival process (``workload.arrival.process``)
and length distribution (``workload.*_len.dist``), and the keys of its record each one reads.

Validation and ``schema.unread_keys`` derive from ``reads``: a process that reads ``rate`` is an
open-loop process (a rate > 0 is required without a trace), one that reads ``concurrency`` is a
closed loop. The generators themselves are ``cgbench.workload.arrivals.arrival_drawer`` and
``cgbench.workload.lengths.length_drawer`` (compiled modules, dispatching on the same names; a test
checks each registered name draws). Trace files: ``cgbench.workload.trace`` (``.jsonl`` / ``.csv``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkloadSource:
    """One arrival process or length distribution: its name and the fields of its record it reads."""

    name: str
    reads: tuple[str, ...]
    summary: str = ""


ARRIVAL_PROCESSES: dict[str, WorkloadSource] = {s.name: s for s in (
    WorkloadSource("all_at_once", (), "every request arrives at t = 0"),
    WorkloadSource("poisson", ("rate",), "exponential gaps at rate requests/s"),
    WorkloadSource("gamma", ("rate", "burstiness"), "gamma gaps (vllm bench serve --burstiness)"),
    WorkloadSource("constant", ("rate",), "evenly spaced at rate requests/s"),
    WorkloadSource("closed_loop", ("concurrency",), "a new request as soon as one of concurrency completes"),
)}

LENGTH_DISTRIBUTIONS: dict[str, WorkloadSource] = {s.name: s for s in (
    WorkloadSource("fixed", ("value",)),
    WorkloadSource("uniform", ()),
    WorkloadSource("normal", ("mean", "std")),
    WorkloadSource("lognormal", ("mean", "sigma")),
    WorkloadSource("histogram", ("bins", "weights")),
)}


# the helpers below take any registry table whose entries have ``name`` and ``reads``


def readers(table: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The names in ``table`` that read ``key``."""
    return tuple(s.name for s in table.values() if key in s.reads)


def read_keys(table: Mapping[str, Any]) -> tuple[str, ...]:
    """Every key some entry of ``table`` reads, in registry order."""
    return tuple(dict.fromkeys(k for s in table.values() for k in s.reads))


def reads_of(table: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """What entry ``name`` reads (nothing for a name the table does not hold: validation refuses it)."""
    entry = table.get(name)
    return tuple(entry.reads) if entry is not None else ()


OPEN_LOOP = readers(ARRIVAL_PROCESSES, "rate")
