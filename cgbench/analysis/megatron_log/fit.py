"""``cgbench calibrate --megatron-log``: the roofline cost model fitted to a production run's own step times.

Every logged step is an observation of the simulator's price: graphed steps at their graph's
shape, eager steps at their real shape, each at the KV context its requests held. Megatron's log
gives KV blocks, not tokens: the context is estimated as ``blocks × block_size − (P + D) ×
block_size / 2`` (each request's last block half full on average), at least the step's own tokens.
Steps of one ``(real shape, graph)`` pair are one observation (their mean time, their count as the
weight; ``LogDigest``).

The parameters fitted (``FIT_KEYS``) are those the simulator does not know for the user's machine
(``cgbench.backends.sim.uncertainty``): the per-class efficiencies of the GPU (GEMM FLOP/s, weight
streaming, prefill attention, decode attention's KV streaming, Mamba's scan) and the host's µs per
framework op. The fit minimises the count-weighted squared log error (relative error, so a 5 ms
decode step counts as much as a 300 ms prefill) by Levenberg-Marquardt over the logs of the
parameters (efficiencies at most 1), the Jacobian by finite differences of the cost model itself.

What a log can identify, it says: a parameter whose every observation's price moves by less than
``IDENTIFIED_RMS`` per unit log change is not identified and keeps its preset value (a log with no
eager step, or none whose host work exceeds its GPU work, cannot price the host: then it says so,
with the bound its eager steps give); the others get a standard error from the weighted residual
variance and ``(JᵀWJ)⁻¹``, and a range of ±2 standard errors (``--sensitivity`` uses it). The host's
evidence is shown as the eager − graphed difference at matched shapes: each eager shape's measured
time against the fitted model's GPU time for the same shape, the excess per framework op.

Fixed, not fitted (stated costs of docs/cost-model.md): kernel launch, graph launch and node gaps,
the end-of-step sync, kernel floors, tile sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from cgbench.analysis.megatron_log.digest import LogDigest, Shape
from cgbench.backends.sim.cost_model import RooflineCostModel
from cgbench.backends.sim.factory import make_roofline, resolve_hardware
from cgbench.backends.sim.host_profiles import host_profile
from cgbench.config.schema import BenchConfig, ConfigError, HardwareConfig
from cgbench.engine.contract import StepWork

EFFICIENCIES = ("flops_efficiency", "bandwidth_efficiency", "attention_efficiency",
                "attention_bandwidth_efficiency", "scan_efficiency")
HOST = "host_op_us"
FIT_KEYS = tuple(f"hardware.{k}" for k in (*EFFICIENCIES, HOST))
IDENTIFIED_RMS = 2e-3  # RMS of d log(price) / d log(parameter) below which a parameter is not identified
MAX_SIGMA_REL = 0.25  # a standard error above this (in log space, ~25%): not identified
MAX_OBSERVATIONS = 4000  # (real shape, graph) pairs fitted, the most-logged first
BOUNDS = {**dict.fromkeys(EFFICIENCIES, (1e-3, 1.0)), HOST: (0.01, 1e4)}
MAX_ITERATIONS = 60
STEP = 1e-3  # finite-difference step in log space


@dataclass(frozen=True)
class Observation:
    """The logged steps of one (real shape, graph) pair: their count, mean and spread (ms), and the
    KV context estimated from their blocks."""

    real: Shape
    graph: Shape | None
    steps: int
    mean_ms: float
    var_ms: float
    context: int

    @property
    def kind(self) -> str:
        if self.graph is None:
            return "eager"
        return "graphed decode" if self.real[1] == 0 else "graphed prefill/mixed"

    def work(self) -> StepWork:
        T, P, D = self.real
        return StepWork(T, P, D, self.context, self.graph, None, None if self.graph else "logged")


def context_tokens(real: Shape, mean_blocks: float, block_size: int) -> int:
    """The KV tokens a step attends, estimated from the blocks its requests hold (module docstring)."""
    T, P, D = real
    return max(T, int(round(mean_blocks * block_size - (P + D) * block_size / 2)))


def observations(digest: LogDigest, block_size: int, rank: int | None = None) -> tuple[list[Observation], int]:
    """The fit's observations (every rank merged, or ``rank``'s) and the steps left out (past
    ``MAX_OBSERVATIONS``)."""
    merged: dict[tuple[Shape, Shape | None], list[float]] = {}
    ranks = [digest.rank(rank)] if rank is not None else list(digest.ranks.values())
    for r in ranks:
        for key, g in r.shapes.items():
            acc = merged.setdefault(key, [0, 0.0, 0.0, 0])
            acc[0] += g.steps
            acc[1] += g.ms
            acc[2] += g.ms2
            acc[3] += g.blocks
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[0][0], kv[0][1] or (-1, -1, -1)))
    out = []
    for (real, graph), (n, s, s2, blocks) in ranked[:MAX_OBSERVATIONS]:
        mean = s / n
        out.append(Observation(real, graph, int(n), mean, max(s2 / n - mean * mean, 0.0),
                               context_tokens(real, blocks / n, block_size)))
    left = sum(int(v[0]) for _, v in ranked[MAX_OBSERVATIONS:])
    return out, left


@dataclass
class FittedParameter:
    """One parameter: its preset and fitted values, and whether the log identifies it."""

    key: str
    preset: float
    value: float
    identified: bool
    sigma_rel: float | None = None  # standard error of log(value): ~ the relative error
    low: float | None = None
    high: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "preset": self.preset, "value": self.value, "identified": self.identified,
                "sigma_rel": self.sigma_rel, "low": self.low, "high": self.high, "note": self.note}


@dataclass
class Fit:
    parameters: list[FittedParameter]
    hardware: HardwareConfig  # the preset with the identified values in place
    residuals: dict[str, Any]
    host_evidence: list[dict[str, Any]]
    observations: int
    steps: int
    steps_left_out: int
    iterations: int
    notes: list[str]

    def identified(self) -> dict[str, float]:
        return {p.key: p.value for p in self.parameters if p.identified}

    def parameter(self, key: str) -> FittedParameter:
        return next(p for p in self.parameters if p.key == key)


class _Pricer:
    """Prices the observations at a parameter vector (one cost model per vector)."""

    def __init__(self, cfg: BenchConfig, hardware: HardwareConfig, obs: list[Observation]) -> None:
        self.cfg, self.base, self.obs = cfg, hardware, obs
        self.works = [o.work() for o in obs]

    def hardware(self, values: dict[str, float]) -> HardwareConfig:
        return replace(self.base, **values)

    def model(self, values: dict[str, float]) -> RooflineCostModel:
        return make_roofline(self.cfg.model, self.hardware(values), self.cfg.engine)

    def log_prices(self, values: dict[str, float]) -> list[float]:
        m = self.model(values)
        return [math.log(m.step_time(_fresh(w)) * 1e3) for w in self.works]


def _fresh(w: StepWork) -> StepWork:
    """A copy with no attention pairs filled in (a pricer may fill them)."""
    return StepWork(w.tokens, w.prefills, w.decodes, w.context_tokens, w.graph, None, w.eager_reason)


def _preset(cfg: BenchConfig) -> HardwareConfig:
    """The hardware the fit starts from: the preset with any host calibration resolved, then dropped."""
    hw = resolve_hardware(cfg.hardware)
    op = hw.host_op_us if hw.host_op_us is not None else host_profile(hw).op_us
    return replace(hw, host_op_us=float(op), host_calibration=None)


def _host_start(cfg: BenchConfig, hw: HardwareConfig, obs: list[Observation]) -> tuple[float | None, float | None]:
    """(a starting host µs per op from the host-bound eager steps, or None; the least upper bound
    the GPU-bound ones give, or None)."""
    model = make_roofline(cfg.model, replace(hw, host_op_us=0.0), cfg.engine)
    implied, bounds = [], []
    for o in obs:
        if o.graph is not None:
            continue
        w = o.work()
        gpu_ms = model.step_time(_fresh(w)) * 1e3  # host cost 0: the GPU's time and the sync
        ops = model.host_ops_prefill if o.real[1] else model.host_ops_decode
        launch_ms = model.kernel_count(o.real[1]) * hw.kernel_launch_us * 1e-3
        per_op = (o.mean_ms - hw.sync_us * 1e-3 - launch_ms) * 1e3 / ops
        (implied if o.mean_ms > gpu_ms * 1.02 else bounds).append((per_op, o.steps))
    start = _weighted_median(implied) if implied else None
    return start, (min(v for v, _ in bounds) if bounds else None)


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    pairs = sorted(pairs)
    half, run = sum(w for _, w in pairs) / 2, 0
    for v, w in pairs:
        run += w
        if run >= half:
            return v
    return pairs[-1][0]


def fit(digest: LogDigest, cfg: BenchConfig, *, rank: int | None = None) -> Fit:
    """The cost model of ``cfg`` fitted to ``digest``'s steps (module docstring)."""
    import numpy as np

    obs, left = observations(digest, cfg.engine.block_size, rank)
    if not obs:
        raise ConfigError(f"--megatron-log: {digest.label}: no step to fit (every logged step is idle)")
    hw = _preset(cfg)
    names = [k.split(".", 1)[1] for k in FIT_KEYS]
    preset = {n: float(getattr(hw, n)) for n in names}
    notes: list[str] = []
    if cfg.model.layers.count("M") == 0:
        names.remove("scan_efficiency")
        notes.append("hardware.scan_efficiency: not fitted: the model has no Mamba layer")
    if cfg.model.layers.count("*") == 0:
        for n in ("attention_efficiency", "attention_bandwidth_efficiency"):
            names.remove(n)
        notes.append("attention efficiencies: not fitted: the model has no attention layer")
    host_start, host_bound = _host_start(cfg, hw, obs)
    eager = [o for o in obs if o.graph is None]
    start = dict(preset)
    host_why = ""
    if not eager:
        names.remove(HOST)
        host_why = ("not identified: the log has no eager step, so it cannot price one (the host's µs per op "
                    "is the preset's)")
    elif host_start is not None:
        start[HOST] = max(host_start, BOUNDS[HOST][0])
    elif host_bound is not None and host_bound < preset[HOST]:
        start[HOST] = max(host_bound, BOUNDS[HOST][0])  # the preset is more than the eager steps allow
    pricer = _Pricer(cfg, hw, obs)
    y = np.log([o.mean_ms for o in obs])
    w = np.array([o.steps for o in obs], dtype=float)
    values, jac, iterations = _levenberg_marquardt(pricer, start, names, y, w)
    within = sum(o.steps * o.var_ms / (o.mean_ms ** 2) for o in obs)  # log-space, per step
    weak: list[str] = []
    loose: dict[str, float] = {}  # dropped for a standard error above MAX_SIGMA_REL (the rest: no price moves)
    bounded = False
    while True:  # a parameter the log does not pin is fixed, and the rest fitted again without it
        pred = np.array(pricer.log_prices(values))
        resid = y - pred
        sigma = _sigmas(jac, w, resid, within, names)
        rms = {n: _rms(jac[:, j], w) for j, n in enumerate(names)}
        bad = [n for n in names if rms[n] < IDENTIFIED_RMS or sigma[n] > MAX_SIGMA_REL]
        if not bad:
            break
        loose.update({n: sigma[n] for n in bad if rms[n] >= IDENTIFIED_RMS})
        weak += bad
        names = [n for n in names if n not in bad]
        values.update({n: preset[n] for n in bad if n != HOST})
        if HOST in bad:  # fixed before the others are fitted again: graphed steps' input copies read it too
            values[HOST], host_why, bounded = _host_kept(cfg, hw, values, obs, preset[HOST], loose.get(HOST))
            weak.remove(HOST)
        values, jac, more = _levenberg_marquardt(pricer, values, names, y, w)
        iterations += more
    params = _parameters(preset, values, names, weak, sigma, host_why, loose)
    if bounded:
        host = next(p for p in params if p.key == f"hardware.{HOST}")
        host.value, host.identified = _tidy(values[HOST]), False  # type: ignore[assignment]
    fitted_hw = replace(hw, **{p.key.split(".", 1)[1]: p.value for p in params if p.value != p.preset})
    final = pricer.model(values)
    evidence = _host_evidence(cfg, fitted_hw, eager, final)
    return Fit(params, fitted_hw, _residuals(obs, pred, resid), evidence, len(obs), int(w.sum()), left,
               iterations, notes)


def _host_kept(cfg: BenchConfig, hw: HardwareConfig, values: dict[str, float], obs: list[Observation],
               preset: float, loose: float | None) -> tuple[float, str, bool]:
    """The host µs per op kept when the log does not identify it: (value, why, bounded by the log)."""
    if loose is not None:
        return preset, f"not identified: its eager steps pin it only to ±{100 * loose:.0f}% (the preset's value " \
                       "is kept)", False
    _, bound = _host_start(cfg, replace(hw, **{k: v for k, v in values.items() if k != HOST}), obs)
    if bound is not None and bound < preset:
        return max(bound, BOUNDS[HOST][0]), (f"not identified: every eager step's time is its GPU work; at most "
                                             f"{bound:.2f} µs per op, below the preset's {preset:g}, so "
                                             f"{bound:.2f} is kept"), True
    return preset, ("not identified: every eager step's time is its GPU work (the host issued its ops faster than "
                    "the GPU ran them)" + (f": at most {bound:.2f} µs per op" if bound is not None else "")), False


def _rms(col: Any, w: Any) -> float:
    return float(math.sqrt(float((w * col * col).sum()) / float(w.sum())))


def _levenberg_marquardt(pricer: _Pricer, start: dict[str, float], names: list[str], y: Any,
                         w: Any) -> tuple[dict[str, float], Any, int]:
    """Minimise Σ w (y − log price)² over log(values[names]); returns (values, the Jacobian at them, iterations)."""
    import numpy as np

    values = dict(start)
    if not names:
        return values, np.zeros((len(y), 0)), 0
    sw = np.sqrt(w)
    lo = np.log([BOUNDS[n][0] for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])
    x = np.clip(np.log([values[n] for n in names]), lo, hi)

    def at(xv: Any) -> dict[str, float]:
        return {**values, **{n: float(math.exp(v)) for n, v in zip(names, xv, strict=True)}}

    def residual(xv: Any) -> Any:
        return sw * (y - np.array(pricer.log_prices(at(xv))))

    def jacobian(xv: Any, r0: Any) -> Any:
        cols = []
        for j in range(len(names)):
            step = STEP if xv[j] + STEP <= hi[j] else -STEP
            xj = xv.copy()
            xj[j] += step
            cols.append(-(residual(xj) - r0) / step / sw)  # d log(price) / d log(parameter)
        return np.array(cols).T

    r = residual(x)
    cost = float(r @ r)
    lam = 1e-3
    iterations = 0
    jac = jacobian(x, r)
    while iterations < MAX_ITERATIONS:
        iterations += 1
        jw = jac * sw[:, None]
        a = jw.T @ jw
        g = jw.T @ r
        improved = False
        for _ in range(12):
            damped = a + lam * np.diag(np.maximum(np.diag(a), 1e-12))
            try:
                delta = np.linalg.solve(damped, g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            x_new = np.clip(x + delta, lo, hi)
            r_new = residual(x_new)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                converged = cost - c_new <= 1e-12 * max(cost, 1e-30) or float(np.abs(x_new - x).max()) < 1e-7
                x, r, cost = x_new, r_new, c_new
                lam = max(lam / 3, 1e-9)
                improved = True
                break
            lam *= 4
        if not improved:
            break
        jac = jacobian(x, r)
        if converged:
            break
    return at(x), jacobian(x, r), iterations


def _sigmas(jac: Any, w: Any, resid: Any, within: float, names: list[str]) -> dict[str, float]:
    """Each parameter's standard error in log space (~ its relative error), from two parts. The
    statistical one, ``s² [(JᵀWJ)⁻¹]`` with ``s²`` the per-step residual variance (between and within
    observations); and the model's, ``rms² [(JᵀWJ / Σw)⁻¹]``: the parameter change, along its worst
    direction with the others refitted, that moves the prices by the fit's RMS error. The log's
    information limits (the context estimated from blocks, attention pairs estimated from the step's
    totals) leave systematic errors that no count of steps averages away; the second part keeps the
    range honest about them. A parameter no price depends on (a zero column) is infinite."""
    import numpy as np

    out = dict.fromkeys(names, math.inf)
    live = [j for j in range(len(names)) if _rms(jac[:, j], w) >= IDENTIFIED_RMS]
    if not live:
        return out
    total = float(w.sum())
    sse = float((w * resid ** 2).sum())
    rms2 = sse / total
    s2 = (sse + within) / max(total - len(live), 1.0)
    jw = jac[:, live] * np.sqrt(w)[:, None]
    inv = np.linalg.pinv(jw.T @ jw)
    diag = np.diag(inv)
    for k, j in enumerate(live):
        out[names[j]] = math.sqrt(max(float(diag[k]) * (s2 + rms2 * total), 0.0))
    return out


def _parameters(preset: dict[str, float], values: dict[str, float], names: list[str], weak: list[str],
                sigma: dict[str, float], host_why: str, loose: dict[str, float]) -> list[FittedParameter]:
    out = []
    for name in (*EFFICIENCIES, HOST):
        key = f"hardware.{name}"
        if name in names:
            v = values[name]
            s = sigma.get(name)
            lo_b, hi_b = BOUNDS[name]
            low = max(v * math.exp(-2 * s), lo_b) if s is not None else None
            high = min(v * math.exp(2 * s), hi_b) if s is not None else None
            note = "at its bound" if v in (lo_b, hi_b) else ""
            out.append(FittedParameter(key, preset[name], _tidy(v), True, s, _tidy(low), _tidy(high), note))
        elif name in weak:
            why = (f"the log pins it only to ±{100 * loose[name]:.0f}%" if name in loose else
                   "no logged step's price depends on it")
            out.append(FittedParameter(key, preset[name], preset[name], False,
                                       note=f"not identified: {why} (the preset's value is kept)"))
        elif name == HOST and host_why:
            out.append(FittedParameter(key, preset[name], preset[name], False, note=host_why))
        else:
            out.append(FittedParameter(key, preset[name], preset[name], False, note="not fitted: the model does "
                                       "not use it"))
    return out


def _tidy(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.6g}")


def _residuals(obs: list[Observation], pred: Any, resid: Any) -> dict[str, Any]:
    """Per kind of step: observations, steps, and the relative error of the fitted price at the median,
    p90 and worst observation (of observation means); overall: the step-weighted RMS."""
    import numpy as np

    out: dict[str, Any] = {}
    kinds = sorted({o.kind for o in obs})
    for kind in kinds:
        idx = [i for i, o in enumerate(obs) if o.kind == kind]
        rel = np.abs(np.expm1(-resid[idx]))  # |pred / measured − 1|
        out[kind] = {"observations": len(idx), "steps": int(sum(obs[i].steps for i in idx)),
                     "median_rel_error": round(float(np.median(rel)), 5),
                     "p90_rel_error": round(float(np.quantile(rel, 0.9)), 5),
                     "max_rel_error": round(float(rel.max()), 5)}
    w = np.array([o.steps for o in obs], dtype=float)
    rel_all = np.expm1(-resid)
    out["all"] = {"observations": len(obs), "steps": int(w.sum()),
                  "rms_rel_error": round(float(math.sqrt(float((w * rel_all ** 2).sum()) / float(w.sum()))), 5)}
    del pred
    return out


def _host_evidence(cfg: BenchConfig, hw: HardwareConfig, eager: list[Observation],
                   final: RooflineCostModel) -> list[dict[str, Any]]:
    """The eager − graphed difference at matched shapes (the most-logged eager shapes first): each eager
    shape's logged time against the fitted model's price of the same shape replayed as a graph, and
    the host µs per op its time implies: ``(eager − sync − kernel launches) / ops`` when the step is
    host-bound in the fitted model (its host's issue longer than its GPU work), else that figure as
    an upper bound (``bound``)."""
    gpu_model = make_roofline(cfg.model, replace(hw, host_op_us=0.0), cfg.engine)
    out = []
    for o in sorted(eager, key=lambda o: -o.steps)[:12]:
        T, P, D = o.real
        graphed = final.step_time(StepWork(T, P, D, o.context, (T, P, D))) * 1e3
        gpu = gpu_model.step_time(_fresh(o.work())) * 1e3 - hw.sync_us * 1e-3
        ops = final.host_ops_prefill if P else final.host_ops_decode
        host = final.host_seconds(P) * 1e3
        launches = final.kernel_count(P) * hw.kernel_launch_us * 1e-3
        per_op = (o.mean_ms - hw.sync_us * 1e-3 - launches) * 1e3 / ops
        out.append({"real": list(o.real), "steps": o.steps, "eager_ms": round(o.mean_ms, 3),
                    "graphed_ms": round(graphed, 3), "difference_ms": round(o.mean_ms - graphed, 3), "ops": ops,
                    "host_us_per_op": round(per_op, 3), "bound": not host > gpu})
    return out
