"""The workload-source registry's builders half: the drawer of an arrival process or a length
distribution, a built-in's (the function its record names, ``WorkloadSource.builder``: in
``arrivals`` and ``lengths``, compiled) or an installed plug-in's (its record's ``build``), whose
draws are checked as they come: arrival times non-decreasing from 0, lengths integers within the
record's ``min`` / ``max``."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from cgbench.config.registry.plugin_source import at_most, foreign, shown
from cgbench.config.registry.plugins import plugin_error, plugin_where
from cgbench.config.registry.records import builder
from cgbench.config.registry.workloads import ARRIVAL_PROCESSES, LENGTH_DISTRIBUTIONS, workload_source
from cgbench.config.schema import ArrivalConfig, DistConfig
from cgbench.workload.arrivals import TimeDrawer
from cgbench.workload.lengths import LengthDrawer


def _plugin_drawer(family: str, name: str, key: str, record: object, rng: random.Random) -> Callable[[int], Any]:
    source = workload_source(family, name, key)
    assert source.build is not None  # workload_source refuses a plug-in without one
    draw = foreign(plugin_where("workloads", name), "build failed", source.build, record, rng)
    if not callable(draw):
        raise plugin_error("workloads", name, f"build returned a {type(draw).__name__}, not a draw(n) function")
    return draw


def _draws(name: str, draw: Callable[[int], Any], n: int) -> list:
    """The ``n`` values the plug-in's ``draw(n)`` returns: an endless iterator is read only to one
    past ``n`` (``plugin_source.at_most``), so more or fewer is one line, never a read without end."""
    where = plugin_where("workloads", name)
    values = at_most(where, "draw failed", foreign(where, "draw failed", draw, n), n)
    if len(values) != n:
        more = f"more than {n}" if len(values) > n else str(len(values))
        raise plugin_error("workloads", name, f"asked for {n} values, drew {more}")
    return values


def times_drawer(a: ArrivalConfig, rng: random.Random) -> TimeDrawer:
    """``draw(n)``: the next ``n`` arrival times of ``a.process``."""
    builtin = ARRIVAL_PROCESSES.get(a.process)
    if builtin is not None:
        drawer: TimeDrawer = builder(builtin.builder)(a, rng)
        return drawer
    draw = _plugin_drawer("arrival", a.process, "workload.arrival.process", a, rng)
    last = [0.0]

    def checked(n: int) -> list[float]:
        times = _draws(a.process, draw, n)
        for i, t in enumerate(times):
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise plugin_error("workloads", a.process, f"drew {shown(t)} (a {type(t).__name__}): arrival "
                                   "times must be numbers (seconds)")
            try:
                t = times[i] = float(t)
            except OverflowError:  # an integer past the float range
                t = math.inf
            if not (math.isfinite(t) and t >= last[0]):
                raise plugin_error("workloads", a.process, f"drew arrival time {t!r} after {last[0]!r}: "
                                   "times must be finite and non-decreasing from 0")
            last[0] = t
        return times

    return checked


def lengths_drawer(d: DistConfig, rng: random.Random) -> LengthDrawer:
    """``draw(n)``: the next ``n`` lengths of ``d.dist``."""
    builtin = LENGTH_DISTRIBUTIONS.get(d.dist)
    if builtin is not None:
        drawer: LengthDrawer = builder(builtin.builder)(d, rng)
        return drawer
    draw = _plugin_drawer("length", d.dist, "workload.*_len.dist", d, rng)

    def checked(n: int) -> list[int]:
        lengths = _draws(d.dist, draw, n)
        for x in lengths:
            if isinstance(x, bool) or not isinstance(x, int) or not d.min <= x <= d.max:
                raise plugin_error("workloads", d.dist, f"drew length {shown(x)}: lengths must be integers within "
                                   f"min {d.min} and max {d.max}")
        return lengths

    return checked


def arrival_times(a: ArrivalConfig, n: int, rng: random.Random) -> list[float]:
    """The first ``n`` arrival times of ``a.process``, non-decreasing, starting at 0.0 (``all_at_once``
    and ``closed_loop`` give zeros: closed-loop times are set when released). ``a`` is trusted as
    validated (``cgbench.config.schema.validate``): the rate of an open-loop process is > 0."""
    return times_drawer(a, rng)(n)


def sample_lengths(d: DistConfig, n: int, rng: random.Random, key: str = "length") -> list[int]:
    """Draw ``n`` token lengths from ``d`` using ``rng``. ``d`` is trusted as validated
    (``cgbench.config.schema.check_dist``); ``key`` is kept for callers that name the distribution."""
    return lengths_drawer(d, rng)(n)
