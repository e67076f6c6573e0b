"""``cgbench explain --megatron-log LOG``: a production run, from its own step log, in cgbench's terms.

Per rank: the eager-step fraction and the time in eager steps; the eager steps by reason, each real
shape re-matched against the captured grid (``cgbench.analysis.megatron_log.grid``: the config's
grid, else the log's capture listing, else the graphs it replays) with what the grid lacks for it;
the longest run of consecutive eager steps; deferral-like waits (``digest``); and what
another grid or the #4870 policies would have done to those very shapes (``what_if``), priced by
the cost model fitted to the same log when the model is known (``fit``).

The document (``explain_document``) is what ``--format json`` prints and ``cgbench report`` reads
(``KIND``); its schema is ``cgbench schema megatron-log``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cgbench.analysis.megatron_log.digest import LogDigest, RankDigest, Shape
from cgbench.analysis.megatron_log.grid import LogGrid, miss_detail
from cgbench.config.schema import BenchConfig
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.scheduler import GraphChoice
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid

KIND = "cgbench-megatron-log"
COVERED = "covered"  # a graph of the grid covers the shape: it ran eager for a reason the grid does not show
TOP_SHAPES = 8  # eager shapes listed per reason


@dataclass
class Pricing:
    """Prices steps for the what-ifs: the cost model fitted to the log (``fit``)."""

    model: Any  # a StepPricer
    block_size: int
    description: str

    def ms(self, real: Shape, graph: Shape | None, mean_blocks: float) -> float:
        from cgbench.analysis.megatron_log.fit import context_tokens
        from cgbench.engine.contract import StepWork

        T, P, D = real
        return self.model.step_time(StepWork(T, P, D, context_tokens(real, mean_blocks, self.block_size), graph,
                                             None, None if graph else "what-if")) * 1e3


def _shape(s: Shape | None) -> list[int] | None:
    return None if s is None else list(s)


def _fraction(a: float, b: float) -> float:
    return round(a / b, 6) if b else 0.0


def eager_reasons(r: RankDigest, lg: LogGrid) -> dict[str, dict[str, Any]]:
    """The rank's eager steps by reason: steps, time, and the most-logged shapes with what the grid lacks."""
    by: dict[str, dict[str, Any]] = {}
    for (real, graph), g in r.shapes.items():
        if graph is not None:
            continue
        got, reason = lg.resolve(real)
        if got is not None:
            reason = COVERED
        entry = by.setdefault(reason or COVERED, {"steps": 0, "time_ms": 0.0, "shapes": []})
        entry["steps"] += g.steps
        entry["time_ms"] += g.ms
        entry["shapes"].append((g.steps, real, g.ms, got))
    for reason, entry in by.items():
        entry["time_ms"] = round(entry["time_ms"], 3)
        shapes = sorted(entry["shapes"], key=lambda x: (-x[0], x[1]))
        entry["distinct_shapes"] = len(shapes)
        entry["shapes"] = [{"real": list(real), "steps": n, "mean_ms": round(ms / n, 3),
                            "detail": (f"graph {tuple(got)} covers it: it ran eager for a reason the grid does not "
                                       "show (expert-parallel ranks run eager together when any has a prefill; or "
                                       "the grid is not the one that ran)") if got is not None else
                            miss_detail(lg.grid, real, reason, lg.strict)}
                           for n, real, ms, got in shapes[:TOP_SHAPES]]
    return dict(sorted(by.items(), key=lambda kv: -kv[1]["steps"]))


def rank_summary(digest: LogDigest, r: RankDigest, lg: LogGrid) -> dict[str, Any]:
    numbering = digest.numbering[r.rank]
    out = {
        "rank": r.rank, "steps": r.steps, "first_step": numbering.first, "last_step": numbering.last,
        "interval": numbering.interval, "sampling": numbering.sampling(), "restarts": numbering.restarts,
        "idle_lines": r.idle_lines, "graphed_steps": r.graphed_steps, "eager_steps": r.eager_steps,
        "eager_step_fraction": _fraction(r.eager_steps, r.steps),
        "step_time_ms": round(r.step_ms, 3), "eager_time_ms": round(r.eager_ms, 3),
        "graphed_time_ms": round(r.graphed_ms, 3), "eager_time_fraction": _fraction(r.eager_ms, r.step_ms),
        "decode_steps": r.decode_steps, "prefill_steps": r.prefill_steps, "mixed_steps": r.mixed_steps,
        "kinds": dict(r.kinds), "eager_by_reason": eager_reasons(r, lg),
        "longest_eager_streak": r.longest_eager.to_json(),
        "deferral_like_waits": {"steps": r.wait_steps, "longest": r.longest_wait.to_json()},
        "max_requests": r.max_requests, "max_waiting": r.max_waiting, "max_paused": r.max_paused,
        "finished": r.finished, "evicted": r.evicted, "clock": [r.first_clock, r.last_clock],
        "distinct_shapes": len(r.shapes), "folded_steps": r.folded_steps,
        "graphs_replayed": len(r.graphs()),
    }
    if r.spec is not None:
        accepted, proposed, steps = r.spec
        out["spec"] = {"accepted": accepted, "proposed": proposed, "steps": steps,
                       "acceptance": _fraction(accepted, proposed)}
    return out


# ------------------------------------------------------------------------------------------ what if


@dataclass(frozen=True)
class Alternative:
    """What the log's shapes are re-matched against: a grid, and whether admission gates on it (#4870)."""

    label: str
    grid: Grid
    choice: GraphChoice
    gating: bool
    chunked: bool


def alternative_of(label: str, cfg: BenchConfig) -> Alternative:
    from cgbench.engine.scheduler import gating_active

    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    policy = make_policy(cfg.policy)
    return Alternative(label, grid, GraphChoice(grid, policy), gating_active(policy, cfg.cg, grid),
                       cfg.engine.chunked_prefill)


def _gated(alt: Alternative, real: Shape, q: int) -> tuple[Shape, Shape | None, int, int]:
    """What #4870's gating does to a prefill step that misses the grid: (the step's new shape, its
    graph or None, prompt tokens moved to later steps, requests deferred). Chunked prefill snaps the
    last chunk down to the largest graph covering the step's requests (a chunk no graph fits runs
    eager); non-chunked defers the request that made the batch miss, estimated as one prefill of the
    step's mean prefill size at a time, until the rest matches (a step whose every prefill would go
    and no decode stays: the engine would be idle, its request then admitted eager or stalled)."""
    T, P, D = real
    if alt.chunked:
        fits = [g.token_count for g in alt.grid.graphs
                if g.prefill_req_count > 0 and g.token_count <= T and g.is_applicable_for_batch_dim(
                    type(g)(g.token_count, P, D), alt.grid.strict)]
        best = max((t for t in fits if t > D * q + P - 1), default=None)
        if best is None:
            return real, None, 0, 0
        graph, _ = alt.choice.resolve(best, P, D)
        return (best, P, D), graph, T - best, 0
    chunk = (T - D * q) / P
    for k in range(1, P + 1):
        shape = (int(round(T - k * chunk)), P - k, D)
        if shape[1] == 0 and shape[2] == 0:  # a lone prefill that misses: deferring it leaves no step
            break
        graph, _ = alt.choice.resolve(*shape)
        if graph is not None:
            return shape, graph, T - shape[0], k
    return real, None, 0, 0


def what_if(digest: LogDigest, r: RankDigest, lg: LogGrid, alt: Alternative, pricing: Pricing | None,
            q: int) -> dict[str, Any]:
    """The rank's steps re-matched against ``alt``: eager steps saved and added, prompt tokens moved
    and requests deferred by gating, and the time it changes (``pricing``'s prices of each changed
    step before and after, so the fitted model's own error cancels where nothing changes)."""
    saved = added = still = moved = deferred = 0
    saved_ms = delta = 0.0
    unpriced = 0
    for (real, graph), g in r.shapes.items():
        new_shape, new_graph = real, alt.choice.resolve(*real)[0]
        tokens = reqs = 0
        if new_graph is None and alt.gating and real[1] > 0:
            new_shape, new_graph, tokens, reqs = _gated(alt, real, q)
        if graph is None and new_graph is not None:
            saved += g.steps
            saved_ms += g.ms
        elif graph is not None and new_graph is None:
            added += g.steps
        elif graph is None:
            still += g.steps
        moved += tokens * g.steps
        deferred += reqs * g.steps
        if (graph, real) == (new_graph, new_shape):
            continue
        if pricing is None:
            unpriced += g.steps
            continue
        blocks = g.mean_blocks
        before = pricing.ms(real, graph, blocks)
        after = pricing.ms(new_shape, new_graph, blocks)
        delta += (after - before) * g.steps
    eager = still + added
    out: dict[str, Any] = {
        "label": alt.label, "graphs": len(alt.grid.graphs), "gating": alt.gating,
        "chunked_prefill": alt.chunked, "eager_steps": eager, "eager_step_fraction": _fraction(eager, r.steps),
        "eager_steps_saved": saved, "eager_steps_added": added, "eager_time_saved_ms": round(saved_ms, 3),
        "prompt_tokens_moved": moved, "requests_deferred": deferred,
        "time_change_ms": round(delta, 3) if pricing is not None else None,
        "time_change_fraction": _fraction(delta, r.step_ms) if pricing is not None else None,
    }
    if pricing is None and unpriced:
        out["note"] = f"not priced ({unpriced:,} changed steps): name the model to price them"
    elif moved or deferred:
        out["note"] = ("gating's prompt tokens moved to later steps and its deferred requests' waits are not "
                       "priced: the log has no request-level data (replay the traffic with cgbench run)")
    return out


# ------------------------------------------------------------------------------------------ document


def explain_document(digest: LogDigest, lg: LogGrid, *, alternatives: list[Alternative] = (),  # type: ignore[assignment]
                     pricing: Pricing | None = None, config_text: str = "", notes: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """The explanation of ``digest`` read against ``lg`` (module docstring)."""
    from cgbench.results.document import provenance

    q = 1 + (lg.cfg.engine.num_speculative_tokens if lg.cfg is not None else 0)
    ranks = [rank_summary(digest, r, lg) for _, r in sorted(digest.ranks.items())]
    for summary, (_, r) in zip(ranks, sorted(digest.ranks.items()), strict=True):
        summary["what_if"] = [what_if(digest, r, lg, alt, pricing, q) for alt in alternatives]
    s = digest.stats
    doc = provenance()
    doc.update({
        "kind": KIND,
        "log": {"path": str(digest.path), "bytes": digest.size_bytes, "gzip": s.gzip, "lines": s.lines,
                "step_lines": s.step_lines, "other_lines": s.other_lines, "malformed_lines": s.malformed,
                "malformed_examples": [{"line": n, "text": t} for n, t in s.malformed_examples],
                "truncated_last_line": s.truncated_last, "formats": dict(s.versions),
                "ranks": sorted(digest.ranks), "capture_graphs": len(digest.capture),
                "arguments": len(digest.arguments), "emitted": digest.emitted},
        "config": config_text or None,
        "grid": lg.to_json(),
        "pricing": pricing.description if pricing is not None else None,
        "flags": list(lg.check.flags),
        "ranks": ranks,
        "notes": list(notes),
    })
    return doc


def fitted_pricing(digest: LogDigest, cfg: BenchConfig, *, rank: int | None = None) -> tuple[Pricing | None, str]:
    """The cost model fitted to ``digest`` (``fit``) as the what-ifs' pricer, and a note."""
    from cgbench.analysis.megatron_log.fit import fit
    from cgbench.backends.sim.factory import make_roofline
    from cgbench.config.schema import ConfigError

    try:
        found = fit(digest, cfg, rank=rank)
    except ConfigError as e:
        return None, f"not priced: {e}"
    fitted = [p.key.split(".", 1)[1] for p in found.parameters if p.identified]
    text = (f"the roofline model of model={cfg.model.name} on hardware={cfg.hardware.name}, fitted to this log "
            f"({', '.join(fitted) or 'nothing identified: the preset'}; RMS error "
            f"{100 * found.residuals['all']['rms_rel_error']:.2f}%)")
    return Pricing(make_roofline(cfg.model, found.hardware, cfg.engine), cfg.engine.block_size, text), ""


def explain_megatron_log(path: str, *, overrides: list[str] = (), megatron_args: str | None = None,  # type: ignore[assignment]
                         what_ifs: list[str] = (), config_dirs: list = (),  # type: ignore[assignment]
                         progress: Any = None) -> tuple[dict[str, Any], str]:
    """``cgbench explain --megatron-log``'s document, and the ``--megatron-args`` translation to print."""
    from cgbench.analysis.megatron_log.config import log_config, what_if_configs
    from cgbench.analysis.megatron_log.digest import digest_log
    from cgbench.analysis.megatron_log.grid import log_grid

    lc = log_config(list(overrides), megatron_args, list(config_dirs))
    alternatives_cfg = what_if_configs(lc, list(what_ifs), list(config_dirs))
    digest = digest_log(path, progress=progress)
    lg = log_grid(digest, lc.cfg, lc.text)
    notes: list[str] = []
    pricing = None
    if lc.cfg is not None and lc.model_named:
        pricing, note = fitted_pricing(digest, lc.cfg)
        if note:
            notes.append(note)
    elif lc.cfg is not None:
        notes.append(f"model: not named, so the default model={lc.cfg.model.name} ({lc.cfg.model.kind}) sets the "
                     "matching rule and nothing is priced: name it (model=... or --megatron-args)")
    else:
        notes.append("no config: the grid and its matching rule come from the log, and nothing is priced; "
                     "--megatron-args (or --override model=... cg=...) reads it against the grid that ran")
    alternatives = [alternative_of(label, c) for label, c in alternatives_cfg]
    if lc.cfg is None:
        for chunked in (False, True):
            alternatives.append(Alternative(
                f"#4870's gating on the log's grid ({'chunked' if chunked else 'non-chunked'} prefill)", lg.grid,
                lg.choice, True, chunked))
    for r in digest.ranks.values():
        if r.folded_steps:
            notes.append(f"rank {r.rank}: the log holds more distinct shapes than are kept exactly: "
                         f"{r.folded_steps:,} steps' token counts were rounded up to a multiple of 64 (a miss stays "
                         "a miss)" + (f", and {r.unkept_steps:,} steps are counted but in no shape's row"
                                      if r.unkept_steps else ""))
    for r in digest.ranks.values():
        if r.steps and digest.numbering[r.rank].interval != 1:
            notes.append(f"rank {r.rank}: {digest.numbering[r.rank].sampling()}; its fractions are of the logged "
                         "steps, an estimate of the run's, and its streaks and waits run over logged steps")
    return explain_document(digest, lg, alternatives=alternatives, pricing=pricing, config_text=lc.text,
                            notes=notes), lc.translation
