"""Builders for engine tests: explicit requests, Megatron list (B), the default limits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.config.schema import BenchConfig, CGConfig, EngineConfig, ModelConfig, PolicyConfig
from cgbench.native import simulator_build
from cgbench.pipeline import build_engine
from cgbench.workload.arrivals import ArrivalStream, RequestSpec


def make_cfg(*, kind: str = "transformer", policy: str = "megatron", chunked: bool = False,
             cg: CGConfig | None = None, **engine) -> BenchConfig:
    e = replace(EngineConfig(), chunked_prefill=chunked, check_invariants=True, **engine)
    model = replace(ModelConfig(), kind=kind, name=kind,
                    layer_pattern="M-M*-" if kind == "hybrid" else "*-")
    return BenchConfig(model=model, cg=cg or CGConfig(), policy=PolicyConfig(name=policy), engine=e)


def specs(*lengths: tuple[int, int], arrival_s: float = 0.0) -> list[RequestSpec]:
    return [RequestSpec(i, arrival_s, p, o) for i, (p, o) in enumerate(lengths)]


def run_engine(cfg: BenchConfig, reqs: list[RequestSpec], *, concurrency: int = 0):
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs, concurrency=concurrency))
    state = eng.run()
    return eng, state


# a test that subclasses the engine in Python: possible only when the engine runs as plain Python
# (the compiled build, make native, cannot be subclassed from Python)
needs_python_engine = pytest.mark.skipif(simulator_build() != "python",
                                         reason="subclasses the engine; the compiled engine cannot be subclassed")
