"""The trace-format registry's config half: every ``workload.trace_format``, the fields of a record
it reads and the arrival unit its definition fixes. The reader is ``cgbench.workload.trace``.

A new format is one ``TraceFormat`` here: detection (the first record holds all of ``fields``),
parsing, units, windows and the config checks derive from it. ``columns`` is the format of
``workload.trace_columns`` (any CSV / JSONL trace, its fields named by the user).

Arrival units (``workload.trace_arrival_unit``): ``s``, ``ms``, ``us`` (numbers, kept as recorded
from 0), ``epoch_s``, ``epoch_ms``, ``epoch_us`` (numbers counted from 1970: the first arrival is
subtracted) and ``datetime`` (ISO wall-clock text, ``2023-11-16 18:15:46.6805900``: the first
arrival is subtracted). A format with a fixed ``unit`` reads no ``trace_arrival_unit`` but its epoch
variant (``epoch_ms`` for Mooncake's ``ms``: a trace recorded with epoch timestamps).
"""

from __future__ import annotations

from dataclasses import dataclass

from cgbench.errors import ConfigError, did_you_mean

ARRIVAL_UNITS = ("s", "ms", "us", "epoch_s", "epoch_ms", "epoch_us", "datetime")
PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "epoch_s": 1.0, "epoch_ms": 1e3, "epoch_us": 1e6,
              "datetime": 1.0}  # units in a second: a value / this is seconds
CONTAINERS = ("csv", "jsonl")


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: the record's fields (arrival, prompt tokens, output tokens and, if the format
    has them, prefix-block hashes of ``block_tokens`` tokens each), the containers it comes in and the
    arrival unit its definition fixes (None: ``s`` unless detected or set otherwise)."""

    name: str
    arrival: str
    prompt: str
    output: str
    containers: tuple[str, ...] = CONTAINERS
    unit: str | None = None
    hash_ids: str | None = None
    block_tokens: int = 0
    summary: str = ""

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.arrival, self.prompt, self.output)


TRACE_FORMATS: dict[str, TraceFormat] = {f.name: f for f in (
    TraceFormat("cgbench", "arrival_s", "prompt_tokens", "output_tokens",
                summary="cgbench's own: arrival_s (seconds), prompt_tokens, output_tokens; CSV or JSONL"),
    TraceFormat("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", ("csv",), unit="datetime",
                summary="Azure LLM inference trace: wall-clock TIMESTAMP, ContextTokens, GeneratedTokens; CSV"),
    TraceFormat("mooncake", "timestamp", "input_length", "output_length", ("jsonl",), unit="ms",
                hash_ids="hash_ids", block_tokens=512,
                summary="Mooncake: timestamp (ms from the start), input_length, output_length, hash_ids "
                        "(512-token prefix blocks); JSONL"),
)}
COLUMNS = "columns"  # the format of workload.trace_columns


def counted_unit(unit: str) -> str | None:
    """The epoch unit of ``unit`` (``ms`` -> ``epoch_ms``: the same scale, counted from 1970, so the
    first arrival is subtracted); a format whose unit is ``ms`` reads ``epoch_ms`` too."""
    return f"epoch_{unit}" if unit in ("s", "ms", "us") else None


def trace_format(name: str) -> TraceFormat:
    """The native format ``name``, else a ConfigError naming ``workload.trace_format``."""
    spec = TRACE_FORMATS.get(name)
    if spec is None:
        names = tuple(TRACE_FORMATS)
        raise ConfigError(f"workload.trace_format: {name!r} is not one of {', '.join(names)} (or set "
                          f"workload.trace_columns for another trace){did_you_mean(str(name), names)}")
    return spec


def detect_format(fields: set[str] | list[str]) -> TraceFormat | None:
    """The first native format whose fields the first record (a CSV header, a JSON object's keys) holds."""
    present = set(fields)
    return next((f for f in TRACE_FORMATS.values() if set(f.fields) <= present), None)
