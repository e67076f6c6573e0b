"""A cgbench plug-in, out of tree: one admission policy, one grid family, one arrival process.

Two ways in: install it (its entry points, ``pyproject.toml``), or leave it on ``PYTHONPATH`` and
name its objects in a config folder's ``plugins.yaml`` (``cgbench run --config-dir DIR ...``)::

    policies:
      defer_then_guard: {_target_: cgbench_defer_then_guard.POLICY}
    grids:
      pow2_decode: {_target_: cgbench_defer_then_guard.GRID}
    workloads:
      ramp: {_target_: cgbench_defer_then_guard.ARRIVAL}

``defer_then_guard``: gate admission on a graph miss (the chunked path too) for at most
``max_defers`` rounds in a row, then admit and run eager; and at forward time run a prefill or
mixed step eager when its graph would pad T beyond ``max_ratio`` x the real T. cgbench's built-ins
do one or the other (``wait_timeout``, ``pad_guard``); this does both. Options:
``policy.defer_then_guard.max_defers`` and ``policy.defer_then_guard.max_ratio``.

``pow2_decode``: decode-only graphs for 1, 2, 4, ... requests up to ``engine.max_requests``
(``cg.kind=pow2_decode``); ``pow2_decode_kind`` makes variants that start higher.

``ramp``: an arrival process whose rate grows linearly, by ``rate`` requests/s every second
(request ``i`` arrives at ``sqrt(2 i / rate)`` s): a load ramp (``workload.arrival.process=ramp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cgbench.config.registry.grids import GridKind
from cgbench.config.registry.policies import PolicySpec
from cgbench.config.registry.workloads import WorkloadSource
from cgbench.engine.policies import DEFER, EAGER
from cgbench.errors import ConfigError
from cgbench.grids.shapes import BatchShape


@dataclass
class DeferThenGuardOptions:
    """The section ``policy.defer_then_guard``."""

    max_defers: int = 8
    max_ratio: float = 1.5


def check_options(o: DeferThenGuardOptions) -> None:
    if o.max_defers < 0:
        raise ConfigError(f"policy.defer_then_guard.max_defers: must be >= 0, got {o.max_defers}")
    if o.max_ratio < 1.0:
        raise ConfigError(f"policy.defer_then_guard.max_ratio: must be >= 1.0, got {o.max_ratio}")


@dataclass(frozen=True)
class DeferThenGuard:
    """Meets ``cgbench.engine.policies.AdmissionPolicy``: answers from its arguments only."""

    max_defers: int
    max_ratio: float
    name: str = "defer_then_guard"
    gates: bool = True
    gates_chunks: bool = True

    def on_non_chunked_miss(self, cg_wait_iters: int) -> str:
        return EAGER if cg_wait_iters >= self.max_defers else DEFER

    def on_chunk_miss(self, cg_wait_iters: int, engine_idle: bool) -> str:
        # an idle engine never waits: nothing else would run, and no step would ever fill the graph
        return EAGER if engine_idle or cg_wait_iters >= self.max_defers else DEFER

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        return prefills > 0 and graph_tokens > self.max_ratio * real_tokens


POLICY = PolicySpec(
    "defer_then_guard",
    options=DeferThenGuardOptions,
    check=check_options,
    build=lambda o: DeferThenGuard(o.max_defers, o.max_ratio),
    summary="defer a miss at most max_defers rounds, and run eager past max_ratio padding",
)


def _pow2_sizes(engine, smallest: int) -> list[int]:
    return [2 ** i for i in range(int(math.log2(max(1, engine.max_requests))) + 1) if 2 ** i >= smallest]


def pow2_decode_kind(name: str = "pow2_decode", smallest: int = 1) -> GridKind:
    """A ``pow2_decode`` grid from ``smallest`` requests up: a factory, for a ``plugins.yaml`` node
    with arguments (``{_target_: cgbench_defer_then_guard.pow2_decode_kind, name: pow2_from8, smallest: 8}``)."""

    def graphs(cg, engine, model) -> list[BatchShape]:
        q = 1 + engine.num_speculative_tokens
        return [BatchShape(d * q, 0, d) for d in reversed(_pow2_sizes(engine, smallest))]  # largest first, as Megatron

    return GridKind(
        name,
        family="megatron",
        reads=(),
        estimate=lambda cg, engine: (len(_pow2_sizes(engine, smallest)), "engine.max_requests"),
        build=graphs,
        summary=f"decode graphs for {smallest}, {2 * smallest}, {4 * smallest}, ... requests",
    )


GRID = pow2_decode_kind()


def ramp_drawer(arrival, rng):
    """``draw(n)``: the next ``n`` arrival times (the ramp draws nothing at random)."""
    drawn = [0]

    def draw(n: int) -> list[float]:
        first = drawn[0]
        drawn[0] += n
        return [math.sqrt(2.0 * i / arrival.rate) for i in range(first, first + n)]

    return draw


ARRIVAL = WorkloadSource("ramp", ("rate",), "a rate growing by rate requests/s every second",
                         family="arrival", build=ramp_drawer)
