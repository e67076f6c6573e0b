"""The console step line of Megatron-LM's dynamic inference engine, as data.

With ``--inference-logging-step-interval N`` (N > 0) the engine (``megatron/core/inference/engines/
dynamic_engine.py``, its "console_logging" block) writes one line every N steps, after the step's
counter moved on (so the logged steps are N, 2N, ...). The line is built from fixed pieces with
printf-style fields; megatron-core 0.19.x (the ``core_r0.19.0`` line) and ``main`` differ only in the
KV-block piece. This module holds those pieces in cgbench's own notation (``{name:d}`` an integer,
``{name:.3f}`` a number with three decimals, ``{name}`` text) and builds from them both the parser
(``cgbench.workload.megatron_log``) and the writer (``cgbench run --emit-megatron-log``), so the two
can never disagree. ``tests/data/megatron_log_format.json`` pins the same pieces, and a test holds
them to Megatron's source at both refs when a Megatron-LM checkout is at hand.

The pieces, in line order::

    HEAD + CONFIG (inside HEAD's {config}) + REQS + BLOCKS[version] + MEM [+ SPEC] [+ PREFIX_HITS]
         [+ PREFILL + PREFIX_UTIL [+ MAMBA]]

A decode-only step's line is wrapped in ``COLOR`` (blue) in the legacy scheduling mode. Batch shapes
print as ``SHAPE`` (``InferenceBatchDimensions.__str__``); the graph is ``GRAPH_OFF`` when the step
ran eager. Capture writes one ``CAPTURE`` line per graph, in the list's stored order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

V019 = "0.19"  # megatron-core 0.19.x (core_r0.19.0), the project's reference 0.19.2
MAIN = "main"
VERSIONS = (V019, MAIN)

HEAD = "* rank {rank:d} | step {step:d} | {clock} ... time: {ms:.3f} ms{config} ... "
CONFIG = " [{kind} + real config {real} + cuda graph {graph}]"
REQS = "reqs: a {active:d}/{max_requests:d}, p {paused:d}, w {waiting:d}, f {finished:d}, e {evicted:d} ... "
BLOCKS = {
    V019: "blocks: a {active_used:d}/{active_total:d}, p {paused_used:d}/{paused_total:d} ... ",
    MAIN: "blocks: occupied {occupied:d}/{usable:d}, allocatable {allocatable:d}, active-used {active_used:d}, "
          "paused-used {paused_used:d}/{paused_total:d} ... ",
}
MEM = "mem: tensors {tensors:d}, alloc {alloc_gb:.1f} gb, res {res_gb:.1f} gb."
SPEC = " ... spec (cumul): accept {rate:.1f}% ({accepted:d}/{proposed:d} in {steps:d} steps) [{per_position}]"
SPEC_POSITION = "t{position:d}={rate:.1f}%"  # joined with ", " inside SPEC's brackets
PREFIX_HITS = " ... prefix cache (cumul): {hits:d} hits, {blocks:d} blocks matched"
PREFILL = " ... prefill (cumul): computed {computed:d}, skipped {skipped:d} ({skipped_pct:.1f}% skipped)"
PREFIX_UTIL = " ... prefix cache util: KV {cached:d}/{total:d} blocks cached ({evictable:d} evictable)"
MAMBA = ", mamba {used:d}/{slots:d} durable slots"
SHAPE = "[{T:d}]: {P:d} P + {D:d} D"
GRAPH_OFF = "OFF"
KINDS = ("decode", "non-decode", "idle")
KIND_WITH_PREVIOUS = "{kind} (prev: {previous})"  # async scheduling: the launched step differs from the consumed
COLOR = "\x1b[94m{line}\x1b[0m"
CAPTURE = "  [graph {index:d}/{count:d}] {shape} | pool reserved="
CLOCK = "%H:%M:%S"  # datetime.strftime format of HEAD's {clock}

# The pieces a test pins (tests/data/megatron_log_format.json), by name.
PIECES: dict[str, str] = {"head": HEAD, "config": CONFIG, "reqs": REQS, "mem": MEM, "spec": SPEC,
                          "spec_position": SPEC_POSITION, "prefix_hits": PREFIX_HITS, "prefill": PREFILL,
                          "prefix_util": PREFIX_UTIL, "mamba": MAMBA, "shape": SHAPE, "graph_off": GRAPH_OFF,
                          "kind_with_previous": KIND_WITH_PREVIOUS, "color": COLOR, "capture": CAPTURE}
PIECES.update({f"blocks_{v}": text for v, text in BLOCKS.items()})

_FIELD = re.compile(r"\{(\w+)(?::([^}]*))?\}")


def printf_form(piece: str) -> str:
    """``piece`` as a printf format: ``{x:d}`` -> ``%d``, ``{x:.3f}`` -> ``%.3f``, ``{x}`` -> ``%s``,
    a literal ``%`` -> ``%%`` (how Megatron's source writes it, for the pinning test)."""
    out, last = [], 0
    for m in _FIELD.finditer(piece):
        out.append(piece[last:m.start()].replace("%", "%%"))
        out.append("%" + (m.group(2) or "s"))
        last = m.end()
    out.append(piece[last:].replace("%", "%%"))
    return "".join(out)


# ----------------------------------------------------------------------------------------- parsing

_INT = r"-?\d+"
_NUM = r"[-+.\w]+"  # %.3f / %.1f output: digits and a point, or nan / inf
_SHAPE_RE = r"\[(\d+)\]: (\d+) P \+ (\d+) D"
_SHAPE_TEXT = r"\[\d+\]: \d+ P \+ \d+ D"
_TEXT_FIELDS = {
    "clock": r"(?P<clock>[^|]*?)",
    "kind": r"(?P<kind>[a-z-]+)(?: \(prev: (?P<previous>[a-z-]+)\))?",
    "real": r"\[(?P<real_T>\d+)\]: (?P<real_P>\d+) P \+ (?P<real_D>\d+) D",
    "graph": r"(?:OFF|\[(?P<graph_T>\d+)\]: (?P<graph_P>\d+) P \+ (?P<graph_D>\d+) D)",
}


def _regex(piece: str, fields: dict[str, str] | None = None, *, capture: bool = True) -> str:
    """A regex for ``piece``: literals escaped, each field a named group (``fields`` for text ones);
    ``capture=False``: numeric fields match without a group."""
    out, last = [], 0
    for m in _FIELD.finditer(piece):
        out.append(re.escape(piece[last:m.start()]))
        name, spec = m.group(1), m.group(2)
        if spec is None:
            out.append((fields or {})[name])
        else:
            pattern = _INT if spec == "d" else _NUM
            out.append(f"(?P<{name}>{pattern})" if capture else pattern)
        last = m.end()
    out.append(re.escape(piece[last:]))
    return "".join(out)


def body_regex(version: str) -> re.Pattern[str]:
    """The step line up to and including its memory piece, for ``version`` (suffixes follow it). The
    bracketed config is one group (``config``: parse it with ``CONFIG_RE``, its text repeats from step
    to step), the memory piece none (nothing reads it)."""
    config = r"(?P<config> \[[a-z (:)-]+ \+ real config " + _SHAPE_TEXT + r" \+ cuda graph (?:OFF|" + _SHAPE_TEXT \
        + r")\])"
    head = _regex(HEAD, {"clock": _TEXT_FIELDS["clock"], "config": config})
    return re.compile(head + _regex(REQS) + _regex(BLOCKS[version]) + _regex(MEM, capture=False))


CONFIG_RE = re.compile(_regex(CONFIG, _TEXT_FIELDS))
SHAPE_RE = re.compile(_SHAPE_RE)
SPEC_RE = re.compile(_regex(SPEC, {"per_position": r"(?P<per_position>[^\]]*)"}))
CAPTURE_RE = re.compile(_regex(CAPTURE, {"shape": r"(?P<shape>" + _SHAPE_TEXT + r")"}))
COLOR_START, COLOR_END = COLOR.split("{line}")
STEP_MARK = HEAD[:HEAD.index("{")]  # "* rank ": where a step line starts (after any logging prefix)


def parse_shape(text: str) -> tuple[int, int, int] | None:
    """``[T]: P P + D D`` -> ``(T, P, D)``; None for ``OFF``."""
    m = SHAPE_RE.fullmatch(text)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def parse_config(text: str) -> tuple[str, str | None, tuple[int, int, int], tuple[int, int, int] | None] | None:
    """The bracketed config ``" [KIND + real config SHAPE + cuda graph SHAPE|OFF]"`` -> ``(kind,
    previous kind or None, real shape, graph or None)``; None when it is not one."""
    m = CONFIG_RE.fullmatch(text)
    if m is None:
        return None
    real = (int(m.group("real_T")), int(m.group("real_P")), int(m.group("real_D")))
    graph = None if m.group("graph_T") is None else (
        int(m.group("graph_T")), int(m.group("graph_P")), int(m.group("graph_D")))
    return m.group("kind"), m.group("previous"), real, graph


# ----------------------------------------------------------------------------------------- writing


def shape_text(shape: tuple[int, int, int] | None) -> str:
    if shape is None:
        return GRAPH_OFF
    T, P, D = shape
    return SHAPE.format(T=T, P=P, D=D)


@dataclass(frozen=True)
class LineValues:
    """Every field of one step line (the writer's input)."""

    rank: int
    step: int
    clock: str
    ms: float
    kind: str
    real: tuple[int, int, int]
    graph: tuple[int, int, int] | None
    active: int
    max_requests: int
    paused: int
    waiting: int
    finished: int
    evicted: int
    active_used: int
    active_total: int
    paused_used: int
    paused_total: int
    allocatable: int = 0  # main's block piece only
    tensors: int = 0
    alloc_gb: float = 0.0
    res_gb: float = 0.0


def format_line(v: LineValues, version: str, *, color: bool = False) -> str:
    """The step line Megatron ``version`` writes for ``v`` (no newline); ``color``: a decode-only
    step of the legacy scheduler, wrapped in blue."""
    config = CONFIG.format(kind=v.kind, real=shape_text(v.real), graph=shape_text(v.graph))
    blocks = BLOCKS[version].format(
        active_used=v.active_used, active_total=v.active_total, paused_used=v.paused_used,
        paused_total=v.paused_total, occupied=v.active_used + v.paused_used,
        usable=v.active_total + v.paused_total, allocatable=v.allocatable)
    line = (HEAD.format(rank=v.rank, step=v.step, clock=v.clock, ms=v.ms, config=config)
            + REQS.format(active=v.active, max_requests=v.max_requests, paused=v.paused, waiting=v.waiting,
                          finished=v.finished, evicted=v.evicted)
            + blocks + MEM.format(tensors=v.tensors, alloc_gb=v.alloc_gb, res_gb=v.res_gb))
    return COLOR.format(line=line) if color else line


def capture_line(index: int, count: int, shape: tuple[int, int, int]) -> str:
    """One graph of the capture listing (pool sizes not simulated: ``0 bytes``)."""
    return (CAPTURE.format(index=index, count=count, shape=shape_text(shape))
            + "0 bytes (Δiter=0 bytes) pool allocated=0 bytes (Δiter=0 bytes)")
