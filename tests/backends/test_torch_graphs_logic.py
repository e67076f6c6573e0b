"""The CUDA-graph runner's logic on the CPU, with ``torch.cuda`` replaced by a faithful stand-in.

A stand-in "graph" records the compute shape it was captured with and, on replay, runs the same
device-only ``compute`` on whatever the static buffers hold — which is what a CUDA graph does. So
these tests check everything above the CUDA driver: capture order and sharing, budgets and the
stated subset, staging into static buffers with padding neutralised, and that replaying gives the
tokens of eager execution. Real capture is covered by tests/backends/test_gpu.py on a GPU.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace

import pytest

pytestmark = pytest.mark.slow  # the real torch engine

torch = pytest.importorskip("torch")

from cgbench.backends.torch import graphs as gr  # noqa: E402
from cgbench.backends.torch.backend import TorchBackend  # noqa: E402
from cgbench.config.compose import load_config  # noqa: E402
from cgbench.grids.build import build_grid  # noqa: E402
from cgbench.pipeline import build_engine  # noqa: E402
from cgbench.workload.arrivals import ArrivalStream, RequestSpec  # noqa: E402


class FakeCuda:
    """Just the ``torch.cuda`` surface the graph runner uses."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.capturing = None
        self.reserved = 0
        self.captures = []
        real_compute = runner.compute

        def compute(shape):
            if self.capturing is not None:
                self.capturing.shape = shape
            real_compute(shape)

        runner.compute = compute
        self.real_compute = real_compute
        fake = self

        class CUDAGraph:
            def __init__(self) -> None:
                self.shape = None

            def replay(self) -> None:
                fake.real_compute(self.shape)

            def pool(self):
                return "pool"

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.t = 0.0

            def record(self) -> None:
                self.t = time.perf_counter()

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end) -> float:
                return (end.t - self.t) * 1000.0

        class Stream:
            def wait_stream(self, other) -> None:
                pass

        @contextlib.contextmanager
        def graph(g, pool=None):
            self.captures.append((pool, g))
            self.capturing = g
            yield
            self.capturing = None
            self.reserved += 1 << 20  # 1 MiB per captured graph

        self.CUDAGraph, self.Event, self.Stream, self.graph = CUDAGraph, Event, Stream, graph
        self.stream = lambda s: contextlib.nullcontext()
        self.current_stream = lambda: Stream()
        self.synchronize = lambda: None
        self.memory_reserved = lambda: self.reserved


def _backend(model: str, overrides: list[str], monkeypatch, **budgets):
    cfg = load_config([f"model={model}", "engine=small", "backend=torch", "backend.device=cpu", *overrides])
    cfg = replace(cfg, engine=replace(cfg.engine, check_invariants=True))
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    backend = TorchBackend(cfg.model, cfg.engine, cfg.backend, seed=cfg.seed, grid=grid)
    fake = FakeCuda(backend.runner)
    monkeypatch.setattr(gr.torch, "cuda", fake)
    backend.graphs = gr.CudaGraphRunner(backend.runner, grid.graphs, time_budget_s=budgets.get("time", 60.0),
                                        memory_budget_gb=budgets.get("memory", 8.0))
    return cfg, backend, grid, fake


LENGTHS = [(5, 7), (33, 5), (17, 9), (48, 4), (9, 8), (26, 6)]


@pytest.mark.parametrize("model", ["tiny_transformer", "tiny_hybrid"])
def test_replay_gives_the_tokens_of_eager_execution(model, monkeypatch):
    cfg, backend, grid, fake = _backend(model, ["cg=megatron", "policy=megatron"], monkeypatch)
    runner = backend.runner
    expected = {i: runner.generate_alone(runner.prompt_tokens(i, p), o) for i, (p, o) in enumerate(LENGTHS)}
    specs = [RequestSpec(i, 0.0, p, o) for i, (p, o) in enumerate(LENGTHS)]
    state = build_engine(cfg, backend=backend, stream=ArrivalStream(specs)).run()
    assert state.outcome == "completed"
    assert {r.id: backend.token_ids(r) for r in state.requests} == expected
    rep = backend.report()
    assert rep["steps_replayed"] == state.stats.graphed_steps > 0
    assert rep["steps_eager"] == state.stats.eager_steps
    cg = rep["cuda_graphs"]
    assert cg["grid_shapes_covered"] == len(grid.graphs) and not cg["skipped"] and cg["stop_reason"] is None
    # one pool shared by every capture after the first; one graph per distinct compute shape,
    # captured largest first (so smaller graphs reuse the largest one's pool blocks)
    pools = [pool for pool, _ in fake.captures]
    assert pools[0] is None and set(pools[1:]) <= {"pool"}
    shapes = [g.shape for _, g in fake.captures]
    assert cg["captured"] == len(shapes) == len(set(shapes))
    assert [s.tokens for s in shapes] == sorted((s.tokens for s in shapes), reverse=True)
    shared = [r for r in cg["per_graph"] if r["shared_with"] is not None]
    assert cg["captured"] + len(shared) == len(grid.graphs)


def test_a_memory_budget_captures_a_stated_subset_and_misses_run_eager(monkeypatch):
    cfg, backend, grid, fake = _backend("tiny_transformer", ["cg=megatron", "policy=budget"], monkeypatch,
                                        memory=2.5 / 1024)  # 2.5 MiB: the stand-in reserves 1 MiB per graph
    cg = backend.graphs.report()
    assert cg["stop_reason"] and "memory budget" in cg["stop_reason"]
    assert cg["captured"] == 3 and cg["skipped"] and cg["grid_shapes"] == len(grid.graphs)
    assert backend.captured and backend.captured < {tuple(g) for g in grid.graphs}
    runner = backend.runner
    specs = [RequestSpec(i, 0.0, p, o) for i, (p, o) in enumerate(LENGTHS)]
    state = build_engine(cfg, backend=backend, stream=ArrivalStream(specs)).run()
    expected = {i: runner.generate_alone(runner.prompt_tokens(i, p), o) for i, (p, o) in enumerate(LENGTHS)}
    assert {r.id: backend.token_ids(r) for r in state.requests} == expected
    rep = backend.report()
    # a step the matcher sends to an uncaptured graph runs eager, and the engine records it so
    assert state.stats.eager_reasons["not_captured"] > 0
    assert set(state.stats.graph_usage) <= backend.captured
    assert rep["steps_replayed"] == state.stats.graphed_steps and rep["steps_eager"] == state.stats.eager_steps
    assert rep["eager_instead_of_graph"] == 0


def test_shapes_the_runner_cannot_stage_are_skipped_with_a_reason(monkeypatch):
    _, backend, grid, _ = _backend("tiny_transformer", ["cg=vllm"], monkeypatch)
    cg = backend.graphs.report()
    too_wide = [list(g) for g in grid.graphs if g.prefill_req_count + g.decode_req_count > 8]
    assert too_wide and all(g in cg["skipped"] for g in too_wide)
    assert len(cg["unsupported"]) == len(too_wide)
