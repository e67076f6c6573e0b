"""Typed configuration records.

These dataclasses are the schema of the Hydra tree in ``conf/`` (``cgbench.config.compose`` registers them
and composes YAML into them) and the only configuration the engine, scheduler and backends ever
see. They import nothing from Hydra, so library users and tests can build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from cgbench.config.errors import ConfigError  # every package imports it from here
from cgbench.config.registry.grids import BUILTIN_GRID_KINDS, grid_kind, grid_unread, kinds_of
from cgbench.config.registry.policies import (
    BUILTIN_POLICIES,
    PadGuardConfig,
    WaitTimeoutConfig,
    check_options,
    option_sections,
    policy_spec,
)
from cgbench.config.registry.pricers import COST_MODELS as PRICERS
from cgbench.config.registry.traces import ARRIVAL_UNITS, TRACE_FORMATS, trace_format
from cgbench.config.registry.workloads import ARRIVAL_PROCESSES as ARRIVALS
from cgbench.config.registry.workloads import (
    LENGTH_DISTRIBUTIONS,
    read_keys,
    readers,
    reads_of,
    with_chosen,
    workload_source,
)

MODEL_KINDS = ("transformer", "hybrid")
# the built-in names of each registry (installed plug-ins add policies and grid kinds)
CG_KINDS = tuple(BUILTIN_GRID_KINDS)
POLICIES = tuple(BUILTIN_POLICIES)
COST_MODELS = tuple(PRICERS)
ARRIVAL_PROCESSES = tuple(ARRIVALS)
LENGTH_DISTS = tuple(LENGTH_DISTRIBUTIONS)
PEER_KINDS = kinds_of("peer")
DISTRIBUTIONS = ("exponential", "linear", "hybrid")  # hybrid: PR #6667 (1ea7881b), not in 0.19.2
BACKENDS = ("sim", "torch")
TORCH_DTYPES = ("float32", "float64", "bfloat16", "float16")
KV_CORNERS = ("megatron", "safe")
MOE_DISPATCHERS = ("nccl", "nvls", "te")
EP_ROUTINGS = ("least_loaded", "round_robin")


@dataclass
class ModelConfig:
    """Model dimensions. ``layer_pattern`` uses Megatron's hybrid notation, one char per layer:
    ``M`` Mamba-2 mixer, ``*`` attention, ``-`` MLP. It is repeated ``pattern_repeat`` times.
    The defaults serve Python callers; a ``model=NAME`` file states every field its layers use."""

    name: str = "hybrid"
    kind: str = "hybrid"
    layer_pattern: str = "M-M-M*-"
    pattern_repeat: int = 1
    hidden_size: int = 4096
    num_attention_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    ffn_hidden_size: int = 14336
    vocab_size: int = 131072
    mamba_num_heads: int = 128
    mamba_head_dim: int = 64
    mamba_state_dim: int = 128
    mamba_num_groups: int = 8
    mamba_conv_kernel: int = 4
    dtype_bytes: int = 2
    # SwiGLU (3 matrices) vs squared-ReLU / GeLU (2). None = by kind (SwiGLU for transformer) is for
    # ModelConfig built in Python only: a model file must say (cgbench.config.model_files)
    gated_mlp: Optional[bool] = None

    @property
    def is_hybrid(self) -> bool:
        return self.kind == "hybrid"

    @property
    def layers(self) -> str:
        return self.layer_pattern * self.pattern_repeat


@dataclass
class CGConfig:
    """The captured-graph grid. Megatron keys keep Megatron's names; peers' keys are documented
    in ``conf/cg/*.yaml``."""

    kind: str = "megatron"
    num_cuda_graphs: Optional[int] = 16
    all_prefills: bool = True
    cuda_graph_max_tokens: int = 512
    distribution: str = "exponential"
    mixed_prefill_count: int = 16
    non_decode: bool = True
    # cgbench extension (not in Megatron): extra token sizes / P values between powers of two.
    # 1 reproduces Megatron exactly.
    sizes_per_octave: int = 1
    p_per_octave: int = 1
    graphs: list[list[int]] = field(default_factory=list)  # kind=explicit, in stored order
    # peers (vllm / sglang / trtllm)
    capture_sizes: list[int] = field(default_factory=list)  # decode / full sizes; [] = engine default
    max_capture_size: int = 0  # 0 = the engine's default rule
    piecewise: bool = True  # prefill/mixed token-bucket graphs (vLLM PIECEWISE, SGLang PCG, TRT piecewise)
    piecewise_sizes: list[int] = field(default_factory=list)  # [] = engine default
    piecewise_max_tokens: int = 0  # 0 = engine default
    padding: bool = True  # TRT-LLM enable_padding (False = exact decode batch sizes only)
    gpu_memory_gb: float = 141.0  # SGLang's default max batch size depends on it


@dataclass
class DistConfig:
    """A length distribution. Which fields matter depends on ``dist``."""

    dist: str = "fixed"
    value: int = 128
    min: int = 1
    max: int = 1_000_000
    mean: float = 0.0
    std: float = 0.0
    sigma: float = 0.0  # lognormal shape (the log-space std); mean is the distribution mean
    bins: list[int] = field(default_factory=list)  # histogram: bin edges (len = len(weights)+1)
    weights: list[float] = field(default_factory=list)


@dataclass
class ArrivalConfig:
    process: str = "all_at_once"
    rate: float = 0.0  # requests per second (poisson, gamma, constant)
    burstiness: float = 1.0  # gamma shape (vllm bench serve --burstiness)
    concurrency: int = 0  # closed_loop


@dataclass
class TraceColumnsConfig:
    """``workload.trace_columns``: the fields of a CSV / JSONL trace in no native format (all three
    of arrival, prompt and output, or none); ``hash_ids``: a field holding a list of prefix-block
    hashes of ``block_tokens`` tokens each (optional)."""

    arrival: Optional[str] = None
    prompt: Optional[str] = None
    output: Optional[str] = None
    hash_ids: Optional[str] = None
    block_tokens: int = 512

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.arrival, self.prompt, self.output, self.hash_ids))


@dataclass
class TraceWindowConfig:
    """``workload.window``: the part of a trace replayed, by trace time (``start_s`` <= arrival <
    ``end_s``, in seconds after the trace's first arrival) or by rows (``first`` to ``last``, 0-based,
    both included, in arrival order); not both. The window's start becomes t = 0."""

    start_s: Optional[float] = None
    end_s: Optional[float] = None
    first: Optional[int] = None
    last: Optional[int] = None

    @property
    def by_time(self) -> bool:
        return self.start_s is not None or self.end_s is not None

    @property
    def by_rows(self) -> bool:
        return self.first is not None or self.last is not None


@dataclass
class WorkloadConfig:
    name: str = "default"
    num_requests: int = 64
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    prompt_len: DistConfig = field(default_factory=DistConfig)
    output_len: DistConfig = field(default_factory=DistConfig)
    trace: Optional[str] = None  # JSONL / CSV path with arrival_s, prompt_tokens, output_tokens
    time_scale: float = 1.0  # trace replay: arrival_s is multiplied by this
    trace_format: Optional[str] = None  # cgbench | azure | mooncake; null = detected from the first record
    trace_columns: TraceColumnsConfig = field(default_factory=TraceColumnsConfig)  # another trace's fields
    trace_arrival_unit: Optional[str] = None  # s | ms | us | epoch_s | epoch_ms | epoch_us | datetime; null = detected
    window: TraceWindowConfig = field(default_factory=TraceWindowConfig)


@dataclass
class PolicyConfig:
    """The policy's name and the option sections (``policy.<name>``) of the built-in policies that
    have options (``cgbench.config.registry.policies``); a plug-in policy's configs add its own."""

    name: str = "megatron"
    pad_guard: PadGuardConfig = field(default_factory=PadGuardConfig)
    wait_timeout: WaitTimeoutConfig = field(default_factory=WaitTimeoutConfig)


@dataclass
class EngineConfig:
    max_requests: int = 256
    max_tokens: int = 16384
    max_sequence_length: int = 2560
    block_size: int = 256
    kv_blocks: int = 0  # 0 = enough for max_requests full-length sequences (no KV pressure)
    paused_blocks: int = 0  # Megatron's paused buffer (paused_buffer_size_gb); 0 by default
    # the two KV-pressure corners where Megatron stops (docs/design.md §5.1): "megatron" reproduces it
    # (the run ends stalled / engine_assertion), "safe" fails or re-prefills the request instead
    kv_corners: str = "megatron"
    # expert parallelism (docs/design.md §10): ranks that step together
    ep_size: int = 1
    moe_dispatcher: str = "nccl"  # nccl | nvls | te: Megatron's graph rules under EP differ
    ep_routing: str = "least_loaded"  # least_loaded (Megatron's coordinator) | round_robin
    chunked_prefill: bool = False
    tp_size: int = 1
    num_speculative_tokens: int = 0
    flash_attn_guard: bool = True
    token_rounder: int = 64  # eager-step padding (Megatron TOKEN_ROUNDER)
    request_rounder: int = 4
    stall_steps: int = 0  # 0 = derived from max_sequence_length
    check_invariants: bool = False
    oracle: bool = False  # run the plain step-by-step engine instead of the event-proportional one

    def resolved_kv_blocks(self) -> int:
        if self.kv_blocks > 0:
            return self.kv_blocks
        per_request = -(-self.max_sequence_length // self.block_size)
        return self.max_requests * per_request


@dataclass
class BackendConfig:
    name: str = "sim"
    cost_model: str = "roofline"
    calibration: Optional[str] = None  # path to a calibration table (cost_model=calibrated)
    device: str = "auto"  # torch backend: auto | cpu | cuda
    dtype: str = "float32"  # torch backend
    capture_budget_s: float = 120.0  # torch backend: time budget for graph capture
    capture_memory_gb: float = 8.0  # torch backend: memory budget for graph capture
    host_memory_gb: float = 8.0  # torch backend on the CPU: refuse models whose weights need more


@dataclass
class HardwareConfig:
    """One GPU and its host, as the roofline cost model prices them (``docs/cost-model.md``)."""

    name: str = "h100"
    peak_flops: float = 989e12  # dense bf16 FLOP/s
    hbm_bandwidth: float = 3.35e12  # bytes/s
    flops_efficiency: float = 0.66  # fraction of peak large GEMMs reach
    bandwidth_efficiency: float = 0.7  # fraction of peak bandwidth weight-streaming kernels reach
    memory_gb: float = 80.0  # device memory, 1e9 bytes
    # kernel floors: the shortest a kernel of each class runs, in µs
    floor_gemm_us: float = 6.0
    floor_attention_us: float = 26.0
    floor_scan_us: float = 6.0
    floor_elementwise_us: float = 2.5
    # host and launch
    host_op_us: float = 9.5  # host time per framework op of an eager step (dispatch, Python)
    host_calibration: Optional[str] = None  # `cgbench calibrate --host` file; replaces host_op_us
    kernel_launch_us: float = 2.5  # host time per CUDA kernel launch call
    kernel_gap_us: float = 1.0  # GPU idle between two eager kernels
    graph_node_us: float = 0.5  # GPU idle between two kernels of a graph
    graph_launch_us: float = 10.0  # one graph replay
    sync_us: float = 20.0  # end-of-step synchronisation and sampled-token copy
    # tensor-parallel interconnect
    interconnect_bandwidth: float = 360e9  # bytes/s a ring collective moves per link
    interconnect_latency_us: float = 12.0  # per collective


@dataclass
class SloConfig:
    ttft_ms: Optional[float] = None
    tpot_ms: Optional[float] = None
    e2e_ms: Optional[float] = None


@dataclass
class SweepConfig:
    name: str = "default"
    params: dict[str, str] = field(default_factory=dict)  # key -> Hydra sweep value, e.g. "a,b"
    repeat: int = 1
    jobs: int = 1


@dataclass
class BenchConfig:
    seed: int = 0
    out_dir: str = "results"
    model: ModelConfig = field(default_factory=ModelConfig)
    cg: CGConfig = field(default_factory=CGConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


def _check_choice(value: Any, choices: tuple[str, ...], key: str) -> None:
    _require(value in choices, key, f"{value!r} is not one of {', '.join(choices)}")


def check_dist(d: DistConfig, key: str) -> None:
    workload_source("length", d.dist, f"{key}.dist")  # a built-in or an installed plug-in, else did-you-mean
    _require(d.min >= 1, f"{key}.min", f"must be >= 1, got {d.min}")
    _require(d.max >= d.min, f"{key}.max", f"must be >= {key}.min ({d.min}), got {d.max}")
    if d.dist == "fixed":
        _require(d.value >= 1, f"{key}.value", f"must be >= 1, got {d.value}")
    if d.dist in ("normal", "lognormal"):
        _require(d.mean > 0, f"{key}.mean", f"must be > 0 for dist={d.dist}, got {d.mean}")
    if d.dist == "normal":
        _require(d.std >= 0, f"{key}.std", f"must be >= 0, got {d.std}")
    if d.dist == "lognormal":
        _require(d.sigma > 0, f"{key}.sigma", f"must be > 0 for dist=lognormal, got {d.sigma}")
    if d.dist == "histogram":
        _require(len(d.weights) >= 1, f"{key}.weights", "needs at least one weight")
        _require(len(d.bins) == len(d.weights) + 1, f"{key}.bins",
                 f"needs len(weights)+1 = {len(d.weights) + 1} edges, got {len(d.bins)}")
        _require(all(w >= 0 for w in d.weights) and sum(d.weights) > 0, f"{key}.weights",
                 "must be non-negative with a positive sum")
        _require(all(a < b for a, b in zip(d.bins, d.bins[1:], strict=False)) and d.bins[0] >= 1, f"{key}.bins",
                 "must be strictly increasing and start at >= 1")


def check_trace_options(w: WorkloadConfig) -> None:
    """``workload.trace_format``, ``trace_columns``, ``trace_arrival_unit`` and ``window``."""
    if w.trace_format is not None:
        trace_format(w.trace_format)
    if w.trace_arrival_unit is not None:
        _check_choice(w.trace_arrival_unit, ARRIVAL_UNITS, "workload.trace_arrival_unit")
    c = w.trace_columns
    if c.is_set:
        for key in ("arrival", "prompt", "output"):
            _require(bool(getattr(c, key)), f"workload.trace_columns.{key}",
                     "names the trace's field of each request's "
                     f"{dict(arrival='arrival time', prompt='prompt tokens', output='output tokens')[key]}: "
                     "trace_columns needs arrival, prompt and output")
        _require(c.block_tokens >= 1, "workload.trace_columns.block_tokens", f"must be >= 1, got {c.block_tokens}")
    win = w.window
    _require(not (win.by_time and win.by_rows), "workload.window",
             "a window is by time (start_s, end_s) or by rows (first, last), not both")
    if win.start_s is not None:
        _require(win.start_s >= 0, "workload.window.start_s", f"must be >= 0, got {win.start_s}")
    if win.end_s is not None:
        _require(win.end_s > (win.start_s or 0.0), "workload.window.end_s",
                 f"must be > workload.window.start_s ({win.start_s or 0.0:g}), got {win.end_s}")
    if win.first is not None:
        _require(win.first >= 0, "workload.window.first", f"must be >= 0, got {win.first}")
    if win.last is not None:
        _require(win.last >= (win.first or 0), "workload.window.last",
                 f"must be >= workload.window.first ({win.first or 0}), got {win.last}")


def _trace_unread(w: WorkloadConfig) -> dict[str, str]:
    """The trace keys this workload's trace settings leave unread."""
    keys = ("trace_format", "trace_columns", "trace_arrival_unit", "window")
    if not w.trace:
        return {f"workload.{k}": "no workload.trace (it describes how a trace file is read)" for k in keys}
    unread: dict[str, str] = {}
    if w.trace_format is not None and w.trace_format in TRACE_FORMATS:
        native = TRACE_FORMATS[w.trace_format]
        unread["workload.trace_columns"] = (f"workload.trace_format={native.name} (a native format names its own "
                                            "fields; trace_columns maps those of another trace)")
        if native.unit is not None:
            unread["workload.trace_arrival_unit"] = (f"workload.trace_format={native.name} (its arrivals are "
                                                     f"{native.unit} by definition)")
    elif w.trace_columns.is_set and w.trace_columns.hash_ids is None:
        unread["workload.trace_columns.block_tokens"] = "no workload.trace_columns.hash_ids (the blocks' size)"
    return unread


HARDWARE_POSITIVE = ("peak_flops", "hbm_bandwidth", "flops_efficiency", "bandwidth_efficiency", "memory_gb",
                     "interconnect_bandwidth")
HARDWARE_NON_NEGATIVE = ("floor_gemm_us", "floor_attention_us", "floor_scan_us", "floor_elementwise_us",
                         "host_op_us", "kernel_launch_us", "kernel_gap_us", "graph_node_us", "graph_launch_us",
                         "sync_us", "interconnect_latency_us")


def check_hardware(h: HardwareConfig) -> None:
    for key in HARDWARE_POSITIVE:
        v = getattr(h, key)
        _require(isinstance(v, (int, float)) and v > 0, f"hardware.{key}", f"must be > 0, got {v}")
    for key in ("flops_efficiency", "bandwidth_efficiency"):
        _require(getattr(h, key) <= 1, f"hardware.{key}", f"must be <= 1, got {getattr(h, key)}")
    for key in HARDWARE_NON_NEGATIVE:
        v = getattr(h, key)
        _require(isinstance(v, (int, float)) and v >= 0, f"hardware.{key}", f"must be >= 0, got {v}")
    _require(h.host_calibration is None or bool(h.host_calibration), "hardware.host_calibration",
             "must be a file path or null")


def validate(cfg: BenchConfig) -> BenchConfig:
    """Check cross-field rules the type system cannot; raise ConfigError naming the key."""
    m, e, cg, w, p = cfg.model, cfg.engine, cfg.cg, cfg.workload, cfg.policy
    _check_choice(m.kind, MODEL_KINDS, "model.kind")
    _require(len(m.layers) >= 1 and set(m.layers) <= set("M*-"), "model.layer_pattern",
             f"must be a non-empty string of 'M', '*', '-', got {m.layer_pattern!r}")
    _require(m.pattern_repeat >= 1, "model.pattern_repeat", "must be >= 1")
    if m.kind == "hybrid":
        _require("M" in m.layers, "model.layer_pattern", "a hybrid model needs at least one 'M' layer")
    for key in ("hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                "vocab_size", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim",
                "mamba_num_groups", "mamba_conv_kernel", "dtype_bytes"):
        _require(getattr(m, key) >= 1, f"model.{key}", f"must be >= 1, got {getattr(m, key)}")
    _require(m.num_attention_heads % m.num_kv_heads == 0, "model.num_kv_heads",
             "must divide model.num_attention_heads")
    if "*" in m.layers:
        _require(m.head_dim % 2 == 0, "model.head_dim", f"must be even (rotary embedding), got {m.head_dim}")
    if "M" in m.layers:
        _require(m.mamba_num_heads % m.mamba_num_groups == 0, "model.mamba_num_groups",
                 f"must divide model.mamba_num_heads ({m.mamba_num_heads}), got {m.mamba_num_groups}")
        _require(m.mamba_conv_kernel >= 2, "model.mamba_conv_kernel", f"must be >= 2, got {m.mamba_conv_kernel}")

    for key in ("max_requests", "max_tokens", "max_sequence_length", "block_size", "tp_size"):
        _require(getattr(e, key) >= 1, f"engine.{key}", f"must be >= 1, got {getattr(e, key)}")
    _require(e.kv_blocks >= 0, "engine.kv_blocks", f"must be >= 0 (0 = auto), got {e.kv_blocks}")
    _require(e.paused_blocks >= 0, "engine.paused_blocks", f"must be >= 0, got {e.paused_blocks}")
    _check_choice(e.kv_corners, KV_CORNERS, "engine.kv_corners")
    _require(e.ep_size >= 1, "engine.ep_size", f"must be >= 1, got {e.ep_size}")
    _check_choice(e.moe_dispatcher, MOE_DISPATCHERS, "engine.moe_dispatcher")
    _check_choice(e.ep_routing, EP_ROUTINGS, "engine.ep_routing")
    _require(e.ep_size == 1 or cfg.backend.name == "sim", "engine.ep_size",
             "expert parallelism is simulated only: use backend=sim with engine.ep_size > 1")
    _require(e.num_speculative_tokens >= 0, "engine.num_speculative_tokens", "must be >= 0")
    _require(e.max_tokens >= e.max_requests, "engine.max_tokens",
             f"must be >= engine.max_requests ({e.max_requests}), got {e.max_tokens}")
    _require(e.max_requests % e.tp_size == 0, "engine.max_requests",
             f"must be a multiple of engine.tp_size ({e.tp_size}), got {e.max_requests}")
    _require(e.max_tokens >= e.max_requests * (e.num_speculative_tokens + 1), "engine.max_tokens",
             "must hold one step of every request: >= max_requests * (num_speculative_tokens + 1)")
    _require(e.token_rounder >= 1 and e.request_rounder >= 1, "engine.token_rounder",
             "rounders must be >= 1")
    _require(e.stall_steps >= 0, "engine.stall_steps", "must be >= 0 (0 = auto)")

    grid_kind(cg.kind)  # a built-in or an installed plug-in, else did-you-mean
    _check_choice(cg.distribution, DISTRIBUTIONS, "cg.distribution")
    _require(cg.num_cuda_graphs is None or cg.num_cuda_graphs >= -1, "cg.num_cuda_graphs",
             f"must be null, -1 (auto) or >= 0, got {cg.num_cuda_graphs}")
    _require(cg.cuda_graph_max_tokens >= 1, "cg.cuda_graph_max_tokens", "must be >= 1")
    _require(cg.sizes_per_octave >= 1 and cg.p_per_octave >= 1, "cg.sizes_per_octave",
             "sizes_per_octave and p_per_octave must be >= 1")
    for i, g in enumerate(cg.graphs):
        _require(len(g) == 3, f"cg.graphs[{i}]", f"must be [T, P, D], got {g}")
    for key in ("capture_sizes", "piecewise_sizes"):
        _require(all(int(s) >= 1 for s in getattr(cg, key)), f"cg.{key}", "sizes must be >= 1")
    _require(cg.max_capture_size >= 0 and cg.piecewise_max_tokens >= 0, "cg.max_capture_size",
             "must be >= 0 (0 = engine default)")

    policy_spec(p.name)  # a built-in or an installed plug-in, else did-you-mean
    check_options(p)

    _require(w.num_requests >= 1, "workload.num_requests", f"must be >= 1, got {w.num_requests}")
    reads = workload_source("arrival", w.arrival.process, "workload.arrival.process").reads
    if "rate" in reads and w.trace is None:
        _require(w.arrival.rate > 0, "workload.arrival.rate",
                 f"must be > 0 for process={w.arrival.process}, got {w.arrival.rate}")
    if "burstiness" in reads:
        _require(w.arrival.burstiness > 0, "workload.arrival.burstiness", "must be > 0")
    if "concurrency" in reads:
        _require(w.arrival.concurrency >= 1, "workload.arrival.concurrency",
                 "must be >= 1 for process=closed_loop")
    _require(w.time_scale > 0, "workload.time_scale", f"must be > 0, got {w.time_scale}")
    check_trace_options(w)
    check_dist(w.prompt_len, "workload.prompt_len")
    check_dist(w.output_len, "workload.output_len")

    _check_choice(cfg.backend.name, BACKENDS, "backend.name")
    _check_choice(cfg.backend.cost_model, COST_MODELS, "backend.cost_model")
    for key in PRICERS[cfg.backend.cost_model].requires:
        _require(bool(getattr(cfg.backend, key)), f"backend.{key}",
                 f"cost_model={cfg.backend.cost_model} needs a calibration table path")
    _require(cfg.backend.device in ("auto", "cpu", "cuda"), "backend.device",
             f"must be auto, cpu or cuda, got {cfg.backend.device!r}")
    _check_choice(cfg.backend.dtype, TORCH_DTYPES, "backend.dtype")
    _require(cfg.backend.host_memory_gb > 0, "backend.host_memory_gb", "must be > 0")
    if cfg.backend.name == "torch":
        _require(e.num_speculative_tokens == 0, "engine.num_speculative_tokens",
                 "the torch backend runs no draft model; use 0")
    h = cfg.hardware
    check_hardware(h)
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        v = getattr(cfg.slo, key)
        _require(v is None or v > 0, f"slo.{key}", f"must be > 0 or null, got {v}")
    _require(cfg.sweep.repeat >= 1 and cfg.sweep.jobs >= 1, "sweep.repeat",
             "sweep.repeat and sweep.jobs must be >= 1")
    return cfg


def _dist_unread(d: DistConfig, key: str) -> dict[str, str]:
    table = with_chosen("length", workload_source("length", d.dist, f"{key}.dist"))
    return {f"{key}.{f}": f"{key}.dist={d.dist} (read with dist={'/'.join(readers(table, f))})"
            for f in read_keys(table) if f not in reads_of(table, d.dist)}


def unread_keys(cfg: BenchConfig) -> dict[str, str]:
    """Keys the chosen options never read, each with the setting that makes it inert.

    A key listed here changes nothing for this config; an override that sets one is refused (by
    ``cgbench.config.compose``) instead of being silently ignored. Keys whose value a preset file
    sets stay allowed: only what the user typed is checked."""
    cg, w, p, b = cfg.cg, cfg.workload, cfg.policy, cfg.backend
    unread: dict[str, str] = grid_unread(cg)

    unread.update(_trace_unread(w))
    if w.trace:
        why = f"workload.trace={Path(w.trace).name} (the trace is the workload)"
        for k in ("num_requests", "prompt_len", "output_len"):
            unread[f"workload.{k}"] = why
        if w.arrival.process != "closed_loop":
            unread["workload.arrival"] = why + "; only arrival.process=closed_loop applies to a trace"
    else:
        unread["workload.time_scale"] = "no workload.trace (time_scale scales a trace's arrival times)"
        unread.update(_dist_unread(w.prompt_len, "workload.prompt_len"))
        unread.update(_dist_unread(w.output_len, "workload.output_len"))
    a = w.arrival
    arrivals = with_chosen("arrival", workload_source("arrival", a.process, "workload.arrival.process"))
    for k in read_keys(arrivals):
        if k not in reads_of(arrivals, a.process):
            unread[f"workload.arrival.{k}"] = (f"workload.arrival.process={a.process} "
                                               f"(read with {', '.join(readers(arrivals, k))})")

    if cfg.engine.ep_size == 1:
        for k in ("moe_dispatcher", "ep_routing"):
            unread[f"engine.{k}"] = "engine.ep_size=1 (read with expert parallelism, engine.ep_size > 1)"

    for section in option_sections(p):  # the built-ins' sections, and a plug-in's where the config holds it
        if p.name != section:
            unread[f"policy.{section}"] = f"policy={p.name} (read with policy={section})"

    if b.name == "sim":
        # backend.device / dtype / capture_* stay allowed: `cgbench calibrate` reads them with any backend
        unread["backend.host_memory_gb"] = "backend=sim (read with backend=torch)"
        for k in read_keys(PRICERS):
            if k not in reads_of(PRICERS, b.cost_model):
                unread[f"backend.{k}"] = (f"backend.cost_model={b.cost_model} "
                                          f"(read with cost_model={'/'.join(readers(PRICERS, k))})")
    else:
        for k in ("cost_model", *read_keys(PRICERS)):
            unread[f"backend.{k}"] = f"backend={b.name} (the simulator's cost model; read with backend=sim)"
        for k in ("peak_flops", "hbm_bandwidth", "kernel_launch_us", "graph_launch_us", "flops_efficiency",
                  "bandwidth_efficiency"):
            unread[f"hardware.{k}"] = f"backend={b.name} (the simulator's cost model; read with backend=sim)"
    return unread


def unread_reason(key: str, unread: dict[str, str]) -> str | None:
    """Why ``key`` (or the record holding it) is not read, or None when it is read."""
    for k, why in unread.items():
        if key == k or key.startswith(k + "."):
            return why
    return None


INT64_MAX = 2 ** 63 - 1


def check_finite(cfg: Any, key: str = "") -> Any:
    """Every number in a config (dataclass tree) is finite and every integer fits in 64 bits:
    ``hardware.peak_flops=inf`` or ``workload.prompt_len.sigma=nan`` would turn into NaN/Infinity
    in the results, and an integer beyond 64 bits overflows wherever it meets numpy."""
    import dataclasses
    import math

    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        hints = _field_hints(type(cfg))
        for f in dataclasses.fields(cfg):
            at = f"{key}.{f.name}" if key else f.name
            check_elements(getattr(cfg, f.name), hints.get(f.name), at)
            check_finite(getattr(cfg, f.name), at)
    elif isinstance(cfg, bool) or cfg is None or isinstance(cfg, str):
        pass
    elif isinstance(cfg, int):
        _require(-INT64_MAX - 1 <= cfg <= INT64_MAX, key, f"{cfg} does not fit in 64 bits")
    elif isinstance(cfg, float):
        _require(math.isfinite(cfg), key, f"must be a finite number, got {cfg}")
    elif isinstance(cfg, (list, tuple)):
        for i, v in enumerate(cfg):
            check_finite(v, f"{key}[{i}]")
    elif isinstance(cfg, dict):
        for k, v in cfg.items():
            check_finite(v, f"{key}.{k}")
    return cfg


_HINTS: dict[type, dict[str, Any]] = {}
_ELEMENT_WORDS = {int: "an integer", float: "a number"}


def _field_hints(cls: type) -> dict[str, Any]:
    """A config dataclass's resolved field types (once per class; {} when they do not resolve)."""
    if cls not in _HINTS:
        import typing

        try:
            _HINTS[cls] = typing.get_type_hints(cls)
        except Exception:  # a plug-in's section with annotations this module cannot resolve
            _HINTS[cls] = {}
    return _HINTS[cls]


def check_elements(value: Any, hint: Any, key: str) -> None:
    """The elements of a list field have the field's element type (``cg.capture_sizes: list[int]``,
    ``cg.graphs: list[list[int]]``): OmegaConf lets ``[[64,1,0]]`` into a ``list[int]``, which every
    reader of the field would then meet as a list."""
    import typing

    if typing.get_origin(hint) is not list or not isinstance(value, list):
        return
    (element,) = typing.get_args(hint) or (Any,)
    for i, v in enumerate(value):
        at = f"{key}[{i}]"
        if element in _ELEMENT_WORDS:
            ok = isinstance(v, (int, float) if element is float else int) and not isinstance(v, bool)
            _require(ok, at, f"must be {_ELEMENT_WORDS[element]}, got {v!r}")
        elif typing.get_origin(element) is list:
            _require(isinstance(v, list), at, f"must be a list, got {v!r}")
            check_elements(v, element, at)
