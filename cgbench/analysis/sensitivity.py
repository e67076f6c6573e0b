"""``cgbench run --sensitivity``: does the run's conclusion survive the cost model's uncertainty?

The run (side A) is compared with the lines users run (``analysis/baselines.py``): the configuration
as given with gating off (``policy=budget``, same grid), the user's own launch line when
``--megatron-args`` was given, Megatron's default line for the model (no
``--inference-cuda-graph-all-prefills``), and no graphs at all (``cg=none``). Each side is
priced again over the range of every uncertain parameter (``backends/sim/uncertainty.py``) and,
per decision metric, the report says which side wins at the low end, the configured value and the
high end, whether the winner flips inside the range, and the break-even: the host time per op (and
the eager / graphed step-time ratio it gives) at which the winner changes.

When the run's scheduling does not depend on the clock (every request arrives at t = 0, or a closed
loop) the steps are the same whatever they cost: each side runs once with its steps recorded
(``backends/sim/repricing.py``) and a new price only re-prices those steps and re-times the
requests. Timed arrivals (Poisson, gamma, a trace's timestamps) make the schedule depend on the
price: then every evaluation is a full re-run, and the report says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cgbench.analysis.baselines import Baseline, baselines
from cgbench.backends.sim.factory import make_cost_model
from cgbench.backends.sim.repricing import RecordingBackend, StepLog, reprice
from cgbench.backends.sim.uncertainty import UNCERTAIN, UncertainParameter, by_key
from cgbench.backends.sim.uncertainty import describe as describe_parameters
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.engine.ledger import COMPLETED, Ledger
from cgbench.grids.build import build_grid
from cgbench.pipeline import build_engine, make_backend, simulate
from cgbench.results.metrics import summary
from cgbench.results.names import number_at

# metric -> True when higher is better
DECISION_METRICS: dict[str, bool] = {
    "output_throughput_tok_s": True,
    "ttft_ms.p99": False,
    "tpot_ms.p50": False,
    "e2e_ms.p99": False,
}
BREAK_EVEN_KEY = "hardware.host_op_us"
BREAK_EVEN_SPAN = (0.05, 200.0)  # us per op searched for a break-even (wider than any published host)


def repricing_refusal(cfg: BenchConfig) -> str | None:
    """Why ``cfg``'s run cannot be re-priced without re-running its scheduler; None when it can."""
    if cfg.engine.ep_size > 1:
        return "expert-parallel ranks step in lockstep at the slowest rank's price"
    if cfg.engine.dp_size > 1:
        return "data-parallel ranks run on their own clocks, and arrivals are routed by the time they come"
    process = cfg.workload.arrival.process
    if process == "closed_loop":
        return None
    if cfg.workload.trace:
        return "the trace's arrival times make the schedule depend on the price"
    if process != "all_at_once":
        return f"workload.arrival.process={process}: timed arrivals make the schedule depend on the price"
    return None


TIMES = ("arrival_s", "first_token_s", "last_token_s", "finish_s")  # the ledger's times a metric reads


class Retiming:
    """A recorded run ready to be re-timed: what does not depend on the price, computed once (the steps
    as ``StepWork`` records, each request time as the index of the step it ends, the request masks); a
    price then costs one re-pricing of the steps and one cumulative sum (``metrics``)."""

    def __init__(self, log: StepLog, requests: Ledger, makespan_s: float) -> None:
        import numpy as np

        self.works = log.works()
        ends = np.add.accumulate(np.frombuffer(log.durations, dtype=np.float64)) if len(log) else np.zeros(0)
        if len(ends) and ends[-1] != makespan_s:
            raise AssertionError("sensitivity: the run's clock is not the sum of its step durations")
        # every time the run recorded must be the end of one of its steps (or 0): else the clock moved
        # outside the steps and re-timing would be wrong (an engine bug, not bad input)
        self.times: dict[str, tuple[Any, Any, Any]] = {}  # column -> (values, later than 0, their step)
        for name in TIMES:
            t = np.frombuffer(requests.float_column(name), dtype=np.float64).copy()
            later = t > 0
            idx = np.searchsorted(ends, t[later])
            if len(idx) and (idx.max() >= len(ends) or not np.array_equal(ends[idx], t[later])):
                raise AssertionError(f"sensitivity: a request's {name} is not at a step boundary")
            self.times[name] = (t, later, idx)

        def ints(name: str) -> Any:
            col = requests.int_column(name)
            return np.frombuffer(col, dtype=np.dtype(col.typecode)).astype(np.int64)

        self.generated = ints("generated")
        self.done = ints("fate") == COMPLETED
        self.emitted = ints("first_token_step") >= 0
        self.multi = self.done & (self.generated > 1)

    def metrics(self, durations: Any) -> dict[str, float]:
        """The decision metrics of the recorded run with its steps lasting ``durations`` instead."""
        import numpy as np

        new_ends = np.add.accumulate(np.asarray(durations, dtype=np.float64))

        def retimed(name: str) -> Any:
            t, later, idx = self.times[name]
            out = t.copy()
            out[later] = new_ends[idx]
            return out

        arrival, first, last, finish = (retimed(n) for n in TIMES)
        makespan = float(new_ends[-1]) if len(new_ends) else 0.0
        multi, generated = self.multi, self.generated
        ttft = summary((first - arrival)[self.emitted], 1000.0)
        tpot = summary((last[multi] - first[multi]) / (generated[multi] - 1), 1000.0)
        e2e = summary((finish - arrival)[self.done], 1000.0)
        return {
            "output_throughput_tok_s": round(int(generated.sum()) / makespan, 3) if makespan > 0 else 0.0,
            "ttft_ms.p99": ttft["p99"],
            "tpot_ms.p50": tpot["p50"],
            "e2e_ms.p99": e2e["p99"],
        }


@dataclass
class Side:
    """One configuration of the comparison and how it is evaluated at a price."""

    label: str
    cfg: BenchConfig
    log: StepLog | None = None  # its recorded steps
    retiming: Retiming | None = None  # re-pricing those steps; None: every price is a full re-run

    def evaluate(self, price: Pricing | None = None) -> dict[str, float]:
        """The decision metrics with this side's config priced by ``price`` (a config -> the same at
        the price tried: one uncertain parameter set; None: as configured). Each side is priced on its
        own model, engine and hardware: a baseline need not share the run's (a launch line's TP)."""
        priced = self.cfg if price is None else price(self.cfg)
        if self.retiming is None:
            m = simulate(priced)
            return {k: number_at(m, k) or 0.0 for k in DECISION_METRICS}
        pricer = make_cost_model(priced.backend, priced.model, priced.hardware, priced.engine)
        return self.retiming.metrics(reprice(self.retiming.works, pricer))


Pricing = Callable[[BenchConfig], BenchConfig]


def at_value(p: UncertainParameter, value: Any) -> Pricing:
    """The pricing that sets ``p`` to ``value`` (the same absolute value on every side)."""
    return lambda cfg: p.applied(cfg, value)


def record(label: str, cfg: BenchConfig, *, retimable: bool = True) -> Side:
    """Run ``cfg`` once with every step recorded (the step-by-step engine). ``retimable``: the run
    will be re-timed (every time it recorded is checked to be a step boundary)."""
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    backend, _, _ = make_backend(cfg, grid)
    recorder = RecordingBackend(backend)
    engine = build_engine(cfg, backend=recorder, grid=grid)
    state = engine.run()
    retiming = Retiming(recorder.log, state.requests, state.now_s) if retimable else None
    return Side(label, cfg, recorder.log, retiming)


def same_steps(a: StepLog, b: StepLog) -> bool:
    """Both sides computed the very same steps (then no price can separate them)."""
    return all(getattr(a, f) == getattr(b, f) for f in ("tokens", "prefills", "decodes", "context", "pairs",
                                                          "graph_ids", "graphs", "durations")) and \
        [[(x.request.id, x.request.finished_chunk, x.chunk) for x in adm] for adm in a.admitted] == \
        [[(x.request.id, x.request.finished_chunk, x.chunk) for x in adm] for adm in b.admitted]


def winner(a: float, b: float, higher_is_better: bool) -> str:
    if a == b:
        return "tie"
    return "a" if (a > b) == higher_is_better else "b"


def eager_graphed_ratio(log: StepLog, cfg: BenchConfig) -> float | None:
    """What the run's steps cost eager ÷ what they cost replayed as graphs of their own shapes."""
    if not len(log):
        return None
    pricer = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    eager = float(reprice(log.works(graphed=False), pricer).sum())
    graphed = float(reprice(log.works(graphed=True), pricer).sum())
    return round(eager / graphed, 4) if graphed > 0 else None


class Count:
    """Evaluations (a run, or a re-pricing of recorded steps) done and planned, told to
    ``progress(done, planned)`` after each. The plan is exact: it grows when a break-even search
    starts and shrinks by what a search finds already evaluated."""

    def __init__(self, progress: Callable[[int, int], None] | None = None) -> None:
        self.progress = progress
        self.done = 0
        self.planned = 0

    def plan(self, n: int) -> None:
        self.planned += n

    def tick(self, n: int = 1) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.planned)


def planned_evaluations(cfg: BenchConfig, params: tuple[UncertainParameter, ...]) -> int:
    """Evaluations of one comparison before any break-even bisection: both sides at every value of
    every parameter but the configured one, and at both ends of the break-even span."""
    return 2 * sum(sum(v != p.value(cfg) for v in p.values(cfg)) for p in params) + 4


def _one_comparison(a: Side, b: Side, cfg: BenchConfig, params: tuple[UncertainParameter, ...],
                    point_a: dict[str, float], point_b: dict[str, float],
                    search_steps: int, ratio_log: StepLog | None, base: Baseline | None = None,
                    count: Count | None = None) -> dict[str, Any]:
    count = count or Count()
    parameters = []
    flips: list[str] = []

    def both(price: Pricing) -> tuple[dict[str, float], dict[str, float]]:
        out = (a.evaluate(price), b.evaluate(price))
        count.tick(2)
        return out

    for p in params:
        values = p.values(cfg)
        at = {v: (point_a, point_b) if v == p.value(cfg) else both(at_value(p, v)) for v in values}
        if all(at[v] == at[p.value(cfg)] for v in values):
            parameters.append({"key": p.key, "values": values, "point": p.value(cfg),
                               "effect": "none: the cost model does not read it"})
            continue
        rows = {}
        for metric, higher in DECISION_METRICS.items():
            wins = [winner(at[v][0][metric], at[v][1][metric], higher) for v in values]
            rows[metric] = {"a": [at[v][0][metric] for v in values], "b": [at[v][1][metric] for v in values],
                            "winner": wins, "flips": len(set(wins) - {"tie"}) > 1}
            if rows[metric]["flips"]:
                flips.append(f"{metric} under {p.key}")
        parameters.append({"key": p.key, "values": values, "point": p.value(cfg), "metrics": rows})
    same = a.log is not None and b.log is not None and same_steps(a.log, b.log)
    return {"b": b.label, **({} if base is None else {"baseline": base.kind, "name": base.name,
                                                      "overrides": list(base.overrides)}),
            "same_steps": same, "point": {"a": point_a, "b": point_b},
            "point_winner": {m: winner(point_a[m], point_b[m], h) for m, h in DECISION_METRICS.items()},
            "parameters": parameters, "flips": flips,
            "break_even": break_even(a, b, cfg, search_steps, ratio_log, count)}


def break_even(a: Side, b: Side, cfg: BenchConfig, search_steps: int,
               ratio_log: StepLog | None = None, count: Count | None = None) -> list[dict[str, Any]]:
    """Per decision metric, the host time per op at which the winner changes (bisection over
    ``BREAK_EVEN_SPAN``), and the eager / graphed ratio of A's steps (``ratio_log``) there; None when
    it does not change inside the span. ``count``: planned for the span's two ends already."""
    count = count or Count()
    p = by_key()[BREAK_EVEN_KEY]
    lo_v, hi_v = BREAK_EVEN_SPAN
    cache: dict[float, tuple[dict[str, float], dict[str, float]]] = {}

    def at(v: float) -> tuple[dict[str, float], dict[str, float]]:
        if v not in cache:
            cache[v] = (a.evaluate(at_value(p, v)), b.evaluate(at_value(p, v)))
            count.tick(2)
        elif v not in (lo_v, hi_v):
            count.plan(-2)  # a bisection step another metric's search had evaluated
        return cache[v]

    out = []
    for metric, higher in DECISION_METRICS.items():
        def side_of(v: float, metric: str = metric, higher: bool = higher) -> str:
            ra, rb = at(v)
            return winner(ra[metric], rb[metric], higher)

        lo, hi = lo_v, hi_v
        w_lo, w_hi = side_of(lo), side_of(hi)
        if w_lo == w_hi or "tie" in (w_lo, w_hi):
            out.append({"metric": metric, "host_op_us": None, "below": w_lo, "above": w_hi})
            continue
        count.plan(2 * search_steps)
        for _ in range(search_steps):
            mid = (lo * hi) ** 0.5  # geometric: the span covers three orders of magnitude
            if side_of(mid) == w_lo:
                lo = mid
            else:
                hi = mid
        value = round((lo * hi) ** 0.5, 3)
        ratio = eager_graphed_ratio(ratio_log, p.applied(cfg, value)) if ratio_log is not None else None
        out.append({"metric": metric, "host_op_us": value, "below": w_lo, "above": w_hi,
                    "eager_graphed_ratio": ratio})
    return out


def check_sensitivity(cfg: BenchConfig) -> None:
    """Refuse, before anything runs, a run ``--sensitivity`` cannot re-price (bad input: exit 2)."""
    if cfg.backend.name != "sim":
        raise ConfigError("--sensitivity: re-pricing needs the simulator (backend=sim); a real engine run "
                          "measures its prices instead of modelling them")
    from cgbench.config.limits import check_ranges

    for p in UNCERTAIN:  # every price the ranges reach is one a run could have (finite times, no 0 rates)
        if p.choices:
            continue
        for end in p.bounds(cfg):
            try:
                check_ranges(p.applied(cfg, end))
            except ConfigError as e:
                raise ConfigError(f"--sensitivity: {p.key}={p.value(cfg):g} puts its range's end at {end:g} "
                                  f"(ends round to 6 decimals), outside what the simulator prices ({e}); set "
                                  f"{p.key} further inside its bounds") from None


def sensitivity(cfg: BenchConfig, point_metrics: dict[str, Any], *, overrides: list[str] | None = None,
                launch_line: str | None = None, params: tuple[UncertainParameter, ...] = UNCERTAIN,
                progress: Callable[[int, int], None] | None = None, versus: list[Baseline] | None = None,
                config_dirs: tuple[Any, ...] | list[Any] = ()) -> dict[str, Any]:
    """The ``sensitivity`` block of ``cfg``'s result, the run of ``overrides`` (see the module
    docstring). ``versus``: what it is compared with (default: the baselines of
    ``analysis/baselines.py``, ``launch_line`` the user's ``--megatron-args``; advise: its own).
    ``progress(done, planned)``: after each evaluation (a recording run, a re-run or a re-pricing)."""
    check_sensitivity(cfg)
    from cgbench.analysis.megatron_log.calibrate import fitted_ranges

    cfg, params = fitted_ranges(cfg, params)  # a log calibration's values in the config, its fitted ranges
    notes: list[str] = []
    if versus is None:
        if overrides is None:
            raise TypeError("sensitivity: the baselines are built from the run's overrides; pass overrides=")
        # never empty: Megatron's default line and no graphs differ, and at most one of them is the run
        versus, notes = baselines(cfg, overrides, launch_line=launch_line, config_dirs=config_dirs)
    refusal = repricing_refusal(cfg)
    count = Count(progress)
    # the recording runs (or, re-running, the one run whose steps give the ratio), each side at the
    # configured prices (the run itself only when re-pricing: re-running, its metrics are the point's)
    count.plan((1 + len(versus) if refusal is None else 1) + (refusal is None) + len(versus)
               + len(versus) * planned_evaluations(cfg, params))
    if refusal is None:
        a = record("this run", cfg)
        count.tick()
        others = []
        for b in versus:
            others.append(record(b.label, b.cfg))
            count.tick()
        search_steps = 24
    else:
        a = Side("this run", cfg)
        others = [Side(b.label, b.cfg) for b in versus]
        search_steps = 10
    # the steps' eager / graphed ratio; with timed arrivals, of the steps this run took at its prices
    if a.log is not None:
        ratio_log = a.log
    else:
        ratio_log = record("this run", cfg, retimable=False).log
        count.tick()
    expected = {k: number_at(point_metrics, k) or 0.0 for k in DECISION_METRICS}
    point_a = expected
    if refusal is None:
        point_a = a.evaluate()
        count.tick()
    if point_a != expected:  # the recording run must be the run itself
        raise AssertionError(f"sensitivity: re-priced point {point_a} differs from the run's {expected}")
    comparisons = []
    for b, base in zip(others, versus, strict=True):
        point_b = b.evaluate()
        count.tick()
        comparisons.append(_one_comparison(a, b, cfg, params, point_a, point_b, search_steps, ratio_log,
                                           base, count))
    ratio = eager_graphed_ratio(ratio_log, cfg)
    return {
        "method": "repriced" if refusal is None else "rerun",
        "why_rerun": refusal,
        "eager_graphed_ratio": ratio,
        "parameters": describe_parameters(cfg, params),
        "comparisons": comparisons,
        "notes": notes,
    }
