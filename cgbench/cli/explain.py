"""``cgbench explain RUN.json --request N``: why a request of a run waited (registered in ``cli.app``);
``cgbench explain --megatron-log LOG``: a production run's step log in cgbench's terms.

The work is in ``cgbench.analysis.explain_request`` and ``cgbench.analysis.megatron_log.explain``;
this module parses, calls and prints (the log's tables: ``cgbench.cli.render_megatron_log``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from cgbench.cli.options import ConfigDirs, config_folders

if TYPE_CHECKING:
    from cgbench.analysis.explain_request import Explanation

EXPLAIN_FORMATS = ("text", "json")


def explain_cmd(
    run_file: Annotated[Optional[Path], typer.Argument(metavar="RUN.json", show_default=False,
                                                       help="A result JSON of cgbench run (backend=sim).")] = None,
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
    megatron_log: Annotated[Optional[Path], typer.Option(
        "--megatron-log", metavar="LOG", show_default=False,
        help="Explain a production run from Megatron's console step log instead (--inference-logging-step-interval; "
        "gzip'd or not): eager steps by reason, streaks, waits, what-ifs. See cgbench docs megatron-logs.")] = None,
    megatron_args: Annotated[Optional[str], typer.Option(
        "--megatron-args", show_default=False, help="With --megatron-log: the run's Megatron launch arguments "
        "('--hidden-size 4096 ...' or @FILE): the grid and model the log is read against.")] = None,
    override: Annotated[Optional[list[str]], typer.Option(
        "--override", "-O", metavar="KEY=VALUE", show_default=False,
        help="With --megatron-log: a Hydra override of that config (repeatable), e.g. -O model=hybrid "
        "-O hardware=h200.")] = None,
    what_if: Annotated[Optional[list[str]], typer.Option(
        "--what-if", metavar="OVERRIDES", show_default=False,
        help="With --megatron-log: overrides of another grid or policy to re-match the log's shapes against "
        "(repeatable), e.g. --what-if cg=dense --what-if 'cg=advised' with --config-dir of an advise run.")] = None,
    rank: Annotated[Optional[int], typer.Option(
        "--rank", metavar="R", show_default=False, help="With --megatron-log: the rank whose details the tables show "
        "(default: the lowest; JSON holds every rank).")] = None,
    config_dirs: ConfigDirs = None,
) -> None:
    """Why request N of a run waited: its first deferred round rebuilt and replayed with cgbench schedule's code.

    The round is rebuilt from what every run records (its config and the deferred requests' waits) by
    re-running the simulation with the step-by-step engine up to it (cgbench docs schedule). Shows why the
    request waited, the graph it needed, what would have admitted it, and how long it waited in total.
    Exit 2 when the run cannot be rebuilt (an older result, backend=torch, expert parallelism) or the
    request was never deferred (use --step K).

    With --megatron-log LOG: the production run that wrote LOG, in cgbench's terms (see --megatron-log)."""
    from cgbench.cli.errors import out, user_errors

    if megatron_log is not None:
        with user_errors(), config_folders(config_dirs):
            _explain_log(megatron_log, run_file, request, step, state_out, fmt, megatron_args, list(override or []),
                         list(what_if or []), rank, list(config_dirs or []))
        return
    with user_errors():
        from cgbench.analysis.explain_request import explain
        from cgbench.cli.formats import check_format
        from cgbench.results.document import load_result

        check_format(fmt, EXPLAIN_FORMATS)
        if run_file is None:
            from cgbench.config.schema import ConfigError

            raise ConfigError("name a result (RUN.json) or a log (--megatron-log LOG)")
        for name, given in (("--megatron-args", megatron_args), ("--override", override), ("--what-if", what_if),
                            ("--rank", rank)):
            if given:
                from cgbench.config.schema import ConfigError

                raise ConfigError(f"{name}: reads a Megatron log: give --megatron-log LOG")
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
    if e.gating.startswith("no"):  # then no round of the run defers: say why first
        lines.append(f"gating active: {e.gating}")
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


def _explain_log(log: Path, run_file: Path | None, request: int | None, step: int | None, state_out: Path | None,
                 fmt: str, megatron_args: str | None, overrides: list[str], what_ifs: list[str], rank: int | None,
                 config_dirs: list[Path]) -> None:
    """``cgbench explain --megatron-log LOG``: read, explain, print (a table, or the JSON document)."""
    from cgbench.analysis.megatron_log.explain import explain_megatron_log
    from cgbench.cli.console import err, out
    from cgbench.cli.formats import check_format
    from cgbench.cli.render_megatron_log import explain_lines, log_progress
    from cgbench.config.schema import ConfigError
    from cgbench.safeio import declare_inputs

    check_format(fmt, EXPLAIN_FORMATS)
    if fmt == "json" and rank is not None:
        raise ConfigError("--rank: picks the rank the tables show; --format json holds every rank: drop one of them")
    for name, given in (("RUN.json", run_file), ("--request", request), ("--step", step), ("--state", state_out)):
        if given is not None:
            raise ConfigError(f"{name}: explains a cgbench run, not a Megatron log: drop it or --megatron-log")
    declare_inputs({"--megatron-log": log})
    with log_progress(log) as progress:
        doc, translation = explain_megatron_log(str(log), overrides=overrides, megatron_args=megatron_args,
                                                what_ifs=what_ifs, config_dirs=config_dirs, progress=progress)
    if translation:
        err.print(translation, end="", highlight=False, markup=False, soft_wrap=True)
    if rank is not None and rank not in doc["log"]["ranks"]:
        raise ConfigError(f"--rank: {log} has no step line of rank {rank} (ranks: "
                          f"{', '.join(map(str, doc['log']['ranks']))})")
    if fmt == "json":
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    for item in explain_lines(doc, rank):
        if isinstance(item, str):
            out.print(item, markup=False, highlight=False, soft_wrap=True)
        else:
            out.print(item)
