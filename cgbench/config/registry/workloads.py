"""The workload-source registry: one record (``WorkloadSource``) per arrival process
(``workload.arrival.process``) and length distribution (``workload.*_len.dist``), the only place a
built-in is named.

A record holds the source's name, its summary, the fields of its config record it reads (``fields``:
a dataclass of them, named and typed as in ``schema.ArrivalConfig`` / ``schema.DistConfig``, which a
test checks; ``reads`` derives from it), its own rule (``check``: the record and its key, e.g.
``workload.prompt_len``; raises ``ConfigError`` naming ``<key>.<field>``) and its builder, named
``"module:function"`` (``builder``) so that the config layer lists it without importing the
generators: ``cgbench.workload.sources`` resolves it (``records.builder``) and calls it with the
record and a ``random.Random``; it returns ``draw(n)``. Validation and ``schema.unread_keys`` derive
from ``reads``: a process that reads ``rate`` is an open-loop process (a rate > 0 is required without
a trace, ``rules.workload``). The built-ins' builders are in ``cgbench.workload.arrivals`` and
``cgbench.workload.lengths`` (compiled modules). Trace files: ``cgbench.workload.trace``, their
formats in ``cgbench.config.registry.traces``.

A plug-in (entry-point group ``cgbench.workloads``) is a ``WorkloadSource`` with its ``family``
(``arrival`` or ``length``), its ``reads`` (a tuple of field names, or ``fields``) and a ``build``:
``(record, random.Random) -> draw``, where ``draw(n)`` returns the next ``n`` values (arrival times in
seconds, non-decreasing from 0; or lengths, integers within the record's ``min`` / ``max``), drawing
only from the generator it was given; a ``check`` of its own is optional. The plug-in's draws are
checked as they come (``cgbench.workload.sources``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cgbench.config.registry.plugin_source import foreign
from cgbench.config.registry.plugins import builtin_or_plugin, names_with_plugins, plugin_error, plugin_where
from cgbench.config.registry.records import field_names
from cgbench.config.rules.base import require
from cgbench.errors import ConfigError

FAMILIES = ("arrival", "length")


@dataclass(frozen=True)
class WorkloadSource:
    """One arrival process or length distribution. ``reads``: the fields of its record it reads,
    derived from ``fields`` (a dataclass of them) when that is given; ``check``: ``(record, key)``,
    its own rule; ``builder``: a built-in's ``"module:function"``, ``(record, random.Random) ->
    draw(n)``; ``build``: a plug-in's drawer function, the same call."""

    name: str
    reads: tuple[str, ...] = ()
    summary: str = ""
    family: str = "arrival"
    build: Callable[..., Callable[[int], list[Any]]] | None = None  # plug-ins
    fields: type | None = None
    check: Callable[[Any, str], None] | None = None
    builder: str = ""  # built-ins

    def __post_init__(self) -> None:
        if self.fields is not None:
            if self.reads:
                raise TypeError(f"WorkloadSource {self.name!r}: give reads or fields, not both")
            object.__setattr__(self, "reads", field_names(self.fields))


# The fields each built-in reads (beyond ``process``; a length distribution's beyond ``dist``, ``min``
# and ``max``, which every one reads), as ``schema.ArrivalConfig`` / ``schema.DistConfig`` type them.


@dataclass
class Rate:
    rate: float


@dataclass
class GammaGaps:
    rate: float
    burstiness: float


@dataclass
class ClosedLoop:
    concurrency: int


@dataclass
class FixedValue:
    value: int


@dataclass
class Normal:
    mean: float
    std: float


@dataclass
class LogNormal:
    mean: float
    sigma: float


@dataclass
class Histogram:
    bins: list[int]
    weights: list[float]


def _check_gamma(a: Any, key: str) -> None:
    require(a.burstiness > 0, f"{key}.burstiness", "must be > 0")


def _check_closed_loop(a: Any, key: str) -> None:
    require(a.concurrency >= 1, f"{key}.concurrency", "must be >= 1 for process=closed_loop")


def _check_fixed(d: Any, key: str) -> None:
    require(d.value >= 1, f"{key}.value", f"must be >= 1, got {d.value}")


def _check_mean(d: Any, key: str) -> None:
    require(d.mean > 0, f"{key}.mean", f"must be > 0 for dist={d.dist}, got {d.mean}")


def _check_normal(d: Any, key: str) -> None:
    _check_mean(d, key)
    require(d.std >= 0, f"{key}.std", f"must be >= 0, got {d.std}")


def _check_lognormal(d: Any, key: str) -> None:
    _check_mean(d, key)
    require(d.sigma > 0, f"{key}.sigma", f"must be > 0 for dist=lognormal, got {d.sigma}")


def _check_histogram(d: Any, key: str) -> None:
    require(len(d.weights) >= 1, f"{key}.weights", "needs at least one weight")
    require(len(d.bins) == len(d.weights) + 1, f"{key}.bins",
            f"needs len(weights)+1 = {len(d.weights) + 1} edges, got {len(d.bins)}")
    require(all(w >= 0 for w in d.weights) and sum(d.weights) > 0, f"{key}.weights",
            "must be non-negative with a positive sum")
    require(all(a < b for a, b in zip(d.bins, d.bins[1:], strict=False)) and d.bins[0] >= 1, f"{key}.bins",
            "must be strictly increasing and start at >= 1")


_ARRIVALS = "cgbench.workload.arrivals"
_LENGTHS = "cgbench.workload.lengths"

ARRIVAL_PROCESSES: dict[str, WorkloadSource] = {s.name: s for s in (
    WorkloadSource("all_at_once", summary="every request arrives at t = 0", builder=f"{_ARRIVALS}:zero_times"),
    WorkloadSource("poisson", summary="exponential gaps at rate requests/s", fields=Rate,
                   builder=f"{_ARRIVALS}:poisson_times"),
    WorkloadSource("gamma", summary="gamma gaps (vllm bench serve --burstiness)", fields=GammaGaps,
                   check=_check_gamma, builder=f"{_ARRIVALS}:gamma_times"),
    WorkloadSource("constant", summary="evenly spaced at rate requests/s", fields=Rate,
                   builder=f"{_ARRIVALS}:constant_times"),
    WorkloadSource("closed_loop", summary="a new request as soon as one of concurrency completes",
                   fields=ClosedLoop, check=_check_closed_loop, builder=f"{_ARRIVALS}:zero_times"),
)}

LENGTH_DISTRIBUTIONS: dict[str, WorkloadSource] = {s.name: s for s in (
    WorkloadSource("fixed", family="length", fields=FixedValue, check=_check_fixed,
                   builder=f"{_LENGTHS}:fixed_lengths"),
    WorkloadSource("uniform", family="length", builder=f"{_LENGTHS}:uniform_lengths"),
    WorkloadSource("normal", family="length", fields=Normal, check=_check_normal,
                   builder=f"{_LENGTHS}:normal_lengths"),
    WorkloadSource("lognormal", family="length", fields=LogNormal, check=_check_lognormal,
                   builder=f"{_LENGTHS}:lognormal_lengths"),
    WorkloadSource("histogram", family="length", fields=Histogram, check=_check_histogram,
                   builder=f"{_LENGTHS}:histogram_lengths"),
)}
BUILTIN = {"arrival": ARRIVAL_PROCESSES, "length": LENGTH_DISTRIBUTIONS}


def source_names(family: str) -> tuple[str, ...]:
    """Built-in names of ``family``, then the installed plug-ins' names (not imported: a plug-in of
    the other family is refused when named)."""
    return names_with_plugins(BUILTIN[family], "workloads")


def workload_source(family: str, name: str, key: str) -> WorkloadSource:
    """The entry ``name`` of ``family`` (``arrival`` or ``length``): a built-in, else an installed
    plug-in (loaded now); else a ``ConfigError`` naming ``key`` with the closest name."""
    plugin = builtin_or_plugin(BUILTIN[family], "workloads", name, key, lambda: source_names(family))
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


def check_source(source: WorkloadSource, record: Any, key: str) -> None:
    """``source``'s own rule on ``record`` (its config record at ``key``), if it has one; a
    plug-in's through the plug-in boundary (a ``ConfigError`` naming the key is its contract)."""
    if source.check is None:
        return
    if source.name in BUILTIN[source.family] and BUILTIN[source.family][source.name] is source:
        source.check(record, key)
    else:
        foreign(plugin_where("workloads", source.name), "check failed", source.check, record, key,
                passes=(ConfigError,))


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
