"""The workload-source registry's config half: every arrival process (``workload.arrival.process``)
and length distribution (``workload.*_len.dist``), and the keys of its record each one reads.

Validation and ``schema.unread_keys`` derive from ``reads``: a process that reads ``rate`` is an
open-loop process (a rate > 0 is required without a trace), one that reads ``concurrency`` is a
closed loop. The generators themselves are ``cgbench.workload.arrivals.arrival_drawer`` and
``cgbench.workload.lengths.length_drawer`` (compiled modules, dispatching on the same names; a test
checks each registered name draws). Trace files: ``cgbench.workload.trace``, their formats in
``cgbench.config.registry.traces``.

A plug-in (entry-point group ``cgbench.workloads``) is a ``WorkloadSource`` with its ``family``
(``arrival`` or ``length``) and a ``build``: ``(record, random.Random) -> draw``, where ``draw(n)``
returns the next ``n`` values (arrival times in seconds, non-decreasing from 0; or lengths, integers
within the record's ``min`` / ``max``), drawing only from the generator it was given. The plug-in's
draws are checked as they come (``cgbench.workload.sources``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cgbench.config.registry.plugins import builtin_or_plugin, names_with_plugins, plugin_error

FAMILIES = ("arrival", "length")


@dataclass(frozen=True)
class WorkloadSource:
    """One arrival process or length distribution: its name and the fields of its record it reads."""

    name: str
    reads: tuple[str, ...]
    summary: str = ""
    family: str = "arrival"
    build: Callable[..., Callable[[int], list[Any]]] | None = None  # plug-ins only


ARRIVAL_PROCESSES: dict[str, WorkloadSource] = {s.name: s for s in (
    WorkloadSource("all_at_once", (), "every request arrives at t = 0"),
    WorkloadSource("poisson", ("rate",), "exponential gaps at rate requests/s"),
    WorkloadSource("gamma", ("rate", "burstiness"), "gamma gaps (vllm bench serve --burstiness)"),
    WorkloadSource("constant", ("rate",), "evenly spaced at rate requests/s"),
    WorkloadSource("closed_loop", ("concurrency",), "a new request as soon as one of concurrency completes"),
)}

LENGTH_DISTRIBUTIONS: dict[str, WorkloadSource] = {s.name: s for s in (
    WorkloadSource("fixed", ("value",), family="length"),
    WorkloadSource("uniform", (), family="length"),
    WorkloadSource("normal", ("mean", "std"), family="length"),
    WorkloadSource("lognormal", ("mean", "sigma"), family="length"),
    WorkloadSource("histogram", ("bins", "weights"), family="length"),
)}
BUILTIN = {"arrival": ARRIVAL_PROCESSES, "length": LENGTH_DISTRIBUTIONS}


def source_names(family: str) -> tuple[str, ...]:
    """Built-in names of ``family``, then the installed plug-ins' names (not imported: a plug-in of
    the other family is refused when named)."""
    return names_with_plugins(BUILTIN[family], "workloads")


def workload_source(family: str, name: str, key: str) -> WorkloadSource:
    """The entry ``name`` of ``family`` (``arrival`` or ``length``): a built-in, else an installed
    plug-in (loaded now); else a ``ConfigError`` naming ``key`` with the closest name."""
    plugin = builtin_or_plugin(BUILTIN[family], "workloads", name, key, source_names(family))
    if name in BUILTIN[family]:
        return BUILTIN[family][name]
    if not isinstance(plugin, WorkloadSource) or not callable(plugin.build):
        raise plugin_error("workloads", name, "is not a cgbench.config.registry.workloads.WorkloadSource "
                           "with a build function")
    if plugin.family != family:
        raise plugin_error("workloads", name, f"is a {plugin.family} source, not a {family} source ({key})")
    return plugin


def with_chosen(family: str, chosen: WorkloadSource) -> dict[str, WorkloadSource]:
    """The built-in table of ``family``, plus ``chosen`` if it is a plug-in (for ``readers``)."""
    return {**BUILTIN[family], chosen.name: chosen}


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
