"""CUDA-graph capture of a grid and replay on hits (GPU only; imported by the torch backend).

One ``torch.cuda.CUDAGraph`` per distinct compute shape of the grid, captured largest first into
one shared memory pool after a warm-up on a side stream. Capture stops at the time or memory
budget: the captured subset is reported (and a hit on an uncaptured shape runs eager and is
counted as such) rather than failing or pretending. Step times come from CUDA events around the
replay (graphed) or the kernel launches (eager); staging the inputs is the same for both and is
not timed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from cgbench.backends.torch.runner import StepRow, StepShape, TorchRunner


@dataclass(slots=True)
class CaptureRecord:
    graph: list[int]  # the grid shape [T, P, D]
    capture_s: float
    pool_reserved_delta_bytes: int
    shared_with: list[int] | None  # another grid shape with the same compute shape (one graph serves both)


class CudaGraphRunner:
    def __init__(self, runner: TorchRunner, grid: Sequence, *, time_budget_s: float, memory_budget_gb: float,
                 warmup_iters: int = 2) -> None:
        self.runner = runner
        self.graphs: dict[StepShape, torch.cuda.CUDAGraph] = {}
        self.shape_of: dict[tuple[int, int, int], StepShape] = {}
        self.records: list[CaptureRecord] = []
        self.skipped: list[list[int]] = []
        self.unsupported: list[str] = []  # shapes the runner cannot stage, with the reason
        self.stop_reason = ""
        order = sorted((tuple(g) for g in grid), key=lambda g: (g[0], g[1] + g[2]), reverse=True)
        pool = None
        stream = torch.cuda.Stream()
        t_start = time.perf_counter()
        base_reserved = torch.cuda.memory_reserved()
        budget_bytes = memory_budget_gb * 2**30
        for g in order:
            if self.stop_reason:
                self.skipped.append(list(g))
                continue
            try:
                staged = runner.stage_idle(g)
            except ValueError as e:  # e.g. a peer grid's shape with more rows than engine.max_requests
                self.skipped.append(list(g))
                self.unsupported.append(f"{list(g)}: {e}")
                continue
            owner = next((k for k, v in self.shape_of.items() if v == staged.shape), None)
            if owner is not None:
                self.shape_of[g] = staged.shape
                self.records.append(CaptureRecord(list(g), 0.0, 0, list(owner)))
                continue
            t0 = time.perf_counter()
            before = torch.cuda.memory_reserved()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(warmup_iters):
                    runner.compute(staged.shape)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                runner.compute(staged.shape)
            torch.cuda.synchronize()
            pool = graph.pool() if pool is None else pool
            self.graphs[staged.shape] = graph
            self.shape_of[g] = staged.shape
            self.records.append(CaptureRecord(list(g), time.perf_counter() - t0,
                                              torch.cuda.memory_reserved() - before, None))
            if time.perf_counter() - t_start > time_budget_s:
                self.stop_reason = f"capture time budget {time_budget_s:g} s reached"
            elif torch.cuda.memory_reserved() - base_reserved > budget_bytes:
                self.stop_reason = f"capture memory budget {memory_budget_gb:g} GB reached"
        self.capture_s = time.perf_counter() - t_start
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    @property
    def replayable(self) -> frozenset[tuple[int, int, int]]:
        """The grid shapes a captured graph serves (its own capture, or one it shares)."""
        return frozenset(g for g, shape in self.shape_of.items() if shape in self.graphs)

    def run(self, rows: list[StepRow], graph: tuple[int, int, int] | None) -> tuple[list[int], float, bool]:
        """(tokens, seconds, replayed)."""
        runner = self.runner
        shape = self.shape_of.get(graph) if graph is not None else None
        if shape is not None and shape in self.graphs:
            staged = runner.stage(rows, pad_to=graph)
            self.start.record()
            self.graphs[shape].replay()
            self.end.record()
            replayed = True
        else:
            staged = runner.stage(rows)
            self.start.record()
            runner.compute(staged.shape)
            self.end.record()
            replayed = False
        tokens = runner.collect(staged)  # synchronizes
        self.end.synchronize()
        return tokens, self.start.elapsed_time(self.end) / 1000.0, replayed

    def report(self) -> dict:
        return {
            "captured": len(self.graphs),
            "grid_shapes": len(self.shape_of) + len(self.skipped),
            "grid_shapes_covered": len(self.shape_of),
            "skipped": self.skipped,
            "stop_reason": self.stop_reason or None,
            "unsupported": self.unsupported,
            "capture_s": round(self.capture_s, 3),
            "per_graph": [asdict(r) for r in self.records],
        }
