"""The ``torch`` backend: the engine's steps run on a real small model.

On the CPU every step runs eagerly (the matcher still decides which graph *would* replay, so step
metrics equal the ``sim`` backend's). On a CUDA device the grid is captured as CUDA graphs
(``CudaGraphRunner``) and a hit replays its graph with the real batch copied into the static
buffers; a miss runs eager. Step times are wall clock on the CPU and CUDA events on a GPU.
"""

from __future__ import annotations

import time

import torch

from cgbench.backends.torch.graphs import CudaGraphRunner
from cgbench.backends.torch.runner import StepRow, TorchRunner
from cgbench.config.schema import BenchConfig
from cgbench.engine.context import Admission
from cgbench.engine.contract import StepWork
from cgbench.engine.request import Request
from cgbench.grids.build import build_grid


class TorchBackend:
    has_clock = True

    def __init__(self, cfg: BenchConfig) -> None:
        self.runner = TorchRunner(cfg.model, cfg.engine, seed=cfg.seed, device=cfg.backend.device,
                                  dtype=cfg.backend.dtype)
        self.on_cuda = self.runner.device.type == "cuda"
        self.graphs: CudaGraphRunner | None = None
        if self.on_cuda:
            grid = build_grid(cfg.cg, cfg.engine, cfg.model)
            self.graphs = CudaGraphRunner(self.runner, grid.graphs, time_budget_s=cfg.backend.capture_budget_s,
                                          memory_budget_gb=cfg.backend.capture_memory_gb)
        self.replayed = 0
        self.eager = 0
        self.eager_instead_of_graph = 0  # matcher hit, but the shape was not captured (over budget)

    @property
    def device_name(self) -> str:
        return self.runner.device_name

    @property
    def torch_version(self) -> str:
        return torch.__version__

    def _prompt(self, r: Request) -> list[int]:
        # the sequence to (re-)prefill: the prompt, plus what was generated before an eviction
        return self.runner.prompt_tokens(r.id, r.prompt_len) + r.token_ids[:r.generated]

    def run_step(self, work: StepWork, admitted: list[Admission], decodes: list[Request]) -> float:
        rows: list[StepRow] = [StepRow(r.id, [r.token_ids[r.generated - 1]], r.kv_tokens) for r in decodes]
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
            if len(r.token_ids) < r.output_len:
                r.token_ids.append(tok)
        for a, tok in zip(admitted, tokens[len(decodes):], strict=True):
            r = a.request
            if a.final and len(r.token_ids) < r.output_len:
                r.token_ids.append(tok)
        return dt

    def release(self, req: Request) -> None:
        self.runner.release(req.id)

    def report(self) -> dict:
        rep = {"device": self.device_name, "torch": torch.__version__, "steps_replayed": self.replayed,
               "steps_eager": self.eager, "eager_instead_of_graph": self.eager_instead_of_graph,
               "cuda_graphs": self.graphs.report() if self.graphs is not None else None}
        return rep
