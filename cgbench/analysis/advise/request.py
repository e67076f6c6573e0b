"""What one ``cgbench advise`` search is asked: ``AdviseRequest`` (the command's options, read) and
``check_request`` (its budgets, objective and search settings checked before anything runs), and
the request's override list read (``is_cg``: a grid override; ``without_keys``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgbench.analysis.advise.goals import OBJECTIVES, Objective, Slo
from cgbench.config.overrides import override_key
from cgbench.config.schema import ConfigError


@dataclass
class AdviseRequest:
    overrides: list[str]
    budget_graphs: int
    budget_memory_gb: float | None = None
    budget_capture_s: float | None = None
    objective: str = "throughput"
    slos: list[str] = field(default_factory=list)
    candidates: int = 24
    jobs: int = 1
    check_seed: int | None = None
    check_workload: list[str] = field(default_factory=list)
    out_dir: Path | None = None
    resume: bool = False
    # the user's own launch line (--megatron-args, read): its translation is in ``overrides``; the
    # recommendation says what to add to it and remove from it, and it is a baseline
    launch_line: str | None = None
    executor: str = "local"  # local (in process or --jobs workers) or slurm (array tasks under out_dir/slurm/)
    slurm: dict[str, Any] = field(default_factory=dict)  # --slurm settings, parsed (executor_slurm.parse_settings)


def check_request(req: AdviseRequest) -> tuple[Objective, list[Slo]]:
    """Budgets, objective and search settings; ConfigError naming the option."""
    if isinstance(req.budget_graphs, bool) or not isinstance(req.budget_graphs, int) or req.budget_graphs < 1:
        raise ConfigError(f"--budget-graphs: must be an integer >= 1, got {req.budget_graphs}")
    if req.budget_graphs > 2**63 - 1:  # the report records it: refused here, before any run is written
        raise ConfigError(f"--budget-graphs: must be at most {2**63 - 1} (a report holds 64-bit integers), "
                          f"got {req.budget_graphs}")
    for name, v in (("--budget-memory", req.budget_memory_gb), ("--budget-capture-s", req.budget_capture_s)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{name}: must be > 0, got {v}")
    if req.objective not in OBJECTIVES:
        raise ConfigError(f"--objective: {req.objective!r} is not one of {', '.join(OBJECTIVES)}")
    if req.candidates < 2:
        raise ConfigError(f"--candidates: must be >= 2, got {req.candidates}")
    if req.jobs < 1:
        raise ConfigError(f"--jobs: must be >= 1, got {req.jobs}")
    if req.resume and req.out_dir is None:
        raise ConfigError("--resume: needs --out DIR (the folder of the search to resume)")
    if req.executor not in ("local", "slurm"):
        raise ConfigError(f"--executor: {req.executor!r} is not one of local, slurm")
    if req.slurm and req.executor != "slurm":
        raise ConfigError("--slurm: settings for --executor slurm (add --executor slurm)")
    slos = [Slo.parse(s) for s in req.slos]
    names = [s.name for s in slos]
    if len(set(names)) != len(names):
        raise ConfigError("--slo: a metric is given more than once")
    return OBJECTIVES[req.objective], slos



def is_cg(o: str) -> bool:
    k = override_key(o)
    return k == "cg" or k.startswith("cg.")


def without_keys(overrides: Sequence[str], keys: set[str]) -> list[str]:
    return [o for o in overrides if override_key(o) not in keys]
