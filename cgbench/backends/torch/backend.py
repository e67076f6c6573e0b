"""The ``torch`` backend: the engine's steps run on a real small model.

On the CPU there are no CUDA graphs: every step runs eagerly and is recorded as eager (reason
``not_captured`` where the grid has a graph for its shape), while admission still follows the grid,
so the schedule (steps, deferrals, waits) is the ``sim`` backend's. On a CUDA device the grid is
captured as CUDA graphs (``CudaGraphRunner``) and a hit replays its graph with the real batch copied
into the static buffers; a miss, or a hit on a shape past the capture budget (``not_captured``), runs
eager. ``captured`` tells the engine which shapes replay. Step times are wall clock on the CPU and
CUDA events on a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from cgbench.backends.torch.graphs import CudaGraphRunner
from cgbench.backends.torch.runner import StepRow, TorchRunner
from cgbench.config.schema import BackendConfig, EngineConfig, ModelConfig
from cgbench.engine.contract import StepWork
from cgbench.engine.request import Request
from cgbench.grids.lookup import Grid


class TorchBackend:
    pricer = None  # steps really run: the engine steps every request (no decode stretches)

    def __init__(self, model: ModelConfig, engine: EngineConfig, backend: BackendConfig, *, seed: int,
                 grid: Grid) -> None:
        """``grid``: the run's captured-graph grid (captured as CUDA graphs on a CUDA device)."""
        self.runner = TorchRunner(model, engine, seed=seed, device=backend.device, dtype=backend.dtype)
        self.on_cuda = self.runner.device.type == "cuda"
        self.graphs: CudaGraphRunner | None = None
        if self.on_cuda:
            self.graphs = CudaGraphRunner(self.runner, grid.graphs, time_budget_s=backend.capture_budget_s,
                                          memory_budget_gb=backend.capture_memory_gb)
        self.tokens: dict[int, list[int]] = {}  # request id -> tokens generated (kept across evictions)
        self.replayed = 0
        self.eager = 0
        self.eager_instead_of_graph = 0  # asked to replay a graph it had not captured (0: the engine asks `captured`)

    @property
    def captured(self) -> frozenset[tuple[int, int, int]]:
        """The grid shapes that replay as CUDA graphs: none on the CPU."""
        return self.graphs.replayable if self.graphs is not None else frozenset()

    @property
    def device_name(self) -> str:
        return self.runner.device_name

    @property
    def torch_version(self) -> str:
        return torch.__version__

    def token_ids(self, req: Request) -> list[int]:
        return list(self.tokens.get(req.id, ()))

    def _prompt(self, r: Request) -> list[int]:
        # the sequence to (re-)prefill: the prompt, plus what was generated before an eviction
        return self.runner.prompt_tokens(r.id, r.prompt_len) + self.tokens.get(r.id, [])[:r.generated]

    def run_step(self, work: StepWork, decodes: Sequence[Request]) -> float:
        admitted = work.admitted
        rows: list[StepRow] = [StepRow(r.id, [self.tokens[r.id][r.generated - 1]], r.kv_tokens) for r in decodes]
        for a in admitted:
            start = a.request.finished_chunk - a.chunk
            rows.append(StepRow(a.request.id, self._prompt(a.request)[start:start + a.chunk], start))
        if self.graphs is not None:
            tokens, dt, replayed = self.graphs.run(rows, work.graph)
            if replayed:
                self.replayed += 1
            else:
                self.eager += 1
                self.eager_instead_of_graph += work.graph is not None
        else:
            t0 = time.perf_counter()
            tokens = self.runner.step(rows)
            dt = time.perf_counter() - t0
            self.eager += 1
        for r, tok in zip(decodes, tokens, strict=False):
            ids = self.tokens[r.id]
            if len(ids) < r.output_len:
                ids.append(tok)
        for a, tok in zip(admitted, tokens[len(decodes):], strict=True):
            r = a.request
            ids = self.tokens.setdefault(r.id, [])
            if a.final and len(ids) < r.output_len:
                ids.append(tok)
        return dt

    def release(self, req: Request) -> None:
        self.runner.release(req.id)

    def report(self) -> dict:
        rep = {"device": self.device_name, "torch": torch.__version__, "steps_replayed": self.replayed,
               "steps_eager": self.eager, "eager_instead_of_graph": self.eager_instead_of_graph,
               "cuda_graphs": self.graphs.report() if self.graphs is not None else None}
        return rep
