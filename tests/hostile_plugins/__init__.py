"""Plug-ins that misbehave at the plug-in boundary (``plugin_source.foreign`` / ``at_most``): each
raises what no ``except Exception`` catches, or returns what its contract does not allow. The
entry points of ``HOSTILE`` stand in for installed metadata (``hostile_plugins`` fixture)."""

from __future__ import annotations

import itertools
import sys

from cgbench.config.registry.grids import GridKind
from cgbench.config.registry.policies import PolicySpec
from cgbench.config.registry.workloads import WorkloadSource


class Custom(BaseException):
    """A BaseException of the plug-in's own, neither Exception nor SystemExit."""


def _exits(*_: object, **__: object) -> object:
    sys.exit(3)


def _custom(*_: object) -> object:
    raise Custom("no Exception at all")


def _generator_exit(*_: object) -> object:
    raise GeneratorExit


class _AnswersBadly:
    """An ``AdmissionPolicy`` whose answers break the contract (or whose deferral exits)."""

    name = "answers_badly"
    gates = True
    gates_chunks = True

    def on_non_chunked_miss(self, cg_wait_iters: int) -> str:
        return "maybe"

    def on_chunk_miss(self, cg_wait_iters: int, engine_idle: bool) -> str:
        return "maybe"

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        return "no"  # type: ignore[return-value]


class _ExitsMidRun(_AnswersBadly):
    name = "exits_mid_run"

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        sys.exit(4)


EXITING = PolicySpec("exiting", build=_exits)
CUSTOM = PolicySpec("custom", build=_custom)
GENERATOR_EXIT = PolicySpec("generator_exit", build=_generator_exit)
ANSWERS_BADLY = PolicySpec("answers_badly", build=lambda o: _AnswersBadly())
EXITS_MID_RUN = PolicySpec("exits_mid_run", build=lambda o: _ExitsMidRun())


def _strings(record: object, rng: object):
    return lambda n: ["0.5"] * n


def _endless(record: object, rng: object):
    return lambda n: itertools.count()  # never ends: read past n only by one


def _short(record: object, rng: object):
    return lambda n: (float(i) for i in range(max(0, n - 1)))


def _draw_exits(record: object, rng: object):
    return _exits


STRINGS = WorkloadSource("strings", ("rate",), family="arrival", build=_strings)
ENDLESS = WorkloadSource("endless", ("rate",), family="arrival", build=_endless)
SHORT = WorkloadSource("short", ("rate",), family="arrival", build=_short)
DRAW_EXITS = WorkloadSource("draw_exits", ("rate",), family="arrival", build=_draw_exits)
ENDLESS_LENGTHS = WorkloadSource("endless_lengths", (), family="length", build=_endless)


def _one_graph(cg: object, engine: object) -> tuple[int, str]:
    return 1, "cg.kind"


ENDLESS_GRID = GridKind("endless_grid", "megatron", (), _one_graph,
                        build=lambda cg, e, m: itertools.repeat((1, 0, 1)))
STRING_GRID = GridKind("string_grid", "megatron", (), _one_graph, build=lambda cg, e, m: [("1", "0", "1")])
EXITING_ESTIMATE = GridKind("exiting_estimate", "megatron", (), _exits, build=lambda cg, e, m: [])

_HERE = "tests.hostile_plugins"
HOSTILE = {
    "policies": {"exiting": f"{_HERE}:EXITING", "custom": f"{_HERE}:CUSTOM",
                 "generator_exit": f"{_HERE}:GENERATOR_EXIT",
                 "answers_badly": f"{_HERE}:ANSWERS_BADLY", "exits_mid_run": f"{_HERE}:EXITS_MID_RUN",
                 "exits_on_import": "tests.hostile_plugins.exits_on_import:POLICY"},
    "grids": {"endless_grid": f"{_HERE}:ENDLESS_GRID", "string_grid": f"{_HERE}:STRING_GRID",
              "exiting_estimate": f"{_HERE}:EXITING_ESTIMATE"},
    "workloads": {"strings": f"{_HERE}:STRINGS", "endless": f"{_HERE}:ENDLESS", "short": f"{_HERE}:SHORT",
                  "draw_exits": f"{_HERE}:DRAW_EXITS", "endless_lengths": f"{_HERE}:ENDLESS_LENGTHS"},
}
