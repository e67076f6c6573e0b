"""Checks before a run that a config is physically plausible, each with the numbers.

* Device memory: the model's weights (and, when ``engine.kv_blocks`` is set, the KV cache and Mamba
  state the engine reserves) must fit ``hardware.memory_gb`` per GPU, i.e. memory_gb x tp_size in
  all (an MoE model's experts split over ``engine.ep_size`` too); ``--allow-oversize`` runs anyway (what-if studies).
* Host memory (``backend=torch`` on the CPU): the weights at ``backend.dtype`` must fit
  ``backend.host_memory_gb``.
* Optional dependencies: ``backend=torch`` needs torch.
* Inputs: the files a config reads are the command's inputs, which no output may replace
  (``declare_config_inputs``, ``cgbench.safeio.declare_inputs``).
"""

from __future__ import annotations

import importlib.util

from cgbench.backends.sim.memory import GB, memory_need, parameters
from cgbench.config.schema import BenchConfig, ConfigError

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


def check_device_memory(cfg: BenchConfig) -> None:
    """Weights must fit; weights + KV must fit when engine.kv_blocks is set (with kv_blocks=0 the pool
    is an idealisation, flagged by the run's health warnings instead)."""
    need = memory_need(cfg)
    if need.weights_gb > need.capacity_gb or (not need.auto_kv and need.total_gb > need.capacity_gb):
        tp = cfg.engine.tp_size
        raise ConfigError(
            f"hardware.memory_gb: model={cfg.model.name} needs {need.weights_gb:.1f} GB of weights + "
            f"{need.kv_gb:.1f} GB of KV cache = {need.total_gb:.1f} GB per GPU (tp_size={tp}), more than "
            f"{cfg.hardware.name}'s {need.capacity_gb:g} GB; raise engine.tp_size"
            f"{' or engine.ep_size (it splits the experts)' if 'E' in cfg.model.layers else ''}, lower "
            f"engine.kv_blocks / max_requests, or pass --allow-oversize for a what-if study")


def require_torch(what: str = "backend=torch") -> None:
    if importlib.util.find_spec("torch") is None:
        from cgbench.results.extras import needs

        raise ConfigError(needs(what, "torch"))


def check_host_memory(cfg: BenchConfig) -> None:
    """backend=torch on the CPU: the model's weights at backend.dtype must fit backend.host_memory_gb."""
    if cfg.backend.name != "torch":
        return
    if cfg.backend.device == "auto":
        from cgbench.backends.torch.probe import cuda_available

        if cuda_available():
            return
    elif cfg.backend.device != "cpu":
        return
    params = parameters(cfg)
    need = params * DTYPE_BYTES[cfg.backend.dtype] / GB
    if need > cfg.backend.host_memory_gb:
        raise ConfigError(
            f"backend.host_memory_gb: model={cfg.model.name} has {params / 1e9:.2f} B parameters, "
            f"{need:.1f} GB at {cfg.backend.dtype} on the CPU, over the {cfg.backend.host_memory_gb:g} GB limit; "
            "use model=tiny_hybrid or tiny_transformer, a GPU, or raise backend.host_memory_gb")


def declare_config_inputs(cfg, megatron_args: str | None = None) -> None:
    """The files a config reads (trace, calibration tables) and a ``--megatron-args @FILE`` are
    the command's inputs: no output may replace them (``cgbench.safeio.declare_inputs``)."""
    from cgbench.analysis.sweep.fingerprint import input_paths
    from cgbench.safeio import declare_inputs

    declare_inputs(input_paths(cfg))
    if megatron_args is not None and megatron_args.startswith("@"):
        declare_inputs({"--megatron-args": megatron_args[1:]})
