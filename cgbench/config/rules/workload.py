"""``workload.*``: the arrival process, the trace options, the prefix model, the length distributions.

A source's own rule is its record's ``check`` (``config/registry/workloads.py``); here are the rules
every source shares (a distribution's ``min`` / ``max``; an open-loop process's rate)."""

from __future__ import annotations

from typing import Any

from cgbench.config.registry.traces import ARRIVAL_UNITS, trace_format
from cgbench.config.registry.workloads import check_source, workload_source
from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require


def check_workload(cfg: Any) -> None:
    """The rules of ``cfg.workload``."""
    w = cfg.workload
    _require(w.num_requests >= 1, "workload.num_requests", f"must be >= 1, got {w.num_requests}")
    source = workload_source("arrival", w.arrival.process, "workload.arrival.process")
    if "rate" in source.reads and w.trace is None:  # an open-loop process
        _require(w.arrival.rate > 0, "workload.arrival.rate",
                 f"must be > 0 for process={w.arrival.process}, got {w.arrival.rate}")
    check_source(source, w.arrival, "workload.arrival")
    _require(w.time_scale > 0, "workload.time_scale", f"must be > 0, got {w.time_scale}")
    check_trace_options(w)
    pm = w.prefix
    _require(pm.system_prompts >= 0, "workload.prefix.system_prompts", f"must be >= 0, got {pm.system_prompts}")
    _require(pm.system_prompt_tokens >= 0, "workload.prefix.system_prompt_tokens",
             f"must be >= 0, got {pm.system_prompt_tokens}")
    _require(pm.session_turns >= 1, "workload.prefix.session_turns", f"must be >= 1, got {pm.session_turns}")
    _require(pm.system_prompts == 0 or pm.system_prompt_tokens >= 1, "workload.prefix.system_prompt_tokens",
             "must be >= 1 with workload.prefix.system_prompts > 0")
    _require(not (pm.is_set and w.trace), "workload.prefix",
             "describes generated workloads; a trace brings its own prefix blocks (hash_ids)")
    check_dist(w.prompt_len, "workload.prompt_len")
    check_dist(w.output_len, "workload.output_len")


def check_dist(d: Any, key: str) -> None:
    source = workload_source("length", d.dist, f"{key}.dist")  # a built-in or an installed plug-in, else did-you-mean
    _require(d.min >= 1, f"{key}.min", f"must be >= 1, got {d.min}")
    _require(d.max >= d.min, f"{key}.max", f"must be >= {key}.min ({d.min}), got {d.max}")
    check_source(source, d, key)


def check_trace_options(w: Any) -> None:
    """``workload.trace_format``, ``trace_columns``, ``trace_arrival_unit`` and ``window``."""
    if w.trace_format is not None:
        trace_format(w.trace_format)
    if w.trace_arrival_unit is not None:
        _check_choice(w.trace_arrival_unit, ARRIVAL_UNITS, "workload.trace_arrival_unit")
    c = w.trace_columns
    if c.is_set:
        for key in ("arrival", "prompt", "output"):
            _require(bool(getattr(c, key)), f"workload.trace_columns.{key}",
                     "names the trace's field of each request's "
                     f"{dict(arrival='arrival time', prompt='prompt tokens', output='output tokens')[key]}: "
                     "trace_columns needs arrival, prompt and output")
        _require(c.block_tokens >= 1, "workload.trace_columns.block_tokens", f"must be >= 1, got {c.block_tokens}")
    win = w.window
    _require(not (win.by_time and win.by_rows), "workload.window",
             "a window is by time (start_s, end_s) or by rows (first, last), not both")
    if win.start_s is not None:
        _require(win.start_s >= 0, "workload.window.start_s", f"must be >= 0, got {win.start_s}")
    if win.end_s is not None:
        _require(win.end_s > (win.start_s or 0.0), "workload.window.end_s",
                 f"must be > workload.window.start_s ({win.start_s or 0.0:g}), got {win.end_s}")
    if win.first is not None:
        _require(win.first >= 0, "workload.window.first", f"must be >= 0, got {win.first}")
    if win.last is not None:
        _require(win.last >= (win.first or 0), "workload.window.last",
                 f"must be >= workload.window.first ({win.first or 0}), got {win.last}")
