"""Typed configuration records.

These dataclasses are the schema of the Hydra tree in ``conf/`` (``cgbench.config.compose`` registers them
and composes YAML into them) and the only configuration the engine, scheduler and backends ever
see. They import nothing from Hydra, so library users and tests can build them directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
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
MEGATRON_RULES = ("0.19.2", "main")  # engine.megatron_rules: the rule sets of cgbench/engine/kv_rules.py
PREFIX_GATES = ("full", "computed")  # full: Megatron 0.19.2's non-chunked candidate; computed: cgbench-only
PREFIX_EVICTIONS = ("lru", "ref_zero")  # Megatron's prefix_caching_eviction_policy (its default: ref_zero)
MOE_DISPATCHERS = ("nccl", "nvls", "te")
LAYER_SYMBOLS = "M*-E"  # Mamba-2, attention, MLP, MoE (Megatron's hybrid layer symbols)
MOE_KEYS = ("num_experts", "experts_per_token", "moe_ffn_hidden_size", "moe_shared_experts",
            "moe_shared_expert_ffn_hidden_size", "moe_padded_routing")
MOE_PADDED_ROUTING = ("shared", "spread")
EP_ROUTINGS = ("least_loaded", "round_robin")
DP_ROUTINGS = ("least_loaded", "round_robin", "prefix_first_block", "prefix_longest")  # engine/router.py


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


@dataclass
class PolicyConfig:
    """The policy's name and the option sections (``policy.<name>``) of the built-in policies that
    have options (``cgbench.config.registry.policies``); a plug-in policy's configs add its own."""

    name: str = "megatron"
    pad_guard: PadGuardConfig = field(default_factory=PadGuardConfig)
    wait_timeout: WaitTimeoutConfig = field(default_factory=WaitTimeoutConfig)


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
    ssm_chunk_alignment: int = 128  # Megatron's ssm_chunk_alignment (the Mamba chunk size, 128 by default)
    # Megatron main's hybrid SSM state handoff pinning (#6584, megatron_rules=main, hybrid only): a finished
    # request's Mamba slot stays pinned for handoff_release_steps rounds, and admission needs a free slot
    handoff_pinning: bool = False
    handoff_release_steps: int = 1
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
                     "interconnect_bandwidth", "sm_count", "gemm_tile_m", "gemm_tile_n", "attention_efficiency",
                     "attention_half_tokens", "scan_efficiency", "attention_bandwidth_efficiency",
                     "gemm_overlap_exponent")
HARDWARE_NON_NEGATIVE = ("floor_gemm_us", "floor_attention_us", "floor_scan_us", "floor_elementwise_us",
                         "kernel_launch_us", "kernel_gap_us", "graph_node_us", "graph_launch_us",
                         "sync_us", "interconnect_latency_us", "interconnect_hop_us",
                         "interconnect_ll_latency_us", "interconnect_ll_hop_us", "interconnect_ll_bandwidth")
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
    _require(h.host_calibration is None or bool(h.host_calibration), "hardware.host_calibration",
             "must be a file path or null")
    _require(h.host_op_us is None or (isinstance(h.host_op_us, (int, float)) and h.host_op_us >= 0),
             "hardware.host_op_us", f"must be >= 0 or null (the host profile's), got {h.host_op_us}")
    _check_choice(h.host_profile, HOST_PROFILE_NAMES, "hardware.host_profile")
    _require(h.host_profile != "measured" or bool(h.host_calibration), "hardware.host_profile",
             "measured needs hardware.host_calibration (a `cgbench calibrate --host` file)")
    _check_choice(h.allreduce_algorithm, ALLREDUCE_ALGORITHMS, "hardware.allreduce_algorithm")


def padded_slot_fraction(value: str) -> float | None:
    """``model.padded_slot_cost`` as a fraction of a slot's state traffic, None for ``shared``."""
    if value == "full":
        return 1.0
    if value == "shared":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = -1.0
    _require(0.0 <= f <= 1.0, "model.padded_slot_cost", f"must be full, shared or a fraction in [0, 1], got {value!r}")
    return f


def check_spec_acceptance(e: EngineConfig) -> None:
    sa, spec, key = e.spec_acceptance, e.num_speculative_tokens, "engine.spec_acceptance"
    _require(not (sa.per_position and sa.lengths), key, "set per_position or lengths, not both")
    _require(spec > 0 or not (sa.per_position or sa.lengths), key,
             "an acceptance model needs engine.num_speculative_tokens > 0")
    if sa.per_position:
        _require(len(sa.per_position) == spec, f"{key}.per_position",
                 f"needs one probability per draft position ({spec}), got {len(sa.per_position)}")
        for i, p in enumerate(sa.per_position):
            _require(0.0 <= p <= 1.0, f"{key}.per_position[{i}]", f"must be in [0, 1], got {p}")
    if sa.lengths:
        _require(len(sa.lengths) == spec + 1, f"{key}.lengths",
                 f"needs one weight per accepted length 0..{spec} ({spec + 1}), got {len(sa.lengths)}")
        for i, w in enumerate(sa.lengths):
            _require(w >= 0.0, f"{key}.lengths[{i}]", f"must be >= 0, got {w}")
        _require(sum(sa.lengths) > 0, f"{key}.lengths", "needs a positive total weight")
        # weights near the float maximum sum to inf: every weight / inf is 0, read as every draft accepted
        _require(math.isfinite(sum(sa.lengths)), f"{key}.lengths",
                 f"weights sum to {sum(sa.lengths)}, not a finite number: give relative weights (e.g. counts)")


def check_moe(m: ModelConfig, ep_size: int, backend: str) -> None:
    """The MoE keys of a model with 'E' layers (``ep_size`` must split the experts evenly, as Megatron
    requires)."""
    for key in ("num_experts", "experts_per_token", "moe_ffn_hidden_size"):
        _require(getattr(m, key) >= 1, f"model.{key}", f"must be >= 1 for a model with 'E' (MoE) layers, "
                 f"got {getattr(m, key)}")
    _require(m.experts_per_token <= m.num_experts, "model.experts_per_token",
             f"must be <= model.num_experts ({m.num_experts}), got {m.experts_per_token}")
    _require(m.moe_shared_experts >= 0, "model.moe_shared_experts", f"must be >= 0, got {m.moe_shared_experts}")
    if m.moe_shared_experts > 0:
        _require(m.moe_shared_expert_ffn_hidden_size >= 1, "model.moe_shared_expert_ffn_hidden_size",
                 f"must be >= 1 with model.moe_shared_experts={m.moe_shared_experts}, "
                 f"got {m.moe_shared_expert_ffn_hidden_size}")
    _check_choice(m.moe_padded_routing, MOE_PADDED_ROUTING, "model.moe_padded_routing")
    _require(m.num_experts % ep_size == 0, "engine.ep_size",
             f"must divide model.num_experts ({m.num_experts}), got {ep_size}")
    _require(backend == "sim", "model.layer_pattern",
             "MoE ('E') layers are simulated only: use backend=sim")


def validate(cfg: BenchConfig) -> BenchConfig:
    """Check cross-field rules the type system cannot; raise ConfigError naming the key."""
    m, e, cg, w, p = cfg.model, cfg.engine, cfg.cg, cfg.workload, cfg.policy
    _check_choice(m.kind, MODEL_KINDS, "model.kind")
    _require(len(m.layers) >= 1 and set(m.layers) <= set(LAYER_SYMBOLS), "model.layer_pattern",
             f"must be a non-empty string of 'M', '*', '-', 'E', got {m.layer_pattern!r}")
    _require(m.pattern_repeat >= 1, "model.pattern_repeat", "must be >= 1")
    padded_slot_fraction(m.padded_slot_cost)
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
    if "E" in m.layers:
        check_moe(m, e.ep_size, cfg.backend.name)

    for key in ("max_requests", "max_tokens", "max_sequence_length", "block_size", "tp_size"):
        _require(getattr(e, key) >= 1, f"engine.{key}", f"must be >= 1, got {getattr(e, key)}")
    _require(e.kv_blocks >= 0, "engine.kv_blocks", f"must be >= 0 (0 = auto), got {e.kv_blocks}")
    _require(e.paused_blocks >= 0, "engine.paused_blocks", f"must be >= 0, got {e.paused_blocks}")
    _check_choice(e.kv_corners, KV_CORNERS, "engine.kv_corners")
    _check_choice(e.megatron_rules, MEGATRON_RULES, "engine.megatron_rules")
    _require(e.ssm_chunk_alignment >= 1, "engine.ssm_chunk_alignment", f"must be >= 1, got {e.ssm_chunk_alignment}")
    _require(e.handoff_release_steps >= 0, "engine.handoff_release_steps",
             f"must be >= 0, got {e.handoff_release_steps}")
    if e.handoff_pinning:
        _require(e.megatron_rules == "main", "engine.handoff_pinning",
                 "hybrid SSM state handoff pinning is Megatron main's (#6584): set engine.megatron_rules=main; "
                 "megatron-core 0.19.2 has no such pinning")
        _require(m.kind == "hybrid", "engine.handoff_pinning",
                 "only a hybrid model's Mamba slot pinning is modelled: use a hybrid model")
    if e.batch_invariant:
        _require(e.megatron_rules == "main", "engine.batch_invariant",
                 "batch-invariant mode is Megatron main's (#4871, #6521): set engine.megatron_rules=main; "
                 "megatron-core 0.19.2 has no such mode")
        if m.kind == "hybrid":  # dynamic_context.py at d98e8a64 asserts these for a hybrid model
            _require(e.num_speculative_tokens == 0, "engine.batch_invariant",
                     "batch-invariant mode for a hybrid model supports one-token decode only: "
                     "set engine.num_speculative_tokens=0")
            _require(not e.chunked_prefill or e.max_tokens > e.ssm_chunk_alignment, "engine.batch_invariant",
                     f"batch-invariant SSM chunked prefill needs engine.max_tokens ({e.max_tokens}) > "
                     f"engine.ssm_chunk_alignment ({e.ssm_chunk_alignment})")
    _require(e.ep_size >= 1, "engine.ep_size", f"must be >= 1, got {e.ep_size}")
    _check_choice(e.moe_dispatcher, MOE_DISPATCHERS, "engine.moe_dispatcher")
    _check_choice(e.ep_routing, EP_ROUTINGS, "engine.ep_routing")
    _require(e.ep_size == 1 or cfg.backend.name == "sim", "engine.ep_size",
             "expert parallelism is simulated only: use backend=sim with engine.ep_size > 1")
    check_data_parallel(cfg)
    _require(e.num_speculative_tokens >= 0, "engine.num_speculative_tokens", "must be >= 0")
    _require(e.max_tokens >= e.max_requests, "engine.max_tokens",
             f"must be >= engine.max_requests ({e.max_requests}), got {e.max_tokens}")
    _require(e.max_requests % e.tp_size == 0, "engine.max_requests",
             f"must be a multiple of engine.tp_size ({e.tp_size}), got {e.max_requests}")
    _require(e.max_tokens >= e.max_requests * (e.num_speculative_tokens + 1), "engine.max_tokens",
             "must hold one step of every request: >= max_requests * (num_speculative_tokens + 1)")
    check_spec_acceptance(e)
    _require(e.token_rounder >= 1 and e.request_rounder >= 1, "engine.token_rounder",
             "rounders must be >= 1")
    _require(e.stall_steps >= 0, "engine.stall_steps", "must be >= 0 (0 = auto)")
    _require(e.prefix_caching_mamba_slots >= 0, "engine.prefix_caching_mamba_slots", "must be >= 0")
    if e.prefix_caching:
        _require(e.ep_size == 1, "engine.prefix_caching", "is modelled on one engine: use engine.ep_size=1")
        _require(e.dp_size == 1, "engine.prefix_caching", "is modelled on one engine (one KV pool): use "
                 "engine.dp_size=1 (engine.dp_routing=prefix_* routes by the trace's block hashes without it)")
        _require(cfg.backend.name == "sim", "engine.prefix_caching", "is simulated only: use backend=sim")
        _require(not (e.batch_invariant and m.kind == "hybrid"), "engine.prefix_caching",
                 "Megatron main's batch-invariant mode does not support Mamba prefix caching (its context "
                 "asserts): use engine.batch_invariant=false or a transformer model")
        _require(not e.handoff_pinning, "engine.prefix_caching",
                 "with engine.handoff_pinning a handed-off request keeps its KV blocks referenced, which is "
                 "not modelled: use engine.handoff_pinning=false")
    else:
        _require(e.prefix_caching_mamba_slots == 0, "engine.prefix_caching_mamba_slots",
                 "needs engine.prefix_caching=true")
    _check_choice(e.prefix_gate, PREFIX_GATES, "engine.prefix_gate")
    _check_choice(e.prefix_caching_eviction, PREFIX_EVICTIONS, "engine.prefix_caching_eviction")
    _require(e.prefix_caching_eviction == "lru" or e.prefix_caching, "engine.prefix_caching_eviction",
             "needs engine.prefix_caching=true")
    _require(e.prefix_gate == "full" or e.prefix_caching, "engine.prefix_gate", "needs engine.prefix_caching=true")

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
    pm = w.prefix
    _require(pm.system_prompts >= 0, "workload.prefix.system_prompts", f"must be >= 0, got {pm.system_prompts}")
    _require(pm.system_prompt_tokens >= 0, "workload.prefix.system_prompt_tokens",
             f"must be >= 0, got {pm.system_prompt_tokens}")
    _require(pm.session_turns >= 1, "workload.prefix.session_turns", f"must be >= 1, got {pm.session_turns}")
    _require(pm.system_prompts == 0 or pm.system_prompt_tokens >= 1, "workload.prefix.system_prompt_tokens",
             "must be >= 1 with workload.prefix.system_prompts > 0")
    _require(not (pm.is_set and w.trace), "workload.prefix",
             "describes generated workloads; a trace brings its own prefix blocks (hash_ids)")
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
    for f in fields(cfg.slo):
        v = getattr(cfg.slo, f.name)
        _require(v is None or v > 0, f"slo.{f.name}", f"must be a number > 0 (ms) or null, got {v}")
    check_percentiles(list(cfg.metrics.percentiles))
    _require(cfg.sweep.repeat >= 1 and cfg.sweep.jobs >= 1, "sweep.repeat",
             "sweep.repeat and sweep.jobs must be >= 1")
    return cfg


def check_data_parallel(cfg: BenchConfig) -> None:
    """``engine.dp_size`` and its routing (docs/data-parallel.md)."""
    e = cfg.engine
    _require(e.dp_size >= 1, "engine.dp_size", f"must be >= 1, got {e.dp_size}")
    _check_choice(e.dp_routing, DP_ROUTINGS, "engine.dp_routing")
    _require(0.0 <= e.dp_routing_alpha <= 1.0, "engine.dp_routing_alpha",
             f"must be in [0, 1], got {e.dp_routing_alpha}")
    if e.dp_size == 1:
        return
    _require(cfg.backend.name == "sim", "engine.dp_size",
             "data parallelism is simulated only: use backend=sim with engine.dp_size > 1")
    if e.ep_size > 1:  # the EP ranks are DP ranks: each EP group is ep_size of them, in lockstep
        _require(e.dp_size % e.ep_size == 0, "engine.dp_size",
                 f"must be a multiple of engine.ep_size ({e.ep_size}): the expert-parallel ranks are "
                 f"data-parallel ranks, got {e.dp_size}")
    if e.dp_routing.startswith("prefix_"):
        _require(bool(cfg.workload.trace), "engine.dp_routing",
                 f"{e.dp_routing} routes on the requests' prefix-block hashes, which only a trace with "
                 "them (Mooncake's hash_ids) carries: use a workload.trace, or least_loaded")


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
