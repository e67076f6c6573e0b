"""The calibrated cost model: a table of measured step times, interpolated.

A JSON table of measured step times (schema ``cgbench.backends.torch_calibration/1``, see ``docs/cost-model.md``)
with one list of points per mode (graphed, eager). Per mode, points are grouped into classes that
are interpolated along ``T``: one class per tokens-per-request ratio for decode-only points (``D``
moves with ``T``), one per ``(P, D)`` for the others; within a class, points of the same ``T`` form
a knot. A query takes the nearest class (decode-only to decode-only; mixed by distance in
``log2(1 + P)`` and ``log2(1 + D)``), interpolates linearly in ``ctx`` within each knot and in ``T``
between the two bracketing knots, and corrects for the remaining ``P`` / ``D`` difference with a
non-negative least-squares fit ``ms ≈ c0 + cT·T + cP·P + cD·D + cctx·ctx`` of the mode's points.
Outside a class's range (in ``T`` or ``ctx``) it extrapolates linearly from the end point with the
fitted slope. Predictions are exact on measured points (duplicates are averaged), monotone where
the data are, exact everywhere for data linear in the features, and never below the fastest
measured step of the mode. A graphed query is looked up by the graph's shape (as the table records
it), an eager one by the real shape.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cgbench.config.schema import MODEL_KINDS, ConfigError
from cgbench.engine.contract import StepWork

CALIBRATION_SCHEMA = "cgbench.calibration/2"
# Earlier ids of the same table format: /1 was written as "cgbench.calibration/1", then under a
# module-path id. Version 2 only settles the id; tables with either old id load unchanged.
CALIBRATION_SCHEMAS_READ = (CALIBRATION_SCHEMA, "cgbench.calibration/1", "cgbench.backends.torch_calibration/1")


# --------------------------------------------------------------------------- calibration table


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    """One measured step: shape ``(T, P, D)`` (the graph's shape for a graphed point, the real one
    for an eager point), KV tokens attended ``ctx``, and the median step time in milliseconds."""

    tokens: int
    prefills: int
    decodes: int
    ctx: int
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"T": self.tokens, "P": self.prefills, "D": self.decodes, "ctx": self.ctx, "ms": self.ms}


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class CalibrationTable:
    """Measured step times of one model on one device (JSON schema in ``docs/cost-model.md``)."""

    model: dict[str, Any]
    device: str
    graphed: tuple[CalibrationPoint, ...]
    eager: tuple[CalibrationPoint, ...]
    torch: str | None = None
    created_at: str = field(default_factory=_utc_now)
    tp_size: int = 1
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": CALIBRATION_SCHEMA, "model": dict(self.model), "device": self.device,
                "torch": self.torch, "created_at": self.created_at, "tp_size": self.tp_size,
                "notes": self.notes, "graphed": [p.to_dict() for p in self.graphed],
                "eager": [p.to_dict() for p in self.eager]}

    def save(self, path: str | Path) -> None:
        from cgbench.safeio import write_json_atomic

        write_json_atomic(path, self.to_dict(), "calibration table")

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        from cgbench.safeio import read_json

        return cls.from_dict(read_json(path, "backend.calibration"), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<calibration>") -> CalibrationTable:
        def fail(key: str, message: str) -> ConfigError:
            return ConfigError(f"{source}: {key}: {message}")

        if not isinstance(data, dict):
            raise fail("(top level)", f"must be a JSON object, got {type(data).__name__}")
        if data.get("schema") not in CALIBRATION_SCHEMAS_READ:
            raise fail("schema", f"expected {CALIBRATION_SCHEMA!r} (or an earlier id of the same format: "
                       f"{', '.join(repr(x) for x in CALIBRATION_SCHEMAS_READ[1:])}), got {data.get('schema')!r}; "
                       "re-measure with `cgbench calibrate` to write a current table")
        model = data.get("model")
        if not isinstance(model, dict):
            raise fail("model", "must be an object with 'name' and 'kind'")
        if not isinstance(model.get("name"), str) or not model["name"]:
            raise fail("model.name", f"must be a non-empty string, got {model.get('name')!r}")
        if model.get("kind") not in MODEL_KINDS:
            raise fail("model.kind", f"must be one of {', '.join(MODEL_KINDS)}, got {model.get('kind')!r}")
        device = data.get("device")
        if not isinstance(device, str) or not device:
            raise fail("device", f"must be a non-empty string, got {device!r}")
        torch_version = data.get("torch")
        if torch_version is not None and not isinstance(torch_version, str):
            raise fail("torch", f"must be a string or null, got {torch_version!r}")
        for key in ("created_at", "notes"):
            if not isinstance(data.get(key, ""), str):
                raise fail(key, f"must be a string, got {data[key]!r}")
        tp_size = data.get("tp_size", 1)
        if not _is_int(tp_size) or tp_size < 1:
            raise fail("tp_size", f"must be an integer >= 1, got {tp_size!r}")
        modes = {mode: _parse_points(data.get(mode), mode, fail) for mode in ("graphed", "eager")}
        return cls(model=dict(model), device=device, graphed=modes["graphed"], eager=modes["eager"],
                   torch=torch_version, created_at=data.get("created_at", ""), tp_size=tp_size,
                   notes=data.get("notes", ""))


# A measured step is milliseconds to seconds: a table above these bounds is refused when it is read,
# before a run, not when the run's result turns out not to be finite (means and fits of 1e308 overflow).
MAX_STEP_MS = 1e6  # ~17 minutes
MAX_HOST_OP_US = 1e6
MAX_COUNT = 2**40  # T, P, D, ctx: the same bound as a config's sizes (cgbench.config.limits.MAX_SIZE)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_points(rows: Any, mode: str,
                  fail: Callable[[str, str], ConfigError]) -> tuple[CalibrationPoint, ...]:
    if not isinstance(rows, list) or not rows:
        raise fail(mode, "must be a non-empty list of {T, P, D, ctx, ms} objects")
    points = []
    for i, row in enumerate(rows):
        key = f"{mode}[{i}]"
        if not isinstance(row, dict):
            raise fail(key, f"must be an object, got {row!r}")
        for name, low in (("T", 1), ("P", 0), ("D", 0), ("ctx", 0)):
            if not _is_int(row.get(name)) or not low <= row[name] <= MAX_COUNT:
                raise fail(f"{key}.{name}", f"must be an integer in [{low}, {MAX_COUNT:,}], got {row.get(name)!r}")
        if row["P"] + row["D"] < 1:
            raise fail(f"{key}.P", "a step needs at least one request (P + D >= 1)")
        ms = row.get("ms")
        if not _is_number(ms) or not 0 < ms <= MAX_STEP_MS:
            raise fail(f"{key}.ms", f"must be a positive number of at most {MAX_STEP_MS:g} ms, got {ms!r}")
        points.append(CalibrationPoint(row["T"], row["P"], row["D"], row["ctx"], float(ms)))
    return tuple(points)


# --------------------------------------------------------------------------- calibrated model


def _solve(a: list[list[float]], y: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when (numerically) singular."""
    n = len(y)
    m = [row[:] + [y[i]] for i, row in enumerate(a)]
    scale = max((abs(m[i][i]) for i in range(n)), default=0.0) or 1.0
    for c in range(n):
        r = max(range(c, n), key=lambda i: abs(m[i][c]))
        if abs(m[r][c]) <= 1e-10 * scale:
            return None
        m[c], m[r] = m[r], m[c]
        for i in range(c + 1, n):
            factor = m[i][c] / m[c][c]
            for j in range(c, n + 1):
                m[i][j] -= factor * m[c][j]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def fit_nonneg_linear(rows: list[tuple[float, ...]], y: list[float]) -> tuple[float, ...]:
    """Least squares ``y ≈ c0 + Σ c_j·x_j`` with every slope ``c_j >= 0`` (the intercept is free),
    solved exactly by trying every support set of slopes (there are at most five features)."""
    k = len(rows[0])
    scales = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    xs = [[1.0] + [r[j] / scales[j] for j in range(k)] for r in rows]
    best: tuple[float, int, list[float]] | None = None
    for size in range(k + 1):
        for support in itertools.combinations(range(k), size):
            cols = [0] + [j + 1 for j in support]
            a = [[sum(x[ci] * x[cj] for x in xs) for cj in cols] for ci in cols]
            rhs = [sum(x[ci] * yi for x, yi in zip(xs, y, strict=True)) for ci in cols]
            sol = _solve(a, rhs)
            if sol is None or any(v < 0 for v in sol[1:]):
                continue
            coef = [0.0] * (k + 1)
            for ci, v in zip(cols, sol, strict=True):
                coef[ci] = v
            sse = sum((yi - sum(c * xv for c, xv in zip(coef, x, strict=True))) ** 2
                      for x, yi in zip(xs, y, strict=True))
            if best is None or sse < best[0] * (1 - 1e-12) - 1e-18:
                best = (sse, size, coef)
    assert best is not None  # the intercept-only support is never singular
    coef = best[2]
    return (coef[0], *(coef[j + 1] / scales[j] for j in range(k)))


class _Knot:
    """The points of one ``(T, P, D)``: ms as a piecewise-linear function of ctx."""

    __slots__ = ("ctx", "decodes", "ms", "prefills", "slope")

    def __init__(self, points: list[CalibrationPoint], slope: float) -> None:
        by_ctx: dict[int, list[float]] = {}
        for p in points:
            by_ctx.setdefault(p.ctx, []).append(p.ms)
        self.ctx = sorted(by_ctx)
        self.ms = [sum(by_ctx[c]) / len(by_ctx[c]) for c in self.ctx]
        self.prefills = sum(p.prefills for p in points) / len(points)
        self.decodes = sum(p.decodes for p in points) / len(points)
        self.slope = slope

    def at(self, ctx: float) -> float:
        xs = self.ctx
        if ctx <= xs[0]:
            return self.ms[0] + self.slope * (ctx - xs[0])
        if ctx >= xs[-1]:
            return self.ms[-1] + self.slope * (ctx - xs[-1])
        i = bisect.bisect_right(xs, ctx)
        w = (ctx - xs[i - 1]) / (xs[i] - xs[i - 1])
        return self.ms[i - 1] + w * (self.ms[i] - self.ms[i - 1])


# A class of points interpolated along T: ("decode", tokens per request, 0) for decode-only steps
# (D moves with T), ("mixed", P, D) otherwise.
_ClassKey = tuple[str, int, int]
# offset + Σ weight·knot(ctx): the T-interpolation of one query shape, resolved once.
_Plan = tuple[float, tuple[tuple[float, _Knot], ...]]


def _class_of(tokens: int, prefills: int, decodes: int) -> _ClassKey:
    if prefills == 0:
        return ("decode", max(tokens // max(decodes, 1), 1), 0)
    return ("mixed", prefills, decodes)


def _class_distance(query: _ClassKey, other: _ClassKey, decodes: int) -> float:
    lg = math.log2
    if query[0] == other[0] == "decode":
        return abs(lg(query[1]) - lg(other[1]))
    if query[0] == other[0] == "mixed":
        return abs(lg(1 + query[1]) - lg(1 + other[1])) + abs(lg(1 + query[2]) - lg(1 + other[2]))
    # Across kinds only as a last resort (a table without decode-only or without mixed points).
    if other[0] == "mixed":
        return 100 + lg(1 + other[1]) + abs(lg(1 + decodes) - lg(1 + other[2]))
    return 100 + lg(1 + query[1])


class _Mode:
    """Predictor for one mode (graphed or eager) of a calibration table."""

    def __init__(self, points: tuple[CalibrationPoint, ...]) -> None:
        self.coef = fit_nonneg_linear([(p.tokens, p.prefills, p.decodes, p.ctx) for p in points],
                                      [p.ms for p in points])
        grouped: dict[_ClassKey, dict[int, list[CalibrationPoint]]] = {}
        for p in points:
            key = _class_of(p.tokens, p.prefills, p.decodes)
            grouped.setdefault(key, {}).setdefault(p.tokens, []).append(p)
        self.classes = {key: (sorted(by_t), [_Knot(by_t[t], self.coef[4]) for t in sorted(by_t)])
                        for key, by_t in grouped.items()}
        self.floor = min(p.ms for p in points)
        self._plans: dict[tuple[int, int, int], _Plan] = {}

    def _nearest(self, tokens: int, prefills: int, decodes: int) -> _ClassKey:
        query = _class_of(tokens, prefills, decodes)

        def rank(key: _ClassKey) -> tuple[float, float, int, _ClassKey]:
            ts = self.classes[key][0]
            outside = max(ts[0] - tokens, tokens - ts[-1], 0)
            return _class_distance(query, key, decodes), math.log2(1 + outside), -len(ts), key

        return min(self.classes, key=rank)

    def _plan(self, tokens: int, prefills: int, decodes: int) -> _Plan:
        _, c_t, c_p, c_d, _ = self.coef
        ts, knots = self.classes[self._nearest(tokens, prefills, decodes)]
        weights: tuple[tuple[float, _Knot], ...]
        if tokens <= ts[0] or tokens >= ts[-1]:
            i = 0 if tokens <= ts[0] else len(ts) - 1
            weights = ((1.0, knots[i]),)
            offset = c_t * (tokens - ts[i])
        else:
            i = bisect.bisect_right(ts, tokens)
            w = (tokens - ts[i - 1]) / (ts[i] - ts[i - 1])
            weights = ((1.0 - w, knots[i - 1]), (w, knots[i])) if w else ((1.0, knots[i - 1]),)
            offset = 0.0
        for w, knot in weights:
            offset += w * (c_p * (prefills - knot.prefills) + c_d * (decodes - knot.decodes))
        return offset, weights

    def plan(self, tokens: int, prefills: int, decodes: int) -> _Plan:
        """The query shape's interpolation plan, resolved once and cached."""
        plan = self._plans.get((tokens, prefills, decodes))
        if plan is None:
            if len(self._plans) > 1 << 16:
                self._plans.clear()
            plan = self._plans[(tokens, prefills, decodes)] = self._plan(tokens, prefills, decodes)
        return plan

    def predict_ms(self, tokens: int, prefills: int, decodes: int, ctx: int) -> float:
        offset, weights = self.plan(tokens, prefills, decodes)
        value = offset
        for w, knot in weights:
            value += w * knot.at(ctx)
        return value if value > self.floor else self.floor

    def predictor_ms(self, tokens: int, prefills: int, decodes: int) -> Callable[[int], float]:
        """``predict_ms`` of one shape as a function of ``ctx``, its plan resolved once (the same floats)."""
        offset, weights = self.plan(tokens, prefills, decodes)
        floor = self.floor

        def predict(ctx: int) -> float:
            value = offset
            for w, knot in weights:
                value += w * knot.at(ctx)
            return value if value > floor else floor

        return predict


class CalibratedCostModel:
    """Step time interpolated from a table of measured step times (module docstring)."""

    name = "calibrated"

    def __init__(self, table: CalibrationTable) -> None:
        self.table = table
        self._graphed = _Mode(table.graphed)
        self._eager = _Mode(table.eager)

    @classmethod
    def from_file(cls, path: str | Path) -> CalibratedCostModel:
        return cls(CalibrationTable.load(path))

    def step_time(self, work: StepWork) -> float:
        if work.graph is not None:
            t, p, d = work.graph
            return self._graphed.predict_ms(t, p, d, work.context_tokens) * 1e-3
        return self._eager.predict_ms(work.tokens, work.prefills, work.decodes, work.context_tokens) * 1e-3

    def stepper(self, work: StepWork) -> Callable[[int, int], float]:
        """``f(context_tokens, attention_pairs)``: ``step_time`` for steps of ``work``'s shape (a decode
        stretch), the shape's plan resolved once; the same floats. A measured time has no pairs term."""
        if work.graph is not None:
            t, p, d = work.graph
            predict = self._graphed.predictor_ms(t, p, d)
        else:
            predict = self._eager.predictor_ms(work.tokens, work.prefills, work.decodes)
        return lambda ctx, pairs: predict(ctx) * 1e-3

    def decode_stretch_times(self, work: StepWork, k: int, ctx_step: int, pairs_step: int) -> Any:
        """The times of ``k`` consecutive steps of ``work``'s shape whose context grows by ``ctx_step``
        per step, as a float64 array of ``stepper``'s (so ``step_time``'s) floats."""
        import numpy as np

        step, ctx = self.stepper(work), work.context_tokens
        return np.array([step(ctx + j * ctx_step, 0) for j in range(k)], dtype=np.float64)


# --------------------------------------------------------------------------- host calibration

HOST_CALIBRATION_SCHEMA = "cgbench.host_calibration/1"


@dataclass(frozen=True)
class HostCalibration:
    """The host's measured cost per framework op of an eager step (``cgbench calibrate --host``):
    ``host_op_us`` replaces the hardware preset's when ``hardware.host_calibration`` names the file."""

    host_op_us: float
    host: str
    torch: str | None = None
    ops_measured: int = 0
    created_at: str = field(default_factory=_utc_now)
    notes: str = ""
    samples_us: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"schema": HOST_CALIBRATION_SCHEMA, "host_op_us": self.host_op_us, "host": self.host,
                "torch": self.torch, "ops_measured": self.ops_measured, "created_at": self.created_at,
                "notes": self.notes, "samples_us": list(self.samples_us)}

    @classmethod
    def load(cls, path: str | Path) -> HostCalibration:
        from cgbench.safeio import read_json

        return cls.from_dict(read_json(path, "hardware.host_calibration"), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<host calibration>") -> HostCalibration:
        def fail(key: str, message: str) -> ConfigError:
            return ConfigError(f"{source}: {key}: {message}")

        if not isinstance(data, dict):
            raise fail("(top level)", f"must be a JSON object, got {type(data).__name__}")
        if data.get("schema") != HOST_CALIBRATION_SCHEMA:
            raise fail("schema", f"expected {HOST_CALIBRATION_SCHEMA!r}, got {data.get('schema')!r}")
        op = data.get("host_op_us")
        if not _is_number(op) or not 0 < op <= MAX_HOST_OP_US:
            raise fail("host_op_us", f"must be a positive number of at most {MAX_HOST_OP_US:g} us, got {op!r}")
        host = data.get("host")
        if not isinstance(host, str) or not host:
            raise fail("host", f"must be a non-empty string, got {host!r}")
        ops = data.get("ops_measured", 0)
        if not _is_int(ops) or ops < 0:
            raise fail("ops_measured", f"must be an integer >= 0, got {ops!r}")
        samples = data.get("samples_us", [])
        if not isinstance(samples, list) or not all(isinstance(s, (int, float)) and not isinstance(s, bool)
                                                    for s in samples):
            raise fail("samples_us", "must be a list of numbers")
        return cls(host_op_us=float(op), host=host, torch=data.get("torch"), ops_measured=ops,
                   created_at=str(data.get("created_at", "")), notes=str(data.get("notes", "")),
                   samples_us=tuple(float(s) for s in samples))
