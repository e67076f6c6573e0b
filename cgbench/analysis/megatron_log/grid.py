"""The captured grid a Megatron step log is read against, and how well the log agrees with it.

Three sources, best first: the config the user gives (``--megatron-args`` or overrides: the grid
cgbench builds for it, matched strictly on a hybrid model); the log's own capture listing (Megatron
lists every graph it captures, in stored order); else the graphs the log's steps replay, a lower
bound of the grid (a graph never replayed is unknown). Without a config, the matching rule (strict
on hybrid models) is inferred: the rule under which every graphed step's graph is the grid's match
for its real shape and the fewest eager steps have a graph that covers them.

``GridCheck`` holds each disagreement by name: a replayed graph the grid lacks, a step whose graph
is not the grid's match, a capture listing or an emitted header (``cgbench run --emit-megatron-log``)
naming another model or grid. ``cgbench explain`` reports them; ``cgbench calibrate`` refuses a log
with any (``refusal``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cgbench.analysis.megatron_log.digest import LogDigest, Shape
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.scheduler import GraphChoice
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.grids.shapes import BatchShape

CONFIG, CAPTURE, REPLAYED = "config", "capture", "replayed"


@dataclass
class GridCheck:
    """Disagreements between a log and the grid it is read against (``code``, ``message``)."""

    flags: list[dict[str, str]] = field(default_factory=list)

    def add(self, code: str, message: str) -> None:
        self.flags.append({"code": code, "message": message})

    def refusal(self, label: str) -> str | None:
        """One line for a command that must refuse such a log (calibrate), or None."""
        if not self.flags:
            return None
        return f"--megatron-log: {label}: " + "; ".join(f["message"] for f in self.flags[:2]) + (
            f" (and {len(self.flags) - 2} more)" if len(self.flags) > 2 else "")


@dataclass
class LogGrid:
    """The grid a log is read against, where it came from, and the graph choice of each real shape."""

    grid: Grid
    source: str  # CONFIG, CAPTURE or REPLAYED
    description: str
    strict: bool
    strict_source: str
    choice: GraphChoice
    check: GridCheck
    cfg: BenchConfig | None = None

    def resolve(self, shape: Shape) -> tuple[Shape | None, str | None]:
        return self.choice.resolve(*shape)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "description": self.description, "graphs": len(self.grid.graphs),
                "strict": self.strict, "strict_source": self.strict_source}


def _shape(s: Shape) -> str:
    return f"({s[0]}, {s[1]}, {s[2]})"


def _agreement(digest: LogDigest, grid: Grid) -> tuple[int, int, int, int]:
    """(graphed steps whose graph is the grid's match, graphed steps, eager steps a graph covers,
    eager steps) over every rank."""
    agree = graphed = covered = eager = 0
    for r in digest.ranks.values():
        for (real, graph), g in r.shapes.items():
            hit, _ = grid.lookup(*real)
            match = None if hit is None else tuple(hit)
            if graph is None:
                eager += g.steps
                covered += g.steps if match is not None else 0
            else:
                graphed += g.steps
                agree += g.steps if match == graph else 0
    return agree, graphed, covered, eager


def infer_strict(digest: LogDigest, graphs: list[Shape]) -> tuple[bool, str]:
    """The matching rule that agrees best with the log (module docstring), and why."""
    shapes = [BatchShape(*g) for g in graphs]
    scores = {}
    for strict in (True, False):
        agree, graphed, covered, eager = _agreement(digest, Grid("log", shapes, strict))
        scores[strict] = (agree, -covered, graphed, eager)
    if scores[True][:2] == scores[False][:2]:
        return True, ("assumed, as for a hybrid model: strict and non-strict matching explain the log's steps "
                      "alike; give the model to be sure")
    strict = scores[True][:2] > scores[False][:2]
    agree, neg_covered, graphed, eager = scores[strict]
    model = "a hybrid model" if strict else "a transformer: decodes may fill prefill slots"
    return strict, (f"inferred ({model}): {agree:,} of {graphed:,} graphed steps replay its match, "
                    f"{-neg_covered:,} of {eager:,} eager steps have a graph that covers them")


def log_grid(digest: LogDigest, cfg: BenchConfig | None, config_text: str = "") -> LogGrid:
    """The grid ``digest`` is read against: ``cfg``'s when given (``config_text`` says where it came
    from), else the log's capture listing, else the graphs it replays; with every disagreement."""
    check = GridCheck()
    if cfg is not None:
        grid = build_grid(cfg.cg, cfg.engine, cfg.model)
        strict = cfg.model.kind == "hybrid"
        choice = GraphChoice(grid, make_policy(cfg.policy))
        out = LogGrid(grid, CONFIG, f"cg={cfg.cg.kind} from {config_text or 'the config'} ({len(grid.graphs)} graphs)",
                      strict, f"model.kind={cfg.model.kind}", choice, check, cfg)
        _check_config(digest, out)
    else:
        if digest.capture and len(digest.capture) == digest.capture_count:
            graphs, source = list(digest.capture), CAPTURE
            text = f"the log's capture listing ({len(graphs)} graphs)"
        else:
            graphs, source = sorted(digest.replayed(), reverse=True), REPLAYED
            text = (f"the {len(graphs)} graphs the log's steps replay (a lower bound of the captured grid: "
                    "a graph never replayed is unknown)")
        strict, why = infer_strict(digest, graphs)
        grid = Grid(source, [BatchShape(*g) for g in graphs], strict)
        out = LogGrid(grid, source, text, strict, why, GraphChoice(grid, _no_gating()), check)
    _check_replays(digest, out)
    if digest.capture_conflicts:
        check.add("capture_conflict", f"the log lists {digest.capture_conflicts + 1} different captured grids "
                                      "(two runs in one file?): read against the first")
    return out


def _no_gating() -> Any:
    """The no-gating policy (its forward guard never refuses a graph)."""
    from cgbench.config.schema import PolicyConfig

    return make_policy(PolicyConfig(name="budget"))


def _check_config(digest: LogDigest, lg: LogGrid) -> None:
    """The config against what the log says of itself: its emitted header, its capture listing."""
    cfg, check = lg.cfg, lg.check
    assert cfg is not None
    graphs = [tuple(g) for g in lg.grid.graphs]
    em = digest.emitted
    if em is not None:
        from cgbench.analysis.megatron_log.emit import grid_digest

        if em.get("model") not in (None, cfg.model.name):
            check.add("other_model", f"the log was emitted for model {em.get('model')!r} "
                                     f"(cgbench run --emit-megatron-log), not for model {cfg.model.name!r}")
        if em.get("grid_digest") not in (None, grid_digest(graphs)):  # type: ignore[arg-type]
            check.add("other_grid", f"the log was emitted for grid cg={em.get('grid')} ({em.get('graphs')} graphs, "
                                    f"digest {em.get('grid_digest')}), not this config's cg={cfg.cg.kind} "
                                    f"({len(graphs)} graphs, digest {grid_digest(graphs)})")  # type: ignore[arg-type]
    if digest.capture and digest.capture != graphs:
        first = next((i for i, (a, b) in enumerate(zip(digest.capture, graphs, strict=False)) if a != b),
                     min(len(digest.capture), len(graphs)))
        theirs = _shape(digest.capture[first]) if first < len(digest.capture) else "nothing"
        ours = _shape(graphs[first]) if first < len(graphs) else "nothing"  # type: ignore[arg-type]
        check.add("other_grid", f"the log captured {len(digest.capture)} graphs, cg={cfg.cg.kind} has {len(graphs)}: "
                                f"graph {first + 1} is {theirs} in the log, {ours} in the config")


def _check_replays(digest: LogDigest, lg: LogGrid) -> None:
    """Every replayed graph is in the grid, and (without expert parallelism, where the graph's T is the
    ranks' maximum) every graphed step replays the grid's match for its real shape."""
    check = lg.check
    grid = {tuple(g) for g in lg.grid.graphs}
    missing = sorted(g for g in digest.replayed() if g not in grid)
    if missing:
        check.add("graph_not_in_grid", f"the log replays {len(missing)} graph(s) the grid does not hold, e.g. "
                                       f"{_shape(missing[-1])}: the log is of another grid")
    ep = lg.cfg is not None and lg.cfg.engine.ep_size > 1
    if ep:
        return
    wrong = steps = 0
    example = None
    for r in digest.ranks.values():
        for (real, graph), g in r.shapes.items():
            if graph is None or graph not in grid:
                continue
            steps += g.steps
            got, _ = lg.resolve(real)
            if got != graph:
                wrong += g.steps
                example = example or (real, graph, got)
    if wrong:
        assert example is not None
        real, graph, got = example
        check.add("other_match", f"{wrong:,} of {steps:,} graphed steps replay a graph other than the grid's match, "
                                 f"e.g. {_shape(real)} replayed {_shape(graph)} where the grid matches "
                                 f"{_shape(got) if got else 'no graph'}: another grid or matching rule")


def miss_detail(grid: Grid, shape: Shape, reason: str | None, strict: bool) -> str:
    """What the grid lacks for a real shape that ran eager, in words."""
    T, P, D = shape
    graphs = [tuple(g) for g in grid.graphs]
    if reason == "no_graphs":
        return "the grid holds no graph"
    if reason == "pad_guard":
        return "a graph covers it, but the policy's pad guard ran it eager"
    if P == 0:
        dec = [g for g in graphs if g[1] == 0]
        if not dec:
            return "the grid holds no decode-only graph"
        cover = [g for g in dec if g[0] >= T]
        if not cover:
            return f"T = {T} is above the largest decode-only graph's T = {max(g[0] for g in dec)}"
        best = max(g[2] for g in cover)
        if best < D:
            return f"no decode-only graph with T >= {T} has D >= {D} (the most: D = {best})"
        return f"no decode-only graph with T >= {T} has exactly D = {D} (this grid pads no decode batch)"
    mixed = [g for g in graphs if g[1] > 0]
    if not mixed:
        return "the grid holds no prefill or mixed graph"
    big = [g for g in mixed if g[0] >= T]
    if not big:
        return f"T = {T} is above the largest prefill/mixed graph's T = {max(g[0] for g in mixed)}"
    wide = [g for g in big if g[1] >= P]
    if not wide:
        return f"no graph with T >= {T} has P >= {P} (the most: P = {max(g[1] for g in big)})"
    if strict:
        near = max(wide, key=lambda g: (g[2], -g[0]))
        return (f"every graph with T >= {T} and P >= {P} has D < {D} under strict matching (the most: "
                f"{_shape(near)})")
    near = max(wide, key=lambda g: (g[1] + g[2], -g[0]))
    return f"every graph with T >= {T} and P >= {P} has P + D < {P + D} (the most: {_shape(near)})"


def refuse_unchecked(cfg: BenchConfig | None, command: str) -> None:
    """A command that needs the model (calibrate) refuses to run without a config."""
    if cfg is None:
        raise ConfigError(f"{command}: name the model the log ran (--megatron-args '...' or overrides such as "
                          "model=hybrid hardware=h100): the fit prices steps with its layers")
