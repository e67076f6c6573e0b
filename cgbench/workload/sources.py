"""The workload-source registry's builders half: the drawer of an arrival process or a length
distribution, the built-ins' (``arrivals.arrival_drawer``, ``lengths.length_drawer``, compiled) or an
installed plug-in's (``cgbench.config.registry.workloads``), whose draws are checked as they come:
arrival times non-decreasing from 0, lengths integers within the record's ``min`` / ``max``."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from cgbench.config.registry.plugins import plugin_error
from cgbench.config.registry.workloads import ARRIVAL_PROCESSES, LENGTH_DISTRIBUTIONS, workload_source
from cgbench.config.schema import ArrivalConfig, DistConfig
from cgbench.workload.arrivals import TimeDrawer, arrival_drawer
from cgbench.workload.lengths import LengthDrawer, length_drawer


def _plugin_drawer(family: str, name: str, key: str, record: object, rng: random.Random) -> Callable[[int], list]:
    source = workload_source(family, name, key)
    assert source.build is not None  # workload_source refuses a plug-in without one
    try:
        return source.build(record, rng)
    except Exception as e:  # foreign code: name the plug-in, no traceback
        raise plugin_error("workloads", name, f"build failed: {type(e).__name__}: {e}") from None


def _draws(name: str, draw: Callable[[int], list], n: int) -> list:
    try:
        values = list(draw(n))
    except Exception as e:
        raise plugin_error("workloads", name, f"draw failed: {type(e).__name__}: {e}") from None
    if len(values) != n:
        raise plugin_error("workloads", name, f"asked for {n} values, drew {len(values)}")
    return values


def times_drawer(a: ArrivalConfig, rng: random.Random) -> TimeDrawer:
    """``draw(n)``: the next ``n`` arrival times of ``a.process``."""
    if a.process in ARRIVAL_PROCESSES:
        return arrival_drawer(a, rng)
    draw = _plugin_drawer("arrival", a.process, "workload.arrival.process", a, rng)
    last = [0.0]

    def checked(n: int) -> list[float]:
        times = [float(t) for t in _draws(a.process, draw, n)]
        for t in times:
            if not (math.isfinite(t) and t >= last[0]):
                raise plugin_error("workloads", a.process, f"drew arrival time {t!r} after {last[0]!r}: "
                                   "times must be finite and non-decreasing from 0")
            last[0] = t
        return times

    return checked


def lengths_drawer(d: DistConfig, rng: random.Random) -> LengthDrawer:
    """``draw(n)``: the next ``n`` lengths of ``d.dist``."""
    if d.dist in LENGTH_DISTRIBUTIONS:
        return length_drawer(d, rng)
    draw = _plugin_drawer("length", d.dist, "workload.*_len.dist", d, rng)

    def checked(n: int) -> list[int]:
        lengths = _draws(d.dist, draw, n)
        for x in lengths:
            if isinstance(x, bool) or not isinstance(x, int) or not d.min <= x <= d.max:
                raise plugin_error("workloads", d.dist, f"drew length {x!r}: lengths must be integers within "
                                   f"min {d.min} and max {d.max}")
        return lengths

    return checked
