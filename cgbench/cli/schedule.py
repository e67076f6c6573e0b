"""``cgbench schedule STATE.json``: one scheduling round from a saved engine state, per policy.

The command is registered on the app in ``cgbench.cli.app``; the work is in ``cgbench.engine.replay``
(the file is read by ``cgbench.results.state_file``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cgbench.cli.options import ConfigDirs, config_folders

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from cgbench.engine.replay import RoundDecision, RoundState

MAX_LISTED = 8  # admitted requests / queued ids shown per table cell

STOP_TEXT = {
    "": "queue empty",
    "deferred": "gating deferral",
    "partial_chunk": "partial chunk",
    "single_token_guard": "flash-attn guard",
    "ssm_chunk_alignment": "SSM chunk alignment",
    "max_requests": "max_requests",
    "paused_requests": "paused requests",
    "max_tokens": "max_tokens",
    "kv_blocks": "KV blocks",
}

EAGER_TEXT = {  # cgbench.grids.lookup miss reasons
    "shape": "no graph with this P / D",
    "tokens_over_max": "T above every graph",
    "no_mixed_graphs": "no prefill / mixed graphs",
    "decode_only_over_max": "D above every graph",
    "no_graphs": "no graphs captured",
    "pad_guard": "padding over max_ratio",
}


def schedule_cmd(
    state_file: Annotated[Path, typer.Argument(
        metavar="STATE.json", show_default=False,
        help="Engine state at the start of a round: model, engine, cg, batch, chunked_request, queue "
        "(cgbench docs schedule).")],
    policy: Annotated[str, typer.Option(
        "--policy", "-p",
        help="budget, megatron, defer, pad_guard, wait_timeout, megatron_6675, cover (or a plug-in's: "
        "installed, or declared in a --config-dir's plugins.yaml), or all (every policy side by side, "
        "plug-ins included).")] = "all",
    fmt: Annotated[str, typer.Option(
        "--format", "-f",
        help="table, markdown, csv (one column per policy), or json (one object for one policy, a list for "
        "--policy all).")] = "table",
    config_dirs: ConfigDirs = None,
) -> None:
    """Replay one scheduling round from STATE.json under each admission policy.

    Shows which requests are admitted (and in what chunks), which are deferred and why, the step's real
    (T, P, D) shape and the graph it replays (or why it runs eager), using the engine's own scheduler."""
    from cgbench.cli.errors import out, user_errors

    with user_errors(), config_folders(config_dirs):  # their plugins.yaml: plug-in policies
        from cgbench.cli.console import print_warning
        from cgbench.cli.formats import check_format
        from cgbench.config.registry.policies import options_of, policy_names, policy_spec
        from cgbench.engine.policy_registry import build_policy
        from cgbench.engine.replay import replay_all
        from cgbench.engine.scheduler import gating_without_prefill_graphs
        from cgbench.results.state_file import load_state

        check_format(fmt)
        if policy != "all":
            policy_spec(policy, key="--policy")  # a built-in or an installed plug-in, else did-you-mean
        names = policy_names() if policy == "all" else (policy,)
        state = load_state(state_file)
        for name in names:
            pol = build_policy(name, options_of(state.policy, name))
            warning = gating_without_prefill_graphs(pol, state.cg, state.grid,
                                                    chunked_prefill=state.engine.chunked_prefill)
            if warning:
                print_warning(warning)
        decisions = replay_all(state, names)
        if fmt == "json":
            doc = [d.to_json() for d in decisions] if policy == "all" else decisions[0].to_json()
            sys.stdout.write(json.dumps(doc) + "\n")
            return
        if fmt in ("markdown", "csv"):
            from cgbench.cli.render import csv_text, markdown_table

            cols, rows = decision_rows(state, decisions, plain=True)
            if fmt == "csv":
                sys.stdout.write(csv_text(cols, rows))
            else:
                sys.stdout.write(markdown_table(cols, rows, start_summary(state)))
            return
        out.print(start_summary(state), highlight=False, markup=False, soft_wrap=True)
        out.print(decisions_table(state, decisions))


# ---------------------------------------------------------------------------------------------
# Rendering


def _shape(t: tuple[int, int, int] | list[int]) -> str:
    return "(" + ", ".join(str(x) for x in t) + ")"


def _listing(items: list[str]) -> str:
    if not items:
        return "-"
    shown = items[:MAX_LISTED]
    more = len(items) - len(shown)
    return "\n".join(shown + ([f"... +{more} more"] if more else []))


def start_summary(state: RoundState) -> str:
    """The round's starting state in one paragraph (printed above the table)."""
    b, e = state.batch, state.engine
    strict = "strict" if state.grid.strict else "non-strict"
    head = ", ".join(f"r{q.id} {q.prompt_tokens}" + (" (chunked)" if q.id == state.chunked_request_id else "")
                     for q in state.queue[:MAX_LISTED])
    if len(state.queue) > MAX_LISTED:
        head += f", ... +{len(state.queue) - MAX_LISTED} more"
    return (f"{state.source}: start of round: A={b.active_tokens} P={b.prefill} D={b.decode} paused={b.paused} "
            f"free_blocks={state.free_blocks}; queue (prompt tokens left): {head or 'empty'}; "
            f"{state.model.kind} ({strict}), {'chunked' if e.chunked_prefill else 'non-chunked'} prefill, "
            f"max_tokens={e.max_tokens} max_requests={e.max_requests} msl={e.max_sequence_length}, "
            f"{len(state.grid.graphs)} graphs ({state.grid.name})")


def _graph_cell(d: RoundDecision) -> str | Text:
    from rich.text import Text

    if not d.step_runs:
        return "no step (empty batch)"
    if d.graph is None:
        reason = d.eager_reason or ""
        return Text.assemble(("eager", "red"), f" ({reason}):\n{EAGER_TEXT.get(reason, reason)}")
    pad = d.graph[0] - d.batch_after[0]
    return Text.assemble((_shape(d.graph), "green"), f"\npads {pad} token{'s' if pad != 1 else ''}")


def _deferral_cell(state: RoundState, d: RoundDecision) -> str:
    if d.deferred is None:
        return "-"
    text = f"r{d.deferred}, wait {dict(d.cg_wait_iters)[d.deferred]}"
    if d.deferred_candidate is None:
        return text
    T, P, D = d.deferred_candidate
    if state.engine.chunked_prefill:
        A = d.batch_after[0]
        return text + f"\nno graph T in [{A + 1}, {T}]\nserves P={P}, D={D}"
    return text + f"\n{_shape(d.deferred_candidate)}\nhas no graph"


def _queue_cell(d: RoundDecision) -> str:
    if not d.queue_after:
        return "empty"
    ids = " ".join(f"r{i}" for i in d.queue_after[:MAX_LISTED])
    return f"{len(d.queue_after)}: {ids}" + (" ..." if len(d.queue_after) > MAX_LISTED else "")


def decision_rows(state: RoundState, decisions: list[RoundDecision],
                  plain: bool = False) -> tuple[list[str], list[list[str | Text]]]:
    """(columns, rows) of the decisions table; ``plain`` drops the colours and joins lines with '; '."""
    from rich.text import Text

    def clean(cell: str | Text) -> str | Text:
        if not plain:
            return cell
        return "; ".join((cell.plain if isinstance(cell, Text) else cell).splitlines())

    cols = ["step" if plain else ""] + [d.policy + (" (gating)" if d.gating_active else "") for d in decisions]
    rows = [
        ("admitted\n(id: chunk)", lambda d: _listing(
            [f"r{i}: {c}" + ("" if final else " partial") for i, c, final in d.admitted])),
        ("deferred\n(cg_wait_iters)", lambda d: _deferral_cell(state, d)),
        ("stopped by", lambda d: STOP_TEXT.get(d.stop_reason, d.stop_reason)),
        ("queue after", _queue_cell),
        ("chunked", lambda d: f"r{d.chunked_request_id}" if d.chunked_request_id >= 0 else "-"),
        ("step\n(T, P, D)", lambda d: _shape(d.batch_after) if d.step_runs else "-"),
        ("graph", _graph_cell),
        ("starvation\nwarnings", lambda d: str(d.warnings)),
    ]
    return cols, [[label.replace("\n", " ") if plain else label, *(clean(cell(d)) for d in decisions)]
                  for label, cell in rows]


def decisions_table(state: RoundState, decisions: list[RoundDecision]) -> Table:
    """Every policy's decision side by side, one column each."""
    from rich import box
    from rich.table import Table

    cols, rows = decision_rows(state, decisions)
    t = Table(box=box.SIMPLE_HEAVY, show_lines=True)
    t.add_column(cols[0], style="bold", no_wrap=True)
    for c in cols[1:]:
        t.add_column(c)
    for row in rows:
        t.add_row(*row)
    return t
