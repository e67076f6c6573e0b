"""A sweep as a table for plotting: one record per finished point (its settings and numeric
metrics), ``--filter`` applied, repeats averaged, and the choice of x / hue / row / col keys."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgbench.config.overrides import split_override
from cgbench.config.schema import ConfigError
from cgbench.results.names import FRACTION, flatten, label, metric

RATE_KEY = "workload.arrival.rate"
# Axis labels of settings (metrics get theirs, with units, from the registry).
SETTING_LABELS = {RATE_KEY: "arrival rate (req/s)", "seed": "seed"}


@dataclass
class Record:
    params: dict[str, str]  # every override key of the point -> its value as given
    metrics: dict[str, float]  # flattened numeric metrics (dotted names)
    repeats: int = 1


@dataclass
class PlotSpec:
    """What ``cgbench plot`` was asked for; None = chosen from the sweep."""

    x: str | None = None
    y: list[str] = field(default_factory=list)
    hue: str | None = None
    row: str | None = None
    col: str | None = None
    filters: dict[str, str] = field(default_factory=dict)
    slo: dict[str, float] = field(default_factory=dict)


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    """``key=value`` options (``--filter policy=megatron``) as a dict; ConfigError naming the option."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"{option}: {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def parse_slo(items: list[str]) -> dict[str, float]:
    out = {}
    for key, value in parse_pairs(items, "--slo").items():
        if metric(key) is None:
            raise ConfigError(f"--slo: {key!r} is not a metric (e.g. ttft_ms.p99=1000)")
        try:
            out[key] = float(value)
        except ValueError:
            raise ConfigError(f"--slo: {key}={value!r} is not a number") from None
    return out


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in flatten(metrics) if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_records(sweep_dir: Path) -> tuple[list[Record], list[str], dict[str, Any]]:
    """(records of finished points, the sweep's axis keys in order, the first point's config)."""
    from cgbench.analysis.sweep.run import DONE, load_index
    from cgbench.results.document import load_result

    index = load_index(sweep_dir)
    records, config = [], {}
    for p in index["points"]:
        if p.get("status") != DONE:
            continue
        doc = load_result(Path(sweep_dir) / p["file"])
        config = config or (doc.get("config") or {})
        records.append(Record(dict(split_override(o) for o in p["overrides"]), _numbers(doc["metrics"])))
    if not records:  # worded as compare's refusal (docs/sweeps.md)
        failed = [p for p in index["points"] if p.get("status") == "failed"]
        if failed and len(failed) == len(index["points"]):
            raise ConfigError(f"nothing to plot in {sweep_dir}: every point failed ({len(failed)} point"
                              f"{'s' if len(failed) != 1 else ''}; {failed[0].get('error') or 'failed'})")
        raise ConfigError(f"nothing to plot in {sweep_dir}: no point finished ({len(index['points'])} points)")
    keys = list(dict.fromkeys(k for r in records for k in r.params))
    return records, keys, config


def apply_filters(records: list[Record], filters: dict[str, str]) -> list[Record]:
    for key, value in filters.items():
        known = {r.params.get(key) for r in records}
        if known == {None}:
            raise ConfigError(f"--filter: {key!r} is not a key of this sweep")
        records = [r for r in records if r.params.get(key) == value]
        if not records:
            raise ConfigError(f"--filter {key}={value}: no point has it (values: "
                              f"{', '.join(sorted(v for v in known if v is not None))})")
    return records


def varying(records: list[Record], keys: list[str]) -> list[str]:
    return [k for k in keys if len({r.params.get(k) for r in records}) > 1]


def average_repeats(records: list[Record], keep: list[str]) -> list[Record]:
    """Points that differ only in keys outside ``keep`` (seeds) averaged into one record."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for r in records:
        groups[tuple(r.params.get(k, "") for k in keep)].append(r)
    out = []
    for key, rs in groups.items():
        names = set.intersection(*(set(r.metrics) for r in rs))
        avg = {n: sum(r.metrics[n] for r in rs) / len(rs) for n in names}
        out.append(Record(dict(zip(keep, key, strict=True)), avg, len(rs)))
    return out


def ordered_values(records: list[Record], key: str) -> list[str]:
    """A key's values in sweep order, numbers sorted numerically."""
    values = list(dict.fromkeys(r.params.get(key, "") for r in records))
    try:
        return sorted(values, key=float)
    except ValueError:
        return values


def compound(params: dict[str, str], keys: list[str]) -> str:
    """Several keys as one label: ``chunked_prefill=True kv_blocks=600``; one key: its value."""
    if len(keys) == 1:
        return params.get(keys[0], "")
    return " ".join(f"{k.rsplit('.', 1)[-1]}={params.get(k, '')}" for k in keys)


def facet_title(params: dict[str, str], keys: list[str], per_line: int = 2) -> str:
    """``model=hybrid kv_blocks=600`` for a facet's title, ``per_line`` keys to a line."""
    items = [f"{k.rsplit('.', 1)[-1]}={params.get(k, '')}" for k in keys]
    return "\n".join(" ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


def setting_label(keys: list[str]) -> str:
    if len(keys) == 1:
        return SETTING_LABELS.get(keys[0], keys[0])
    return " x ".join(k.rsplit(".", 1)[-1] for k in keys)


def metric_label(name: str) -> str:
    """An axis label with its unit from the registry (fractions are drawn as %)."""
    m = metric(name)
    if m is None:
        raise ConfigError(f"--y: {name!r} is not a metric (e.g. eager_step_fraction, ttft_ms.p99)")
    text = label(name)
    if m.label.endswith(f" {m.unit}") and text.endswith(f" ({m.unit})"):  # "output tok/s (tok/s)"
        text = f"{m.label[:-len(m.unit)].strip()} throughput ({m.unit})"
    return text


def scaled(name: str, value: float) -> float:
    m = metric(name)
    return 100.0 * value if m is not None and m.unit == FRACTION else value


def spans_decades(values: list[float]) -> bool:
    """Positive values whose largest is at least 10x the smallest: a log axis shows them all."""
    pos = [v for v in values if v > 0 and math.isfinite(v)]
    return len(pos) == len([v for v in values if math.isfinite(v)]) and len(pos) > 1 and max(pos) >= 10 * min(pos)


@dataclass
class Roles:
    x: list[str]
    hue: str | None
    row: list[str]
    col: list[str]


def choose_roles(spec: PlotSpec, vary: list[str], *, prefer_x: tuple[str, ...]) -> Roles:
    """Assign the varying keys: the ones the user named, then hue = policy, x = the first of
    ``prefer_x`` that varies, row = model; keys left over join the column facets (or x when a
    column key was given). Every varying key ends up somewhere, so no two points share a bar."""
    for opt, key in (("--x", spec.x), ("--hue", spec.hue), ("--row", spec.row), ("--col", spec.col)):
        if key is not None and key not in vary:
            raise ConfigError(f"{opt}: {key!r} does not vary in this sweep (varying: {', '.join(vary) or 'none'})")
    named = [k for k in (spec.x, spec.hue, spec.row, spec.col) if k is not None]
    if len(set(named)) != len(named):
        raise ConfigError("--x, --hue, --row and --col must name different keys")
    free = [k for k in vary if k not in named]

    def take(*candidates: str) -> str | None:
        for c in candidates:
            if c in free:
                free.remove(c)
                return c
        return None

    hue = spec.hue if spec.hue is not None else take("policy")
    row = [spec.row] if spec.row is not None else [k for k in [take("model")] if k]
    x = [spec.x] if spec.x is not None else [k for k in [take(*prefer_x) or (free.pop(0) if free else None)] if k]
    col = [spec.col] if spec.col is not None else []
    if free:
        (x if spec.col is not None else col).extend(free)
    return Roles(x, hue, row, col)
