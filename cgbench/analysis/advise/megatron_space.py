"""The Megatron space of ``cgbench advise``: one setting of Megatron's own graph arguments
(``MegatronKnobs``: its overrides, its Megatron command line), every distinct grid those settings
produce (``megatron_space``), and the spread of graph counts a search picks from it (``spread_pick``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from cgbench.analysis.advise.demand import Shape
from cgbench.config.megatron_lines import LaunchArg, as_mapping, command_text, graph_launch_args
from cgbench.config.schema import CGConfig, ConfigError, EngineConfig
from cgbench.grids.megatron import megatron_family

NUM_CUDA_GRAPHS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, -1)
LINEAR_MIXED_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MIXED_ON = 16  # under the exponential distribution the mixed count only switches mixed graphs on


@dataclass(frozen=True)
class MegatronKnobs:
    """One setting of Megatron's graph arguments."""

    num_cuda_graphs: int
    distribution: str
    mixed_prefill_count: int
    all_prefills: bool
    cuda_graph_max_tokens: int
    non_decode: bool

    def overrides(self) -> list[str]:
        # with all prefills the cap is engine.max_tokens: the run refuses a cuda_graph_max_tokens it would not read
        cap = [] if self.all_prefills else [f"cg.cuda_graph_max_tokens={self.cuda_graph_max_tokens}"]
        return ["cg=megatron", f"cg.num_cuda_graphs={self.num_cuda_graphs}", f"cg.distribution={self.distribution}",
                f"cg.mixed_prefill_count={self.mixed_prefill_count}",
                f"cg.all_prefills={str(self.all_prefills).lower()}", *cap,
                f"cg.non_decode={str(self.non_decode).lower()}", "cg.sizes_per_octave=1", "cg.p_per_octave=1"]

    def launch_args(self) -> list[LaunchArg]:
        """Megatron-LM's graph arguments for this setting, read backwards from the translator's table
        (``cgbench.config.megatron_lines``): ``--megatron-args`` translates them to these knobs."""
        args = graph_launch_args(_cg_of(self))
        if args is None:  # a knob setting is a Megatron grid by construction
            raise AssertionError(f"{self} is not expressible as Megatron arguments")
        return args

    def megatron_args(self) -> dict[str, int | str | bool]:
        """The arguments as ``{flag: value}`` (a switch maps to True)."""
        return as_mapping(self.launch_args())

    @property
    def command(self) -> str:
        return command_text(self.launch_args())


def _cg_of(knobs: MegatronKnobs) -> CGConfig:
    return replace(CGConfig(), kind="megatron", num_cuda_graphs=knobs.num_cuda_graphs,
                   distribution=knobs.distribution, mixed_prefill_count=knobs.mixed_prefill_count,
                   all_prefills=knobs.all_prefills, cuda_graph_max_tokens=knobs.cuda_graph_max_tokens,
                   non_decode=knobs.non_decode, sizes_per_octave=1, p_per_octave=1)


SpaceEntry = tuple[MegatronKnobs, tuple[Shape, ...], bool]


def megatron_space(engine: EngineConfig) -> list[SpaceEntry]:
    """Every distinct grid Megatron's knobs produce: (knobs, graphs in stored order, gating on).

    Settings that give the same graph list and the same gating are one entry (the first, in a
    fixed enumeration order: fewer graphs first, exponential before linear)."""
    limits = (engine.max_requests, engine.max_tokens, engine.max_sequence_length, engine.tp_size,
              engine.num_speculative_tokens)
    return list(_megatron_space(limits))


@lru_cache(maxsize=8)
def _megatron_space(limits: tuple[int, int, int, int, int]) -> tuple[SpaceEntry, ...]:
    R, max_tokens, msl, tp, spec = limits
    engine = EngineConfig(max_requests=R, max_tokens=max_tokens, max_sequence_length=msl, tp_size=tp,
                          num_speculative_tokens=spec)
    q = engine.num_speculative_tokens + 1
    caps = sorted({min(c, engine.max_tokens) for c in
                   (engine.max_requests * q, 512, 1024, 2048, 4096, 8192, engine.max_tokens)})
    settings: list[MegatronKnobs] = []
    for n in NUM_CUDA_GRAPHS:
        settings.append(MegatronKnobs(n, "exponential", MIXED_ON, False, caps[0], False))
        for dist, counts in (("exponential", (MIXED_ON,)), ("linear", LINEAR_MIXED_COUNTS)):
            for m in counts:
                if m > engine.max_requests:
                    continue
                settings.append(MegatronKnobs(n, dist, m, True, 512, True))
                settings += [MegatronKnobs(n, dist, m, False, c, True) for c in caps]
    out, seen = [], set()
    for k in settings:
        try:
            graphs = tuple(tuple(g) for g in megatron_family(_cg_of(k), engine, k.non_decode))
        except ConfigError:
            continue
        if not graphs:
            continue
        gating = k.all_prefills and k.non_decode and any(g[1] > 0 for g in graphs)
        key = (graphs, gating)
        if key not in seen:
            seen.add(key)
            out.append((k, graphs, gating))
    return tuple(out)


def spread_pick(scored: list[tuple[float, int, int]], n: int) -> list[int]:
    """Choose ``n`` of ``(predicted seconds, graph count, index)``: the best-predicted entry of each
    graph-count band first (so the Pareto front has points across counts), then the best overall."""
    if n <= 0 or not scored:
        return []
    by_score = sorted(scored)
    counts = sorted({c for _, c, _ in scored})
    bands = max(1, min(len(counts), (n + 1) // 2))
    edges = [counts[min(len(counts) - 1, (len(counts) * b) // bands)] for b in range(bands)] + [math.inf]
    picked: list[int] = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        for _, c, i in by_score:
            if lo <= c < hi:
                if i not in picked:
                    picked.append(i)
                break
    for _, _, i in by_score:
        if len(picked) >= n:
            break
        if i not in picked:
            picked.append(i)
    return picked[:n]
