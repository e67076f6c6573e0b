"""The type of every exported column, fixed by what the column is, never guessed from its values: a
metric column's from the metric registry (``cgbench.results.names``: its unit and kind), a request's
or a step's from its table. So the files of every run and every sweep share one schema (a one-rank
run, a data- or expert-parallel one, sweeps with other axes) and concatenate into one dataset: ranks
are integers in every run, per-rank lists are lists, and a value that does not exist is a null.

Types: ``int64``, ``float64``, ``bool``, ``string``, and ``list<int64>`` / ``list<float64>`` (per-rank
metrics; the CSV writes them as JSON text). ``columns.csv`` names each column's type with its unit and
meaning, and the Parquet files carry the same in each field's metadata."""

from __future__ import annotations

from cgbench.engine.ep import EP_PREFILL, EP_PREFILL_OTHER
from cgbench.engine.scheduler import NOT_CAPTURED
from cgbench.grids.shapes import MISS_REASONS
from cgbench.results.names import (
    ALL_SUMMARY_FIELDS,
    FLAG,
    FRACTION,
    METRICS,
    MS,
    REGISTRY,
    REQ_S,
    TEXT,
    TOK_S,
    Metric,
    S,
    metric,
)

INT64, FLOAT64, BOOL, STRING = "int64", "float64", "bool", "string"
LIST_INT64, LIST_FLOAT64 = "list<int64>", "list<float64>"
TYPES = (INT64, FLOAT64, BOOL, STRING, LIST_INT64, LIST_FLOAT64)

_FLOAT_UNITS = frozenset({FRACTION, MS, S, TOK_S, REQ_S})
# registered in a count or token unit, but a ratio of two (a mean per rank, per prefill, per step)
RATIO_METRICS = frozenset({"ep.load_imbalance", "dp.request_imbalance", "dp.token_imbalance",
                           "prefix_cache.computed_tokens_per_prefill", "prefix_cache.span_tokens_per_prefill",
                           "spec.tokens_per_step", "spec.expected_tokens_per_step"})
# metrics whose unit is not the type of their value
_OWN_TYPES = {"max_cg_wait_request": INT64}  # a request id (unit text: it names a request)

# Every key a keyed metric can hold, in this order: each is a column of every export (0 where a run
# counted none). Sources: the grid's miss reasons (grids/shapes.py MISS_REASONS), the pad guard
# (engine/scheduler.py), a grid graph the backend did not capture (NOT_CAPTURED), expert parallelism's
# prefill steps (engine/ep.py: a rank's own, another rank's under nccl/te); the step kinds of
# results/metrics.py; the engine's fail reasons (engine/core.py: arrival checks, an evicted prompt).
KEYED_KEYS: dict[str, tuple[str, ...]] = {
    "eager_steps_by_reason": (*MISS_REASONS, "pad_guard", NOT_CAPTURED, EP_PREFILL, EP_PREFILL_OTHER),
    "step_kinds": ("decode_only", "prefill_only", "mixed"),
    "requests.failed_by_reason": ("prompt_exceeds_max_sequence_length", "prompt_exceeds_max_tokens",
                                  "kv_block_overflow", "evicted_prompt_exceeds_max_tokens"),
}


def _scalar_type(m: Metric) -> str:
    if m.name in _OWN_TYPES:
        return _OWN_TYPES[m.name]
    if m.unit == TEXT:
        return STRING
    if m.unit == FLAG:
        return BOOL
    return FLOAT64 if m.unit in _FLOAT_UNITS or m.name in RATIO_METRICS else INT64


def metric_type(column: str) -> str:
    """The type of a metric column: ``ttft_ms.p99`` (a summary's field: ``count`` an integer, the
    statistics doubles), ``eager_steps_by_reason.shape`` (a count), ``dp.rank_steps`` (a list)."""
    m = REGISTRY.get(column)
    if m is not None:
        if m.per_rank:
            return LIST_FLOAT64 if _scalar_type(m) == FLOAT64 else LIST_INT64
        return _scalar_type(m)
    head, _, tail = column.rpartition(".")
    parent = REGISTRY.get(head)
    if parent is not None and parent.summary and tail in ALL_SUMMARY_FIELDS:
        return INT64 if tail == "count" else FLOAT64
    if parent is not None and parent.keyed:
        return INT64
    if metric(column) is None:
        raise KeyError(f"{column}: not a registered metric")
    return FLOAT64


def metric_columns(extra_keys: dict[str, set[str]] | None = None) -> tuple[str, ...]:
    """Every metric column, in the registry's order: a summary as each field any summary can hold, a
    keyed record as its known keys (``KEYED_KEYS``) and then any other key of ``extra_keys`` (a
    plug-in's reason, sorted), every other metric by its name."""
    out: list[str] = []
    for m in METRICS:
        if m.summary:
            out.extend(f"{m.name}.{f}" for f in ALL_SUMMARY_FIELDS)
        elif m.keyed:
            known = KEYED_KEYS.get(m.name, ())
            others = sorted((extra_keys or {}).get(m.name, set()) - set(known))
            out.extend(f"{m.name}.{k}" for k in (*known, *others))
        else:
            out.append(m.name)
    return tuple(out)


# the per-request and per-step columns (cgbench.results.export: REQUEST_COLUMNS, STEP_COLUMNS)
REQUEST_TYPES: dict[str, str] = {
    "arrival_s": FLOAT64, "prompt_tokens": INT64, "output_tokens": INT64, "id": INT64, "outcome": STRING,
    "fail_reason": STRING, "generated": INT64, "arrival_step": INT64, "first_admit_step": INT64,
    "first_token_step": INT64, "finish_step": INT64, "first_token_s": FLOAT64, "finish_s": FLOAT64,
    "chunks": INT64, "deferrals": INT64, "max_cg_wait_iters": INT64, "evictions": INT64, "pauses": INT64,
    "queue_wait_iters": INT64, "ttft_steps": INT64, "e2e_steps": INT64, "ttft_ms": FLOAT64, "e2e_ms": FLOAT64,
    "tpot_ms": FLOAT64,
}
STEP_TYPES: dict[str, str] = {
    "step": INT64, "t_s": FLOAT64, "dt_s": FLOAT64, "tokens": INT64, "prefills": INT64, "decodes": INT64,
    "graph_tokens": INT64, "graph_prefills": INT64, "graph_decodes": INT64, "eager_reason": STRING,
    "admitted": INT64, "admitted_tokens": INT64, "admitted_ids": STRING, "deferred": INT64, "queue_len": INT64,
    "paused": INT64, "rank": INT64,
}
POINT_TYPES: dict[str, str] = {"point": INT64, "status": STRING, "file": STRING}


def column_type(table: str, column: str) -> str:
    """The type of ``column`` of table ``table`` (requests, steps or metrics); a sweep axis is text."""
    own = {"requests": REQUEST_TYPES, "steps": STEP_TYPES}.get(table, {})
    if column in own:
        return own[column]
    if column in POINT_TYPES:
        return POINT_TYPES[column]
    try:
        return metric_type(column)
    except KeyError:
        return STRING  # a sweep axis: its values as the overrides wrote them
