"""``cgbench cost``: the price of one step, graphed and eager, broken down by kernel class.

Registered on the app by ``cgbench.cli.app``. The classes are ``cost_model.BREAKDOWN_CLASSES``
(documented in ``cgbench docs cost-model``); they add up to the step's time.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Optional

import typer

from cgbench.cli.options import ConfigDirs, MegatronArgs, complete_override, config_folders, with_launch_line

CostOverrides = Annotated[Optional[list[str]], typer.Argument(
    help="Hydra overrides: the model, hardware and engine to price on, e.g. model=transformer hardware=a100.",
    show_default=False, autocompletion=complete_override)]


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"T,P,D"`` -> (T, P, D); ConfigError naming ``--shape`` otherwise."""
    from cgbench.config.schema import ConfigError

    parts = text.split(",")
    try:
        values = tuple(int(p.strip()) for p in parts)
    except ValueError:
        values = ()
    if len(parts) != 3 or len(values) != 3:
        raise ConfigError(f"--shape: expected T,P,D (three integers: tokens, prefill requests, decode "
                          f"requests), got {text!r}")
    t, p, d = values
    if t < 1 or p < 0 or d < 0 or p + d < 1:
        raise ConfigError(f"--shape: needs T >= 1, P >= 0, D >= 0 and P + D >= 1, got {text!r}")
    if p and t < p + d:
        raise ConfigError(f"--shape: T ({t}) must be at least P + D ({p + d}): every request brings a token")
    return t, p, d


def price_step(cfg: Any, shape: tuple[int, int, int], context: int) -> dict[str, Any]:
    """The step ``shape`` with ``context`` cached tokens per request, priced graphed and eager (JSON)."""
    from cgbench.backends.sim.cost_model import BREAKDOWN_CLASSES
    from cgbench.backends.sim.factory import make_roofline, roofline_host_cost
    from cgbench.config.schema import ConfigError
    from cgbench.engine.contract import StepWork
    from cgbench.grids.build import build_grid

    e = cfg.engine
    t, p, d = shape
    if cfg.backend.cost_model != "roofline":
        raise ConfigError(f"backend.cost_model: cgbench cost explains the roofline model; "
                          f"{cfg.backend.cost_model!r} has no per-class breakdown")
    if context < 0:
        raise ConfigError(f"--context: must be >= 0 cached tokens per request, got {context}")
    if p == 0 and t != d * (e.num_speculative_tokens + 1):
        raise ConfigError(f"--shape: a decode-only step has T = D x (1 + engine.num_speculative_tokens) = "
                          f"{d * (e.num_speculative_tokens + 1)}, got T={t}")
    if t > e.max_tokens or p + d > e.max_requests:
        raise ConfigError(f"--shape: exceeds engine.max_tokens ({e.max_tokens}) or engine.max_requests "
                          f"({e.max_requests})")
    if context + (t - d if p else t // max(d, 1)) > e.max_sequence_length:
        raise ConfigError(f"--context: {context} cached tokens plus this step's exceed "
                          f"engine.max_sequence_length ({e.max_sequence_length})")
    cost = make_roofline(cfg.model, cfg.hardware, e)
    grid = build_grid(cfg.cg, e, cfg.model)
    graph, reason = grid.lookup(t, p, d)
    graph_shape = tuple(graph) if graph is not None else shape
    ctx = (p + d) * context + t
    eager_work = StepWork(t, p, d, ctx, None)
    graphed_work = StepWork(t, p, d, ctx, graph_shape)
    ms = {"graphed": cost.step_time(graphed_work) * 1e3, "eager": cost.step_time(eager_work) * 1e3}
    parts = {mode: {k: v * 1e3 for k, v in cost.breakdown(w).items()}
             for mode, w in (("graphed", graphed_work), ("eager", eager_work))}
    return {
        "model": cfg.model.name, "hardware": cfg.hardware.name, "tp_size": e.tp_size,
        "shape": list(shape), "context": context, "context_tokens": ctx,
        "graph": list(graph_shape), "graph_source": "grid" if graph is not None else f"exact ({reason})",
        "eager_shape": list(cost.computed_shape(eager_work)),
        "graphed_ms": ms["graphed"], "eager_ms": ms["eager"], "eager_over_graphed": ms["eager"] / ms["graphed"],
        "host_dispatch_ms": cost.host_seconds(p) * 1e3, "kernels": cost.kernel_count(p),
        "host_ops": cost.host_ops_prefill if p else cost.host_ops_decode,
        "host_cost": roofline_host_cost(cfg.hardware),
        "breakdown_classes": list(BREAKDOWN_CLASSES), "breakdown": parts,
    }


def cost_table(doc: dict[str, Any]) -> Any:
    from rich import box
    from rich.table import Table

    t, p, d = doc["shape"]
    title = (f"Step [{t}]: {p} P + {d} D, {doc['context']} cached tokens per request — {doc['model']} on "
             f"{doc['hardware']}, tp {doc['tp_size']}")
    table = Table(title=title, box=box.SIMPLE_HEAD)
    table.add_column("class")
    gs = doc["graph"]
    table.add_column(f"graphed [{gs[0]}]: {gs[1]} P + {gs[2]} D (ms)", justify="right")
    es = doc["eager_shape"]
    table.add_column(f"eager [{es[0]}]: {es[1]} P + {es[2]} D (ms)", justify="right")
    for cls in doc["breakdown_classes"]:
        table.add_row(cls, f"{doc['breakdown']['graphed'][cls]:.4f}", f"{doc['breakdown']['eager'][cls]:.4f}")
    table.add_row("total", f"{doc['graphed_ms']:.4f}", f"{doc['eager_ms']:.4f}", style="bold")
    table.caption = (f"eager / graphed {doc['eager_over_graphed']:.2f}x; graph from {doc['graph_source']}; eager host "
                     f"dispatch {doc['host_dispatch_ms']:.3f} ms ({doc['host_ops']} ops, {doc['kernels']} kernels) at "
                     f"{doc['host_cost']}")
    return table


def cost_cmd(
    overrides: CostOverrides = None,
    shape: Annotated[str, typer.Option("--shape", help="The step: T,P,D (tokens, prefill requests, decode "
                                       "requests).", show_default=False)] = "",
    context: Annotated[int, typer.Option("--context", help="Cached tokens per request before the step.")] = 0,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    config_dirs: ConfigDirs = None,
    megatron_args: MegatronArgs = None,
) -> None:
    """Price one step on the roofline model, graphed (the grid's graph, else its exact shape) and eager,
    broken down by kernel class: projections, attention, mamba_scan, mlp, lm_head, elementwise,
    collectives, draft_head (speculative decoding's MTP head), launch, dispatch, sync (cgbench docs cost-model)."""
    from cgbench.cli.errors import out, user_errors

    with user_errors(), config_folders(config_dirs):
        from cgbench.cli.formats import TABLE_OR_JSON, check_format
        from cgbench.config.load import load_config
        from cgbench.config.schema import ConfigError

        check_format(fmt, TABLE_OR_JSON)
        if not shape:
            raise ConfigError("--shape: required, as T,P,D (e.g. --shape 1,0,1)")
        parsed = parse_shape(shape)
        ovr = with_launch_line(megatron_args, list(overrides or []), config_dirs)
        cfg = load_config(ovr, config_dirs=list(config_dirs or []))
        doc = price_step(cfg, parsed, context)
        if fmt == "json":
            sys.stdout.write(json.dumps(doc) + "\n")
        else:
            out.print(cost_table(doc))
