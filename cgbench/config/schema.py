"""Typed configuration records.

These dataclasses are the schema of the Hydra tree in ``conf/`` (``cgbench.config.compose`` registers them
and composes YAML into them) and the only configuration the engine, scheduler and backends ever
see. They import nothing from Hydra, so library users and tests can build them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any, Optional

from cgbench.config.registry.grids import BUILTIN_GRID_KINDS, grid_unread, kinds_of
from cgbench.config.registry.policies import (
    BUILTIN_POLICIES,
    check_policy,
    option_sections,
)
from cgbench.config.registry.pricers import COST_MODELS as PRICERS
from cgbench.config.registry.traces import TRACE_FORMATS, counted_unit
from cgbench.config.registry.workloads import ARRIVAL_PROCESSES as ARRIVALS
from cgbench.config.registry.workloads import (
    LENGTH_DISTRIBUTIONS,
    read_keys,
    readers,
    reads_of,
    with_chosen,
    workload_source,
)
from cgbench.config.rules.backend import BACKENDS as BACKENDS
from cgbench.config.rules.backend import COST_MODELS as COST_MODELS
from cgbench.config.rules.backend import TORCH_DTYPES as TORCH_DTYPES
from cgbench.config.rules.backend import check_backend
from cgbench.config.rules.base import check_choice as _check_choice
from cgbench.config.rules.base import require as _require
from cgbench.config.rules.bounds import at_least, check_bounds
from cgbench.config.rules.engine import DP_ROUTINGS as DP_ROUTINGS
from cgbench.config.rules.engine import EP_ROUTINGS as EP_ROUTINGS
from cgbench.config.rules.engine import KV_CORNERS as KV_CORNERS
from cgbench.config.rules.engine import MEGATRON_RULES as MEGATRON_RULES
from cgbench.config.rules.engine import MOE_DISPATCHERS as MOE_DISPATCHERS
from cgbench.config.rules.engine import check_data_parallel as check_data_parallel
from cgbench.config.rules.engine import check_engine
from cgbench.config.rules.grid import DISTRIBUTIONS as DISTRIBUTIONS
from cgbench.config.rules.grid import check_grid
from cgbench.config.rules.model import LAYER_SYMBOLS as LAYER_SYMBOLS
from cgbench.config.rules.model import MODEL_KINDS as MODEL_KINDS
from cgbench.config.rules.model import MOE_KEYS as MOE_KEYS
from cgbench.config.rules.model import MOE_PADDED_ROUTING as MOE_PADDED_ROUTING
from cgbench.config.rules.model import check_model
from cgbench.config.rules.model import check_moe as check_moe
from cgbench.config.rules.model import padded_slot_fraction as padded_slot_fraction
from cgbench.config.rules.prefix import PREFIX_EVICTIONS as PREFIX_EVICTIONS
from cgbench.config.rules.prefix import PREFIX_GATES as PREFIX_GATES
from cgbench.config.rules.prefix import check_prefix_caching
from cgbench.config.rules.speculative import check_spec_acceptance as check_spec_acceptance
from cgbench.config.rules.workload import check_dist as check_dist
from cgbench.config.rules.workload import check_trace_options as check_trace_options
from cgbench.config.rules.workload import check_workload
from cgbench.errors import ConfigError as ConfigError  # every package imports it from here

# the built-in names of each registry (installed plug-ins add policies and grid kinds)
CG_KINDS = tuple(BUILTIN_GRID_KINDS)
POLICIES = tuple(BUILTIN_POLICIES)
ARRIVAL_PROCESSES = tuple(ARRIVALS)
LENGTH_DISTS = tuple(LENGTH_DISTRIBUTIONS)
PEER_KINDS = kinds_of("peer")


@dataclass
class ModelConfig:
    """Model dimensions. ``layer_pattern`` uses Megatron's hybrid notation, one char per layer:
    ``M`` Mamba-2 mixer, ``*`` attention, ``-`` MLP, ``E`` MoE. It is repeated ``pattern_repeat`` times.
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
    # MoE layers ('E'; cgbench.backends.sim.moe_cost): routed experts, top-k, each expert's FFN width,
    # shared experts (count, FFN width of each); read only when the pattern has an 'E' layer
    num_experts: int = 0
    experts_per_token: int = 0
    moe_ffn_hidden_size: int = 0
    moe_shared_experts: int = 0
    moe_shared_expert_ffn_hidden_size: int = 0
    # where a step's padded tokens go: "shared" (identical, all to the same top-k experts, as Megatron's
    # zero-filled padding) or "spread" (routed like real tokens)
    moe_padded_routing: str = "shared"
    # What a padded request slot of a CUDA graph costs the Mamba state read/write: full (its own slot),
    # shared (every padded row reads one dummy slot: Megatron's -1 rows), or a fraction in [0, 1]
    padded_slot_cost: str = "shared"

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
class PrefixModelConfig:
    """Prefix-block ids for a generated workload (``cgbench.workload.prefix_model``): each request
    starts with one of ``system_prompts`` shared system prompts of ``system_prompt_tokens`` tokens
    (0 prompts: none), and requests come in sessions of ``session_turns`` consecutive requests whose
    prompts grow by the previous turn's prompt and output (1: no sessions)."""

    system_prompts: int = 0
    system_prompt_tokens: int = 0
    session_turns: int = 1

    @property
    def is_set(self) -> bool:
        return self.system_prompts > 0 or self.session_turns > 1


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
    prefix: PrefixModelConfig = field(default_factory=PrefixModelConfig)  # generated workloads' prefixes

    @property
    def open_loop(self) -> bool:
        """Whether the arrival times are fixed in advance, whatever the engine does (a trace at its
        times, or any generated process but ``closed_loop``, which releases a request per completion)."""
        return self.arrival.process != "closed_loop"


def _policy_config() -> type:
    """``PolicyConfig``, its option sections derived from the registry's records (a new policy's
    section is its record's ``options``, never a field written here too)."""
    sections = [(s.name, s.options, field(default_factory=s.options)) for s in BUILTIN_POLICIES.values()
                if s.options is not None]
    cls = make_dataclass("PolicyConfig", [("name", str, field(default="megatron")), *sections])
    cls.__module__ = __name__
    cls.__doc__ = """The policy's name and the option sections (``policy.<name>``) of the built-in policies that
    have options (``cgbench.config.registry.policies``); a plug-in policy's configs add its own."""
    return cls


PolicyConfig = _policy_config()


@dataclass
class SpecAcceptanceConfig:
    """``engine.spec_acceptance``: how many of a decode step's drafts the target model accepts
    (docs/speculative.md). Neither list set: every draft is accepted (the step emits 1 + S tokens)."""

    per_position: list[float] = field(default_factory=list)  # p_k: draft k accepted given 1..k-1 were
    lengths: list[float] = field(default_factory=list)  # weights of 0, 1, ..., S accepted drafts


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
    # which Megatron's KV rules run (cgbench/engine/kv_rules.py): the 0.19.2 release or main d98e8a64
    megatron_rules: str = "0.19.2"
    # Megatron main's batch-invariant mode (megatron_rules=main only): the 64-token graph ladder, and for a
    # hybrid model with chunked prefill chunks floored to ssm_chunk_alignment with no flash-attn guard
    batch_invariant: bool = False
    # Megatron's ssm_chunk_alignment (the Mamba chunk size, 128 by default)
    ssm_chunk_alignment: int = field(default=128, metadata=at_least(1))
    # Megatron main's hybrid SSM state handoff pinning (#6584, megatron_rules=main, hybrid only): a finished
    # request's Mamba slot stays pinned for handoff_release_steps rounds, and admission needs a free slot
    handoff_pinning: bool = False
    handoff_release_steps: int = field(default=1, metadata=at_least(0))
    # expert parallelism (docs/design.md §10): ranks that step together
    ep_size: int = 1
    moe_dispatcher: str = "nccl"  # nccl | nvls | te: Megatron's graph rules under EP differ
    ep_routing: str = "least_loaded"  # least_loaded (Megatron's coordinator) | round_robin
    # data parallelism (docs/data-parallel.md): engines behind Megatron's coordinator
    dp_size: int = 1
    dp_routing: str = "least_loaded"  # least_loaded | round_robin | prefix_first_block | prefix_longest
    dp_routing_alpha: float = 0.5  # prefix routing: score = alpha * match + (1 - alpha) * free
    chunked_prefill: bool = False
    tp_size: int = 1
    num_speculative_tokens: int = 0
    spec_acceptance: SpecAcceptanceConfig = field(default_factory=SpecAcceptanceConfig)
    # Megatron's async scheduling (async_sched_mode=async): a step that overlaps scheduling with the
    # previous forward records no gating wait (docs/speculative.md, "Async overlap")
    async_overlap: bool = False
    flash_attn_guard: bool = True
    token_rounder: int = 64  # eager-step padding (Megatron TOKEN_ROUNDER)
    request_rounder: int = 4
    stall_steps: int = 0  # 0 = derived from max_sequence_length
    check_invariants: bool = False
    oracle: bool = False  # run the plain step-by-step engine instead of the event-proportional one
    # prefix caching (Megatron's enable_prefix_caching, LRU eviction; docs/prefix-caching.md)
    prefix_caching: bool = False
    # hybrid models: Mamba states the prefix cache holds (Megatron sizes it from prefix_caching_mamba_gb);
    # 0 = memory-only mode: KV blocks are shared, no prefill token is skipped
    prefix_caching_mamba_slots: int = 0
    # the non-chunked gating candidate under prefix caching: "full" = the whole remaining prompt
    # (Megatron 0.19.2, conservative); "computed" = only the tokens the step computes (cgbench-only)
    prefix_gate: str = "full"
    # Megatron's prefix_caching_eviction_policy: "lru" keeps released prompt blocks cached until their
    # room is needed; "ref_zero" (Megatron's own default) frees a block when its last holder releases it
    prefix_caching_eviction: str = "lru"

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
    flops_efficiency: float = 0.8  # fraction of peak a full wave of GEMM tiles reaches
    bandwidth_efficiency: float = 0.85  # fraction of peak bandwidth weight-streaming kernels reach
    memory_gb: float = 80.0  # device memory, 1e9 bytes
    # kernel floors: the shortest a kernel of each class runs, in µs
    floor_gemm_us: float = 4.0
    floor_attention_us: float = 16.0
    floor_scan_us: float = 2.1
    floor_elementwise_us: float = 2.0
    # problem-size efficiency (docs/cost-model.md): GEMM tile/wave quantisation, attention and scan rates
    sm_count: int = 132
    gemm_tile_m: int = 64
    gemm_tile_n: int = 64
    gemm_overlap_exponent: float = 1.5  # p of a GEMM's (compute^p + memory^p)^(1/p)
    attention_efficiency: float = 0.65  # fraction of peak a long attention prefill reaches
    attention_half_tokens: float = 600.0  # chunk tokens at which a chunk over a long cache reaches half of that
    attention_bandwidth_efficiency: float = 0.85  # fraction of peak bandwidth decode attention streams KV at
    scan_efficiency: float = 0.077  # fraction of peak FLOP/s Mamba-2's chunked-scan kernels reach
    # host and launch
    host_profile: str = "megatron"  # megatron | vllm | sglang | measured (cgbench.backends.sim.host_profiles)
    host_op_us: Optional[float] = None  # host time per framework op; None = the host profile's
    host_calibration: Optional[str] = None  # `cgbench calibrate --host` file; replaces host_op_us
    kernel_launch_us: float = 2.5  # host time per CUDA kernel launch call
    kernel_gap_us: float = 1.0  # GPU idle between two eager kernels
    graph_node_us: float = 0.5  # GPU idle between two kernels of a graph
    graph_launch_us: float = 10.0  # one graph replay
    sync_us: float = 20.0  # end-of-step synchronisation and sampled-token copy
    # tensor-parallel interconnect
    interconnect_bandwidth: float = 365e9  # bytes/s a ring collective moves per link
    interconnect_latency_us: float = 30.0  # per collective (alpha)
    interconnect_hop_us: float = 0.0  # per ring step or tree level
    allreduce_algorithm: str = "auto"  # auto (the faster) | ring | tree
    # NCCL's low-latency protocols, which small messages take: fixed cost, cost per ring step, and bytes/s
    # per link (0 = none; cgbench.backends.sim.collectives)
    interconnect_ll_latency_us: float = 6.6
    interconnect_ll_hop_us: float = 1.15
    interconnect_ll_bandwidth: float = 238e9


@dataclass
class SloConfig:
    """Goodput's bounds (vLLM bench serve's ``--goodput ttft:MS tpot:MS e2el:MS``): a request is good
    when it completed and each bound set holds for it; null = not set. No bound set: no goodput."""

    ttft_ms: Optional[float] = None
    tpot_ms: Optional[float] = None
    e2e_ms: Optional[float] = None

    @property
    def bounds(self) -> dict[str, float]:
        """The bounds set, by key (``{"ttft_ms": 500.0}``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def is_set(self) -> bool:
        return bool(self.bounds)

    def describe(self) -> str:
        """``ttft_ms<=500 tpot_ms<=50``, or ``none`` when no bound is set."""
        return " ".join(f"{k}<={v:g}" for k, v in self.bounds.items()) or "none"


# The percentiles a summary may report (AIPerf's set) and those it always reports (the tables, sweep
# summaries, compare rules, plots and advise read them): metrics.percentiles (docs/metrics.md)
PERCENTILE_CHOICES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
REQUIRED_PERCENTILES = (50, 90, 95, 99)


@dataclass
class MetricsConfig:
    percentiles: list[int] = field(default_factory=lambda: list(REQUIRED_PERCENTILES))


def check_percentiles(values: list[int]) -> None:
    """``metrics.percentiles``: distinct values of PERCENTILE_CHOICES, REQUIRED_PERCENTILES among them."""
    key = "metrics.percentiles"
    for v in values:
        _require(v in PERCENTILE_CHOICES, key, f"{v} is not one of {', '.join(map(str, PERCENTILE_CHOICES))}")
    _require(len(set(values)) == len(values), key, f"lists a percentile twice: {values}")
    missing = [q for q in REQUIRED_PERCENTILES if q not in values]
    _require(not missing, key, f"must include {', '.join(map(str, REQUIRED_PERCENTILES))} (tables, compare and "
             f"advise read them); add {', '.join(map(str, missing))}, e.g. "
             f"metrics.percentiles=[{','.join(map(str, sorted(set(values) | set(REQUIRED_PERCENTILES))))}]")


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
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


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
        if native.unit is not None and w.trace_arrival_unit != counted_unit(native.unit):
            unread["workload.trace_arrival_unit"] = (f"workload.trace_format={native.name} (its arrivals are "
                                                     f"{native.unit} by definition)")
    elif w.trace_columns.is_set and w.trace_columns.hash_ids is None:
        unread["workload.trace_columns.block_tokens"] = "no workload.trace_columns.hash_ids (the blocks' size)"
    return unread


HARDWARE_POSITIVE = ("peak_flops", "hbm_bandwidth", "flops_efficiency", "bandwidth_efficiency", "memory_gb",
                     "interconnect_bandwidth", "sm_count", "gemm_tile_m", "gemm_tile_n", "attention_efficiency",
                     "attention_half_tokens", "scan_efficiency", "attention_bandwidth_efficiency",
                     "gemm_overlap_exponent")
HARDWARE_NON_NEGATIVE = ("floor_gemm_us", "floor_attention_us", "floor_scan_us", "floor_elementwise_us",
                         "kernel_launch_us", "kernel_gap_us", "graph_node_us", "graph_launch_us",
                         "sync_us", "interconnect_latency_us", "interconnect_hop_us",
                         "interconnect_ll_latency_us", "interconnect_ll_hop_us", "interconnect_ll_bandwidth")
GEMM_OVERLAP_EXPONENT_RANGE = (1.0, 16.0)
HOST_PROFILE_NAMES = ("megatron", "vllm", "sglang", "measured")
ALLREDUCE_ALGORITHMS = ("auto", "ring", "tree")


def check_hardware(h: HardwareConfig) -> None:
    for key in HARDWARE_POSITIVE:
        v = getattr(h, key)
        _require(isinstance(v, (int, float)) and v > 0, f"hardware.{key}", f"must be > 0, got {v}")
    for key in ("flops_efficiency", "bandwidth_efficiency", "attention_efficiency", "scan_efficiency",
                "attention_bandwidth_efficiency"):
        _require(getattr(h, key) <= 1, f"hardware.{key}", f"must be <= 1, got {getattr(h, key)}")
    for key in HARDWARE_NON_NEGATIVE:
        v = getattr(h, key)
        _require(isinstance(v, (int, float)) and v >= 0, f"hardware.{key}", f"must be >= 0, got {v}")
    # below 1 the norm exceeds compute + memory (worse than no overlap) and near 0 it overflows; above
    # 16 it is within 4.4 % of the roofline's max, and a nanosecond's power would underflow to zero
    p = h.gemm_overlap_exponent
    _require(GEMM_OVERLAP_EXPONENT_RANGE[0] <= p <= GEMM_OVERLAP_EXPONENT_RANGE[1], "hardware.gemm_overlap_exponent",
             f"must be in [1, 16] (1: no overlap, compute + memory; 16: within 4.4 % of the roofline's max), got {p}")
    _require(h.host_calibration is None or bool(h.host_calibration), "hardware.host_calibration",
             "must be a file path or null")
    _require(h.host_op_us is None or (isinstance(h.host_op_us, (int, float)) and h.host_op_us >= 0),
             "hardware.host_op_us", f"must be >= 0 or null (the host profile's), got {h.host_op_us}")
    _check_choice(h.host_profile, HOST_PROFILE_NAMES, "hardware.host_profile")
    _require(h.host_profile != "measured" or bool(h.host_calibration), "hardware.host_profile",
             "measured needs hardware.host_calibration (a `cgbench calibrate --host` file)")
    _check_choice(h.allreduce_algorithm, ALLREDUCE_ALGORITHMS, "hardware.allreduce_algorithm")


def _check_hardware(cfg: BenchConfig) -> None:
    h = cfg.hardware
    check_hardware(h)


def _check_reporting(cfg: BenchConfig) -> None:
    """``slo``, ``metrics`` and ``sweep``."""
    for f in fields(cfg.slo):
        v = getattr(cfg.slo, f.name)
        _require(v is None or v > 0, f"slo.{f.name}", f"must be a number > 0 (ms) or null, got {v}")
    check_percentiles(list(cfg.metrics.percentiles))
    _require(cfg.sweep.repeat >= 1 and cfg.sweep.jobs >= 1, "sweep.repeat",
             "sweep.repeat and sweep.jobs must be >= 1")


# Each feature's rules, in the order validate runs them (the order errors are found in)
RULES: tuple[Callable[[BenchConfig], None], ...] = (check_bounds, check_model, check_engine, check_prefix_caching,
                                                    check_grid, check_policy, check_workload, check_backend,
                                                    _check_hardware, _check_reporting)


def validate(cfg: BenchConfig) -> BenchConfig:
    """Check cross-field rules the type system cannot; raise ConfigError naming the key."""
    for check in RULES:
        check(cfg)
    return cfg


def data_parallel_unread(e: EngineConfig) -> dict[str, str]:
    """The data-parallel keys this engine config never reads, each with why."""
    if e.dp_size == 1:
        why = "engine.dp_size=1 (read with data parallelism, engine.dp_size > 1)"
        return {"engine.dp_routing": why, "engine.dp_routing_alpha": why}
    out = {}
    if not e.dp_routing.startswith("prefix_"):
        out["engine.dp_routing_alpha"] = (f"engine.dp_routing={e.dp_routing} "
                                          "(read with prefix_first_block, prefix_longest)")
    if e.ep_size > 1:
        out["engine.ep_routing"] = "engine.dp_size > 1 (the coordinator routes over every DP rank: engine.dp_routing)"
    return out


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

    if "E" not in cfg.model.layers:
        for k in MOE_KEYS:
            unread[f"model.{k}"] = "model.layer_pattern without an 'E' (MoE) layer"
    if cfg.engine.ep_size == 1:
        for k in ("moe_dispatcher", "ep_routing"):
            unread[f"engine.{k}"] = "engine.ep_size=1 (read with expert parallelism, engine.ep_size > 1)"
    unread.update(data_parallel_unread(cfg.engine))

    for section in option_sections(p):  # the built-ins' sections, and a plug-in's where the config holds it
        if p.name != section:
            unread[f"policy.{section}"] = f"policy={p.name} (read with policy={section})"

    if cfg.hardware.interconnect_ll_bandwidth == 0:
        for k in ("interconnect_ll_latency_us", "interconnect_ll_hop_us"):
            unread[f"hardware.{k}"] = ("hardware.interconnect_ll_bandwidth=0 (no low-latency protocol; read "
                                       "with a bandwidth > 0)")
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
                  "bandwidth_efficiency", "sm_count", "gemm_tile_m", "gemm_tile_n", "gemm_overlap_exponent",
                  "attention_efficiency", "attention_half_tokens", "attention_bandwidth_efficiency",
                  "scan_efficiency", "host_profile", "interconnect_hop_us", "allreduce_algorithm",
                  "interconnect_ll_latency_us", "interconnect_ll_hop_us", "interconnect_ll_bandwidth"):
            unread[f"hardware.{k}"] = f"backend={b.name} (the simulator's cost model; read with backend=sim)"
        unread["model.padded_slot_cost"] = f"backend={b.name} (the simulator's cost model; read with backend=sim)"
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

    if type(cfg) in _FIELD_PLANS or (dataclasses.is_dataclass(cfg) and not isinstance(cfg, type)):
        for name, list_hint in _field_plan(type(cfg)):
            v = getattr(cfg, name)
            if list_hint is not None:
                check_elements(v, list_hint, f"{key}.{name}" if key else name)
            kind = type(v)
            if kind is str or kind is bool or v is None:
                continue
            if kind is int:  # the common cases in line: a sweep point checks about 200 values
                if not -INT64_MAX - 1 <= v <= INT64_MAX:
                    _require(False, f"{key}.{name}" if key else name, f"{v} does not fit in 64 bits")
            elif kind is float:
                if not math.isfinite(v):
                    _require(False, f"{key}.{name}" if key else name, f"must be a finite number, got {v}")
            else:
                check_finite(v, f"{key}.{name}" if key else name)
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


_FIELD_PLANS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _field_plan(cls: type) -> tuple[tuple[str, Any], ...]:
    """A config dataclass's fields in order, each with its type hint where it is a list (whose
    elements ``check_elements`` checks), else None; once per class."""
    plan = _FIELD_PLANS.get(cls)
    if plan is None:
        import dataclasses
        import typing

        hints = _field_hints(cls)
        plan = _FIELD_PLANS[cls] = tuple(
            (f.name, hints.get(f.name) if typing.get_origin(hints.get(f.name)) is list else None)
            for f in dataclasses.fields(cls))
    return plan


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
