"""Which percentiles a summary reports: the run's ``metrics.percentiles`` (always p50, p90, p95 and
p99; p1, p5, p10, p25 and p75 on request, AIPerf's set), in effect while its metrics are computed.

``cgbench.pipeline`` computes a run's metrics inside ``percentiles_in_effect(cfg.metrics.percentiles)``;
the summaries of ``cgbench.results.metrics`` read ``active_percentiles()``. Outside that block the
default set applies, so any other caller (a test, the sensitivity re-pricing) gets the default summary.
``ALL_SUMMARY_FIELDS`` is every field a summary can hold, in order: the columns of every export (the
fields a run did not compute are empty there), so the exports of all runs share one schema."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from cgbench.config.schema import REQUIRED_PERCENTILES
from cgbench.results.names import ALL_SUMMARY_FIELDS

__all__ = ["ALL_SUMMARY_FIELDS", "active_percentiles", "percentiles_in_effect", "summary_fields"]

_ACTIVE: ContextVar[tuple[int, ...]] = ContextVar("cgbench_percentiles", default=REQUIRED_PERCENTILES)


def summary_fields(percentiles: Sequence[int] = REQUIRED_PERCENTILES) -> tuple[str, ...]:
    """A summary's fields, in order, when it reports ``percentiles``."""
    return ("count", "min", "mean", "std", *(f"p{q}" for q in sorted(percentiles)), "max")


def active_percentiles() -> tuple[int, ...]:
    """The percentiles the summaries being computed report, ascending."""
    return _ACTIVE.get()


@contextmanager
def percentiles_in_effect(percentiles: Sequence[int]) -> Iterator[None]:
    """Summaries computed inside report ``percentiles`` (``metrics.percentiles``, already validated)."""
    token = _ACTIVE.set(tuple(sorted(percentiles)))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
