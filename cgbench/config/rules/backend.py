"""``backend.*``: the backend, its cost model and device, and what the torch backend cannot run."""

from __future__ import annotations

from typing import Any

from cgbench.config.registry.pricers import COST_MODELS as PRICERS
from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require

COST_MODELS = tuple(PRICERS)
BACKENDS = ("sim", "torch")
TORCH_DTYPES = ("float32", "float64", "bfloat16", "float16")


def check_backend(cfg: Any) -> None:
    """The rules of ``cfg.backend``."""
    e = cfg.engine
    _check_choice(cfg.backend.name, BACKENDS, "backend.name")
    _check_choice(cfg.backend.cost_model, tuple(PRICERS), "backend.cost_model")
    pricer = PRICERS[cfg.backend.cost_model]
    if pricer.check is not None:  # the pricer's own rule (its record's)
        pricer.check(cfg.backend)
    _require(cfg.backend.device in ("auto", "cpu", "cuda"), "backend.device",
             f"must be auto, cpu or cuda, got {cfg.backend.device!r}")
    _check_choice(cfg.backend.dtype, TORCH_DTYPES, "backend.dtype")
    _require(cfg.backend.host_memory_gb > 0, "backend.host_memory_gb", "must be > 0")
    if cfg.backend.name == "torch":
        _require(e.num_speculative_tokens == 0, "engine.num_speculative_tokens",
                 "the torch backend runs no draft model; use 0")
