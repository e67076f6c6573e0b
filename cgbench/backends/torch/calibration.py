"""``cgbench calibrate``: measured step times of the real small model -> the ``sim`` backend's calibration
table.

The runner (``TorchRunner``) is driven directly, not through the engine, so that every measured step has a
chosen shape (``plan_cases``):

* eager steps at real shapes: decode-only at several ``D``, prefill-only at several ``T`` and ``P`` (fresh
  prompts, and for one prefill also a chunk after a cached prefix), and mixed steps; decode contexts are drawn
  around a few fractions of ``engine.max_sequence_length``;
* graphed steps: for every shape of the configured grid, a real batch that fills the graph and a smaller one
  that the grid's matcher sends to the same graph, with short and long contexts.

A step is staged once (host work, never timed, as in the torch backend), run ``warmup`` times, then timed
``repeat`` times; the median is recorded. Eager: the unpadded batch, ``compute`` timed. Graphed, on CUDA: the
grid is captured by the torch backend's own ``CudaGraphRunner`` and the replay of the staged (padded) batch is
timed with CUDA events. On the CPU there are no CUDA graphs: a "graphed" row is the step padded to the graph's
shape and computed eagerly (the table's notes say so); it keeps the whole pipeline testable. The contexts a
step reads are put in place by staging them without computing: a step's time does not depend on what the KV
cache or the Mamba state hold.

The measurements are split (seeded, per mode) into fit and held-out rows. The table holds the fit rows; the
held-out rows score ``CalibratedCostModel`` built from it (relative error, median and p90, per mode). torch is
imported only inside the measuring functions, so planning and scoring run anywhere.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cgbench.backends.sim.calibrated import CalibratedCostModel, CalibrationPoint, CalibrationTable
from cgbench.backends.sim.cost_model import RooflineCostModel
from cgbench.config.schema import BenchConfig, ConfigError, EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepWork
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid

MODES = ("graphed", "eager")
REPORT_SCHEMA = "cgbench.calibration-report/2"
CTX_FRACTIONS = (1 / 16, 1 / 4, 1 / 2)  # decode contexts, as fractions of engine.max_sequence_length
PREFILL_COUNTS = (1, 2, 4, 8)  # P of the prefill-only steps
MIXED_PREFILLS = (1, 2, 4)  # P of the mixed steps
CPU_MAX_PARAMETERS = 200_000_000  # beyond this, calibrating on the CPU takes hours: refuse
GRAPHED_ON_CUDA = "cuda_graph_replay"
GRAPHED_ON_CPU = "padded_eager"

Shape = tuple[int, int, int]
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Case:
    """One step to measure. ``graph`` is the grid shape it replays (graphed) or ``None`` (eager)."""

    mode: str
    label: str  # decode, prefill, mixed (eager); graph-full, graph-partial (graphed)
    decode_ctx: tuple[int, ...]  # cached tokens of each decode row
    prefills: tuple[tuple[int, int], ...]  # (cached prefix, new tokens) of each prefill row
    graph: Shape | None = None

    @property
    def real(self) -> Shape:
        """The real (T, P, D) of the batch."""
        decodes = len(self.decode_ctx)
        return decodes + sum(n for _, n in self.prefills), len(self.prefills), decodes

    @property
    def key(self) -> Shape:
        """The table's (T, P, D): the graph's shape for graphed rows, the real shape for eager rows."""
        return self.graph if self.graph is not None else self.real

    @property
    def ctx(self) -> int:
        """KV tokens the attention reads: cached + new, over the step's requests."""
        return sum(c + 1 for c in self.decode_ctx) + sum(p + n for p, n in self.prefills)

    def kv_blocks(self, block_size: int) -> int:
        lengths = [c + 1 for c in self.decode_ctx] + [p + n for p, n in self.prefills]
        return sum(-(-n // block_size) for n in lengths)


@dataclass(frozen=True, slots=True)
class Measurement:
    case: Case
    ms: float  # median of the timed runs
    spread_ms: tuple[float, float]  # fastest and slowest timed run

    def point(self) -> CalibrationPoint:
        t, p, d = self.case.key
        return CalibrationPoint(t, p, d, self.case.ctx, self.ms)

    def to_dict(self) -> dict[str, Any]:
        t, p, d = self.case.key
        return {"mode": self.case.mode, "label": self.case.label, "T": t, "P": p, "D": d,
                "ctx": self.case.ctx, "real": list(self.case.real), "ms": round(self.ms, 6),
                "min_ms": round(self.spread_ms[0], 6), "max_ms": round(self.spread_ms[1], 6)}


@dataclass(slots=True)
class MeasureRun:
    measurements: list[Measurement]
    device: str
    torch_version: str
    on_cuda: bool
    capture: dict | None  # CudaGraphRunner.report() on CUDA
    skipped: list[str] = field(default_factory=list)  # cases not measured, and why


@dataclass(slots=True)
class CalibrationResult:
    table: CalibrationTable
    report: dict[str, Any]


# --------------------------------------------------------------------------------------------- planning


def sizes(lo: int, hi: int, *, dense: bool = False) -> list[int]:
    """Powers of two in [lo, hi] (with ``dense`` also 3·2^k), plus ``hi`` itself."""
    out: set[int] = set()
    k = 1
    while k <= hi:
        for v in (k, 3 * k // 2) if dense and k > 1 else (k,):
            if lo <= v <= hi:
                out.add(v)
        k *= 2
    if hi >= lo:
        out.add(hi)
    return sorted(out)


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


class _Planner:
    def __init__(self, engine: EngineConfig, grid: Grid, seed: int) -> None:
        self.max_rows, self.max_tokens = engine.max_requests, engine.max_tokens
        self.msl, self.block_size = engine.max_sequence_length, engine.block_size
        self.pool = engine.resolved_kv_blocks()
        self.grid, self.seed = grid, seed
        self.levels = sorted({min(max(1, int(self.msl * f)), self.msl - 1) for f in CTX_FRACTIONS})
        self.skipped: list[str] = []

    def contexts(self, n: int, level: int, salt: str) -> tuple[int, ...]:
        """n decode contexts drawn around ``level`` (a fixed draw for each (seed, salt, n, level))."""
        rng = random.Random(f"{self.seed}/{salt}/{n}/{level}")
        lo, hi = max(1, level // 2), max(1, min(self.msl - 1, level + level // 2))
        return tuple(rng.randint(lo, hi) for _ in range(n))

    def fits(self, case: Case) -> bool:
        t, p, d = case.real
        if not (1 <= t <= self.max_tokens and 1 <= p + d <= self.max_rows):
            return False
        if any(not 1 <= c < self.msl for c in case.decode_ctx):
            return False
        if any(n < 1 or p < 0 or p + n > self.msl for p, n in case.prefills):
            return False
        if case.graph is not None:
            gt, gp, gd = case.graph
            if not (t <= gt <= self.max_tokens and p <= gp and d <= gd and gp + gd <= self.max_rows):
                return False
        return case.kv_blocks(self.block_size) <= self.pool

    def shrink(self, case: Case) -> Case:
        """Halve the decode contexts until the case fits the KV pool (a tight ``engine.kv_blocks``)."""
        while case.kv_blocks(self.block_size) > self.pool and any(c > 1 for c in case.decode_ctx):
            case = replace(case, decode_ctx=tuple(max(1, c // 2) for c in case.decode_ctx))
        return case

    def add(self, out: list[Case], case: Case) -> None:
        case = self.shrink(case)
        if self.fits(case):
            out.append(case)
        elif case.graph is not None:
            self.skipped.append(f"graph {list(case.graph)} ({case.label}): no real batch of it fits the "
                                "engine's limits")

    def eager(self) -> list[Case]:
        out: list[Case] = []
        rows, tokens, msl = self.max_rows, self.max_tokens, self.msl
        for d in sizes(1, rows, dense=True):
            for level in self.levels:
                self.add(out, Case("eager", "decode", self.contexts(d, level, "decode"), ()))
        for p in (p for p in PREFILL_COUNTS if p <= rows):
            prefixes = (0, msl // 4) if p == 1 and msl // 4 > 0 else (0,)
            for prefix in prefixes:
                for t in sizes(2 * p, min(tokens, p * (msl - prefix)), dense=p == 1):
                    self.add(out, Case("eager", "prefill", (), tuple((prefix, n) for n in _split(t, p))))
        mid = self.levels[len(self.levels) // 2]
        for p in (p for p in MIXED_PREFILLS if p < rows):
            for d in sorted({1, (rows - p) // 2, rows - p} - {0}):
                ctx = self.contexts(d, mid, "mixed")
                for new in sizes(2 * p, min(tokens - d, p * msl)):
                    self.add(out, Case("eager", "mixed", ctx, tuple((0, n) for n in _split(new, p))))
        return out

    def fill(self, shape: Shape) -> tuple[int, tuple[int, ...]] | None:
        """(decode count, prefill chunk lengths) of a real batch of ``shape``, as full as the limits allow."""
        t, p, d = shape
        if p == 0:
            return (d, ()) if t == d else None
        new = min(t - d, p * self.msl)
        return (d, tuple(_split(new, p))) if new >= p else None

    def graphed(self) -> list[Case]:
        out: list[Case] = []
        short, long = self.levels[0], self.levels[-1]
        for g in dict.fromkeys(tuple(s) for s in self.grid.graphs):
            full = self.fill(g)
            if full is None:
                self.skipped.append(f"graph {list(g)}: not a shape the runner can stage")
                continue
            d, chunks = full
            # salt "decode": a full decode graph replays exactly the batch of an eager decode step
            self.add(out, Case("graphed", "graph-full", self.contexts(d, short, "decode"),
                               tuple((0, n) for n in chunks), g))
            real = self.partial(g)
            rd, rchunks = self.fill(real) if real is not None else full
            self.add(out, Case("graphed", "graph-partial", self.contexts(rd, long, "graph"),
                               tuple((0, n) for n in rchunks), g))
        return out

    def partial(self, g: Shape) -> Shape | None:
        """A smaller real batch that the grid's matcher sends to ``g`` (None when there is none to find)."""
        t, p, d = g
        if p == 0:
            candidates = [(d // 2 + 1, 0, d // 2 + 1)]
        else:
            candidates = [(t // 2 + 1, p, d), (t // 2 + 1, p, d // 2), (t, max(1, p // 2), d), (t, p, d // 2)]
        for c in candidates:
            if c == g or c[1] + c[2] < 1 or c[0] - c[2] < c[1] or self.fill(c) is None:
                continue
            hit, _ = self.grid.lookup(*c)
            if hit is not None and tuple(hit) == g:
                return c
        return None


def plan_cases(engine: EngineConfig, grid: Grid, seed: int) -> tuple[list[Case], list[str]]:
    """The steps to measure (graphed first, in the grid's stored order, then eager) and the grid shapes
    skipped."""
    planner = _Planner(engine, grid, seed)
    cases = planner.graphed() + planner.eager()
    return cases, list(dict.fromkeys(planner.skipped))


# -------------------------------------------------------------------------------------------- measuring


class _Timer:
    """Milliseconds of one call: CUDA events from an idle device on a GPU, wall clock on the CPU."""

    def __init__(self, torch: Any, on_cuda: bool) -> None:
        self.on_cuda = on_cuda
        if on_cuda:
            self.sync = torch.cuda.synchronize
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn: Callable[[], None]) -> float:
        if self.on_cuda:
            self.sync()
            self.start.record()
            fn()
            self.end.record()
            self.end.synchronize()
            return float(self.start.elapsed_time(self.end))
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def _stage_contexts(runner: Any, needs: list[tuple[int, int]]) -> None:
    """Puts ``n`` cached tokens in place for each (request id, n): staged in engine-sized steps, never
    computed."""
    from cgbench.backends.torch.runner import StepRow

    done = {rid: 0 for rid, _ in needs}
    pending = [(rid, n) for rid, n in needs if n > 0]
    while pending:
        rows, budget, rest = [], runner.max_tokens, []
        for rid, n in pending:
            take = min(n - done[rid], budget)
            if take <= 0 or len(rows) == runner.max_rows:
                rest.append((rid, n))
                continue
            rows.append(StepRow(rid, [0] * take, done[rid]))
            done[rid] += take
            budget -= take
            if done[rid] < n:
                rest.append((rid, n))
        runner.stage(rows)
        pending = rest


def stage_case(runner: Any, case: Case, first_id: int) -> tuple[Any, list[int]]:
    """Stages the case on a ``TorchRunner`` as requests ``first_id, first_id + 1, ...`` (decodes first):
    its contexts are put in place, then the step itself (padded to ``case.graph`` when graphed). Returns the
    staged step and the request ids, for the caller to release."""
    from cgbench.backends.torch.runner import StepRow

    ids = list(range(first_id, first_id + len(case.decode_ctx) + len(case.prefills)))
    decode_ids, prefill_ids = ids[:len(case.decode_ctx)], ids[len(case.decode_ctx):]
    _stage_contexts(runner, list(zip(decode_ids, case.decode_ctx, strict=True))
                    + [(rid, p) for rid, (p, _) in zip(prefill_ids, case.prefills, strict=True)])
    rows = [StepRow(rid, runner.prompt_tokens(rid, 1), c)
            for rid, c in zip(decode_ids, case.decode_ctx, strict=True)]
    for rid, (p, n) in zip(prefill_ids, case.prefills, strict=True):
        rows.append(StepRow(rid, runner.prompt_tokens(rid, p + n)[p:], p))
    return runner.stage(rows, case.graph), ids


def measure(cfg: BenchConfig, cases: Sequence[Case], *, repeat: int, warmup: int,
            progress: Progress | None = None) -> MeasureRun:
    """Times every case on ``cfg.backend.device`` (module docstring)."""
    import torch

    from cgbench.backends.torch.runner import TorchRunner

    runner = TorchRunner(cfg.model, cfg.engine, seed=cfg.seed, device=cfg.backend.device,
                         dtype=cfg.backend.dtype)
    on_cuda = runner.device.type == "cuda"
    graphs = None
    if on_cuda:
        from cgbench.backends.torch.graphs import CudaGraphRunner

        shapes = list(dict.fromkeys(c.graph for c in cases if c.graph is not None))
        graphs = CudaGraphRunner(runner, shapes, time_budget_s=cfg.backend.capture_budget_s,
                                 memory_budget_gb=cfg.backend.capture_memory_gb)
    timer = _Timer(torch, on_cuda)
    run = MeasureRun([], runner.device_name, torch.__version__, on_cuda, graphs.report() if graphs else None)
    threads = torch.get_num_threads()
    if not on_cuda:
        # one intra-op thread: on a busy CPU a parallel region waits for its other threads' time slices, which
        # turns a 3 ms step into a 300 ms one at random
        torch.set_num_threads(1)
    try:
        _measure_cases(runner, graphs, cases, run, timer, repeat=repeat, warmup=warmup, progress=progress)
    finally:
        torch.set_num_threads(threads)
    return run


def _measure_cases(runner: Any, graphs: Any, cases: Sequence[Case], run: MeasureRun, timer: _Timer, *,
                   repeat: int, warmup: int, progress: Progress | None) -> None:
    next_id = 0
    for i, case in enumerate(cases):
        if progress is not None:
            progress(i, len(cases))
        graph = None
        if graphs is not None and case.graph is not None:
            shape = graphs.shape_of.get(case.graph)
            graph = graphs.graphs.get(shape) if shape is not None else None
            if graph is None:
                run.skipped.append(f"graph {list(case.graph)} ({case.label}): not captured within the budget")
                continue
        staged, ids = stage_case(runner, case, next_id)
        next_id += len(ids)
        if graph is not None:
            assert staged.shape == graphs.shape_of[case.graph]  # the replayed graph reads this staging
            fn = graph.replay
        else:
            def fn(shape=staged.shape) -> None:
                runner.compute(shape)
        for _ in range(warmup):
            fn()
        samples = [timer(fn) for _ in range(repeat)]
        for rid in ids:
            runner.release(rid)
        floor = 1e-6  # a table row needs ms > 0; a clock can read 0 for a tiny step
        run.measurements.append(Measurement(case, max(statistics.median(samples), floor),
                                            (max(min(samples), floor), max(max(samples), floor))))
    if progress is not None:
        progress(len(cases), len(cases))



# ---------------------------------------------------------------------------------------------- scoring


def quantile(values: Iterable[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def split_holdout(measurements: Sequence[Measurement], fraction: float,
                  seed: int) -> tuple[list[Measurement], list[Measurement]]:
    """(fit, held out): per mode, round(fraction · n) rows drawn with the seed — at least one when
    fraction > 0 and the mode has two rows, never all of them — in measurement order."""
    held_index: set[int] = set()
    for mode in MODES:
        idx = [i for i, m in enumerate(measurements) if m.case.mode == mode]
        n_held = min(int(fraction * len(idx) + 0.5), len(idx) - 1)
        if fraction > 0 and len(idx) >= 2:
            n_held = max(n_held, 1)
        rng = random.Random(f"holdout/{seed}/{mode}")
        held_index.update(rng.sample(idx, max(n_held, 0)))
    fit = [m for i, m in enumerate(measurements) if i not in held_index]
    held = [m for i, m in enumerate(measurements) if i in held_index]
    return fit, held


def predict_ms(cost: CalibratedCostModel, m: Measurement) -> float:
    t, p, d = m.case.real
    return cost.step_time(StepWork(t, p, d, m.case.ctx, m.case.graph)) * 1e3


def _summary(errors: list[float]) -> dict[str, float | None]:
    if not errors:
        return {"median_rel_error": None, "p90_rel_error": None, "max_rel_error": None}
    return {"median_rel_error": statistics.median(errors), "p90_rel_error": quantile(errors, 0.9),
            "max_rel_error": max(errors)}


def error_report(cost: CalibratedCostModel, fit: Sequence[Measurement],
                 held: Sequence[Measurement]) -> dict[str, Any]:
    """How well ``cost`` predicts the held-out steps: |predicted - measured| / measured, per mode and
    overall."""
    rows = []
    for m in held:
        pred = predict_ms(cost, m)
        rows.append({**m.to_dict(), "predicted_ms": round(pred, 6), "rel_error": abs(pred - m.ms) / m.ms})
    modes: dict[str, dict[str, Any]] = {}
    for mode in (*MODES, "all"):
        mine = [r for r in rows if mode in ("all", r["mode"])]
        n_fit = sum(1 for m in fit if mode in ("all", m.case.mode))
        modes[mode] = {"measured": n_fit + len(mine), "fit": n_fit, "held_out": len(mine),
                       **_summary([r["rel_error"] for r in mine])}
    return {"modes": modes, "rows": rows}


def decode_ratios(measurements: Sequence[Measurement]) -> dict[str, Any]:
    """Eager / graphed step time of the same decode-only batch (a full decode graph and the eager step of
    exactly its rows and contexts), per D, and their median."""
    graphed = {m.case.decode_ctx: m.ms for m in measurements
               if m.case.label == "graph-full" and m.case.graph is not None and m.case.graph[1] == 0}
    per_d: dict[str, float] = {}
    for m in measurements:
        if m.case.label == "decode" and m.case.decode_ctx in graphed:
            per_d[str(len(m.case.decode_ctx))] = m.ms / graphed[m.case.decode_ctx]
    per_d = dict(sorted(per_d.items(), key=lambda kv: int(kv[0])))
    return {"per_D": per_d, "median": statistics.median(per_d.values()) if per_d else None}


# ------------------------------------------------------------------------------------------- the command


def approx_parameters(model: ModelConfig) -> int:
    """Weights of the model (the roofline's count, plus the embedding table)."""
    weights = RooflineCostModel(model, HardwareConfig()).weight_bytes / model.dtype_bytes
    return int(weights + model.vocab_size * model.hidden_size)


def _on_cpu(device: str) -> bool:
    if device != "auto":
        return device == "cpu"
    import torch

    return not torch.cuda.is_available()


MAX_RUNS_PER_STEP = 10_000  # timed or warm-up runs of one step: the defaults are 7 (30 with --host) and 2


def check_run_counts(repeat: int, warmup: int) -> None:
    """``--repeat`` and ``--warmup`` within their bounds, before any measuring (2**63 timed runs per
    step would measure for ever)."""
    if not 1 <= repeat <= MAX_RUNS_PER_STEP:
        raise ConfigError(f"--repeat: must be in 1..{MAX_RUNS_PER_STEP:,}, got {repeat}")
    if not 0 <= warmup <= MAX_RUNS_PER_STEP:
        raise ConfigError(f"--warmup: must be in 0..{MAX_RUNS_PER_STEP:,}, got {warmup}")


def check_request(cfg: BenchConfig, *, repeat: int, warmup: int, holdout: float) -> None:
    """Bad input -> ConfigError naming the option or key, before anything is built."""
    check_run_counts(repeat, warmup)
    if not (0.0 <= holdout < 1.0) or math.isnan(holdout):
        raise ConfigError(f"--holdout: must be in [0, 1), got {holdout}")
    if cfg.engine.tp_size != 1:
        raise ConfigError(f"engine.tp_size: the torch runner measures one device; use 1, "
                          f"got {cfg.engine.tp_size}")
    if cfg.engine.num_speculative_tokens:
        raise ConfigError("engine.num_speculative_tokens: the torch runner runs no draft model; use 0")
    if cfg.engine.max_sequence_length < 2:
        raise ConfigError("engine.max_sequence_length: must be >= 2 to measure decode steps")
    params = approx_parameters(cfg.model)
    if params > CPU_MAX_PARAMETERS and _on_cpu(cfg.backend.device):
        raise ConfigError(f"model.name: {cfg.model.name!r} has about {params:.2g} parameters, too many to "
                          "calibrate on the CPU; use a tiny preset (model=tiny_hybrid engine=small) or a GPU")


def _notes(run: MeasureRun, repeat: int, warmup: int, errors: dict[str, Any], holdout: float,
           seed: int) -> str:
    how = ("graphed rows: CUDA graph replays timed with CUDA events; eager rows: the unpadded step's kernels "
           "timed with CUDA events" if run.on_cuda else
           "CPU: no CUDA graphs - graphed rows are the step padded to the graph's shape, computed eagerly "
           "(wall clock); eager rows: the unpadded step (wall clock)")
    parts = [f"median of {repeat} timed runs after {warmup} warm-ups; {how}"]
    for mode in MODES:
        s = errors["modes"][mode]
        if s["held_out"]:
            parts.append(f"held-out {mode}: median {100 * s['median_rel_error']:.1f}%, "
                         f"p90 {100 * s['p90_rel_error']:.1f}% (n={s['held_out']})")
    parts.append(f"fit rows only ({int(round(100 * holdout))}% held out, seed {seed}); "
                 "all rows and errors in the .report.json beside this table")
    return "; ".join(parts)


def calibrate(cfg: BenchConfig, *, repeat: int = 7, warmup: int = 2, holdout: float = 0.25,
              overrides: Sequence[str] = (), progress: Progress | None = None) -> CalibrationResult:
    """Measure, split, fit and score (module docstring). The result's table holds the fit rows."""
    check_request(cfg, repeat=repeat, warmup=warmup, holdout=holdout)
    t0 = time.perf_counter()
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    if not grid.graphs:
        raise ConfigError(f"cg.kind: the {cfg.cg.kind!r} grid has no graphs; calibrate measures graphed "
                          "steps too (use e.g. cg=megatron)")
    cases, skipped = plan_cases(cfg.engine, grid, cfg.seed)
    run = measure(cfg, cases, repeat=repeat, warmup=warmup, progress=progress)
    fit, held = split_holdout(run.measurements, holdout, cfg.seed)
    for mode in MODES:
        if not any(m.case.mode == mode for m in fit):
            raise ConfigError(f"backend.capture_budget_s: no {mode} step could be measured "
                              f"({'; '.join((skipped + run.skipped)[:3]) or 'nothing planned'})")
    table = CalibrationTable(
        model=asdict(cfg.model), device=run.device,
        graphed=tuple(m.point() for m in fit if m.case.mode == "graphed"),
        eager=tuple(m.point() for m in fit if m.case.mode == "eager"),
        torch=run.torch_version, tp_size=cfg.engine.tp_size, notes="")
    errors = error_report(CalibratedCostModel(table), fit, held)
    table = replace(table, notes=_notes(run, repeat, warmup, errors, holdout, cfg.seed))
    held_ids = {id(m) for m in held}
    report = {
        "schema": REPORT_SCHEMA, "created_at": table.created_at, "model": cfg.model.name,
        "device": run.device, "torch": run.torch_version, "on_cuda": run.on_cuda,
        "graphed_method": GRAPHED_ON_CUDA if run.on_cuda else GRAPHED_ON_CPU,
        "repeat": repeat, "warmup": warmup, "seed": cfg.seed, "overrides": list(overrides),
        "engine": asdict(cfg.engine), "cg": {"kind": cfg.cg.kind, "graphs": len(grid.graphs)},
        "cases": {"planned": len(cases), "measured": len(run.measurements),
                  "graphed": sum(1 for m in run.measurements if m.case.mode == "graphed"),
                  "eager": sum(1 for m in run.measurements if m.case.mode == "eager"),
                  "skipped": skipped + run.skipped},
        "capture": run.capture,
        "holdout": {"fraction": holdout, **errors},
        "decode_ratio": decode_ratios(run.measurements),
        "measured": [{**m.to_dict(), "split": "held_out" if id(m) in held_ids else "fit"}
                     for m in run.measurements],
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    return CalibrationResult(table, report)


def report_path(table_path: Path) -> Path:
    """The sidecar report beside a table: ``cal.json`` -> ``cal.report.json``."""
    name = table_path.name
    stem = name[:-5] if name.endswith(".json") else name
    return table_path.with_name(f"{stem}.report.json")


def default_table_path(cfg: BenchConfig, device: str) -> Path:
    slug = "".join(ch if ch.isalnum() else "-" for ch in device.lower()).strip("-") or "device"
    return Path(cfg.out_dir) / "calibration" / f"{cfg.model.name}_{slug}.json"


def write_outputs(result: CalibrationResult, table_path: Path) -> tuple[Path, Path]:
    """Writes the table and its report as one set (``safeio.write_files_atomic``: a failed write of
    the report puts the old table back); returns both paths."""
    from cgbench.safeio import dumps_strict, write_files_atomic

    sidecar = report_path(table_path)
    result.report["table"] = str(table_path)
    texts = {}
    for path, doc in ((table_path, result.table.to_dict()), (sidecar, result.report)):
        try:
            texts[path] = dumps_strict(doc)
        except ConfigError as e:
            raise ConfigError(f"cannot write {path}: {e}") from None
    write_files_atomic(texts)
    return table_path, sidecar


# ---------------------------------------------------------------------------------------------- host

HOST_MAX_HIDDEN = 256  # --host times dispatch: the model's shapes must be tiny so compute is negligible
HOST_CASES = (("decode, 1 request", Case("eager", "decode", (16,), ())),
              ("decode, 4 requests", Case("eager", "decode", (16, 16, 16, 16), ())),
              ("prefill, 8 tokens", Case("eager", "prefill", (), ((0, 8),))))


def count_ops(fn: Callable[[], None]) -> int:
    """The number of framework (aten) ops ``fn`` dispatches, counted by a dispatch mode around one call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            self.n += 1
            return func(*args, **(kwargs or {}))

    counter = _Count()
    with counter:
        fn()
    return counter.n


def check_host_request(cfg: BenchConfig, *, repeat: int, warmup: int) -> None:
    check_run_counts(repeat, warmup)
    if cfg.model.hidden_size > HOST_MAX_HIDDEN:
        raise ConfigError(f"model.hidden_size: --host times dispatch on tiny shapes; {cfg.model.name!r} has "
                          f"hidden {cfg.model.hidden_size} (> {HOST_MAX_HIDDEN}): use model=tiny_transformer "
                          "or model=tiny_hybrid")


def host_name() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} ({platform.system()}, Python {platform.python_version()})"


def calibrate_host(cfg: BenchConfig, *, repeat: int = 30, warmup: int = 5) -> tuple[Any, dict[str, Any]]:
    """Per-op host cost of the torch eager path on this CPU: tiny eager steps of ``cfg.model`` are timed
    (one intra-op thread, median of ``repeat``) and divided by the aten ops they dispatch. Returns the
    ``HostCalibration`` (the median over the cases) and a per-case report."""
    import torch

    from cgbench.backends.sim.calibrated import HostCalibration
    from cgbench.backends.torch.runner import TorchRunner

    check_host_request(cfg, repeat=repeat, warmup=warmup)
    runner = TorchRunner(cfg.model, cfg.engine, seed=cfg.seed, device="cpu", dtype="float32")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cases, next_id = [], 0
    try:
        for label, case in HOST_CASES:
            staged, ids = stage_case(runner, case, next_id)
            next_id += len(ids)

            def fn(shape=staged.shape) -> None:
                runner.compute(shape)

            ops = count_ops(fn)
            for _ in range(warmup):
                fn()
            samples = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e6)
            for rid in ids:
                runner.release(rid)
            median_us = statistics.median(samples)
            cases.append({"case": label, "ops": ops, "step_us": round(median_us, 3),
                          "per_op_us": round(median_us / ops, 4)})
    finally:
        torch.set_num_threads(threads)
    per_op = [c["per_op_us"] for c in cases]
    result = HostCalibration(
        host_op_us=round(statistics.median(per_op), 4), host=host_name(), torch=torch.__version__,
        ops_measured=sum(c["ops"] for c in cases), samples_us=tuple(per_op),
        notes=f"torch eager steps of {cfg.model.name} on the CPU, one intra-op thread, median of {repeat} "
              f"after {warmup} warm-ups, divided by the aten ops each dispatches; excludes the CUDA launch "
              "call (hardware.kernel_launch_us)")
    return result, {"model": cfg.model.name, "cases": cases}


def default_host_path(cfg: BenchConfig) -> Path:
    import platform

    slug = "".join(ch if ch.isalnum() else "-" for ch in platform.node().lower()).strip("-") or "host"
    return Path(cfg.out_dir) / "calibration" / f"host_{slug}.json"
