"""``cgbench explain RUN.json --request N``: why a request of a run waited (registered in ``cli.app``).

The work is in ``cgbench.analysis.explain_request``; this module parses, calls and prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from cgbench.analysis.explain_request import Explanation

EXPLAIN_FORMATS = ("text", "json")


def explain_cmd(
    run_file: Annotated[Path, typer.Argument(metavar="RUN.json", show_default=False,
                                             help="A result JSON of cgbench run (backend=sim).")],
    request: Annotated[Optional[int], typer.Option(
        "--request", "-r", help="The request id: explains the round in which it was first deferred.",
        show_default=False)] = None,
    step: Annotated[Optional[int], typer.Option(
        "--step", "-s", help="Explain the round that scheduled step K instead (for --request N if given, "
        "else for the request it deferred).", show_default=False)] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json (with the round's state in "
                                     "cgbench schedule's format).")] = "text",
    state_out: Annotated[Optional[Path], typer.Option(
        "--state", help="Also write the round's starting state here (replay it with cgbench schedule).",
        show_default=False)] = None,
) -> None:
    """Why request N of a run waited: its first deferred round rebuilt and replayed with cgbench schedule's code.

    The round is rebuilt from what every run records (its config and the deferred requests' waits) by
    re-running the simulation with the step-by-step engine up to it (cgbench docs schedule). Shows why the
    request waited, the graph it needed, what would have admitted it, and how long it waited in total.
    Exit 2 when the run cannot be rebuilt (an older result, backend=torch, expert parallelism) or the
    request was never deferred (use --step K)."""
    from cgbench.cli.errors import out, user_errors

    with user_errors():
        from cgbench.analysis.explain_request import explain
        from cgbench.cli.formats import check_format
        from cgbench.results.document import load_result

        check_format(fmt, EXPLAIN_FORMATS)
        if request is None and step is None:
            from cgbench.config.schema import ConfigError

            raise ConfigError("name a request (--request N) or a step (--step K)")
        from cgbench.safeio import check_writable, declare_inputs

        declare_inputs({"RUN": run_file})  # --state onto the run it explains would replace the run
        if state_out is not None:
            check_writable(state_out, "--state")
        doc = load_result(run_file)
        found = explain(doc, str(run_file), request=request, step=step)
        if state_out is not None:
            from cgbench.safeio import write_json_atomic

            write_json_atomic(state_out, found.state, "--state")
        if fmt == "json":
            sys.stdout.write(json.dumps(found.to_json()) + "\n")
            return
        for line in explanation_lines(found):
            out.print(line, markup=False, highlight=False, soft_wrap=True)


def _shape(s) -> str:
    return "(" + ", ".join(str(v) for v in s) + ")"


def explanation_lines(e: Explanation) -> list[str]:
    """The explanation as plain lines."""
    from cgbench.analysis.explain_request import NO_CHUNK_SIZE
    from cgbench.cli.schedule import EAGER_TEXT, STOP_TEXT

    d, b = e.decision, e.state["batch"]
    lines = [f"step {e.step}, policy {e.policy}: the round starts with A={b['active_tokens']} P={b['prefill']} "
             f"D={b['decode']} paused={b['paused']}, {len(e.state['queue'])} request(s) queued"]
    admitted = ", ".join(f"r{i}: {c}" for i, c, _ in d.admitted[:8]) + (" ..." if len(d.admitted) > 8 else "")
    lines.append(f"admitted: {admitted or 'nothing'}; stopped by {STOP_TEXT.get(d.stop_reason, d.stop_reason)}; "
                 + _graph(d.batch_after, d.graph, d.eager_reason))
    if e.request is None:
        lines.append("no request was deferred in this round")
    elif d.deferred == e.request and d.deferred_candidate is not None:
        waits = dict(d.cg_wait_iters).get(e.request)
        if e.miss_reason == NO_CHUNK_SIZE:
            T = d.batch_after[0]
            why = (f"a chunk must fill a graph exactly, and no graph with P >= {d.deferred_candidate[1]} has a "
                   f"token size from {T + 1} to {d.deferred_candidate[0]}")
        else:
            why = f"which no captured graph covers ({EAGER_TEXT.get(e.miss_reason or '', e.miss_reason)})"
        lines.append(f"request {e.request} deferred: with it the step would be {_shape(d.deferred_candidate)}, "
                     f"{why}; its cg_wait_iters becomes {waits}")
    elif any(i == e.request for i, _, _ in d.admitted):
        lines.append(f"request {e.request} was admitted in this round")
    else:
        lines.append(f"request {e.request} was not deferred in this round "
                     f"({'still queued' if e.request in d.queue_after else 'not in the queue'})")
    for w in e.what_ifs:
        lines.append(f"what if {w.change}: {'admitted' if w.admitted else 'not admitted'}; {w.detail}")
    if e.waits is not None:
        wt = e.waits
        admit = wt["first_admit_step"]
        wait = (f"first admitted at step {admit}, {admit - wt['arrival_step']} step(s) after it arrived"
                if admit >= 0 else "never admitted")
        lines.append(f"in total: deferred in {wt['deferrals']} round(s), at most {wt['max_cg_wait_iters']} in a row; "
                     f"{wait}" + (f"; evicted {wt['evictions']} time(s)" if wt["evictions"] else ""))
    lines.append("the engine made the same decision" if e.agrees else
                 "WARNING: the replay differs from the engine's decision in this round")
    return lines


def _graph(shape, graph, reason) -> str:
    ran = f"replays graph {_shape(graph)}" if graph is not None else f"runs eager ({reason})"
    return f"the step {_shape(shape)} {ran}"
