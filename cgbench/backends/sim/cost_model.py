"""The roofline cost model of the ``sim`` backend: a step priced kernel by kernel, as it runs.

The engine asks ``step_time(StepWork)`` once per simulated step, so everything that depends only on
the model, the device or a step's (padded) shape is computed once and cached; a step then costs a
dict lookup and a few arithmetic operations. ``docs/cost-model.md`` states the model with its sources;
in short, per tensor-parallel rank:

* every kernel of the step costs ``max(floor, FLOPs / F, bytes / B)`` (``F``, ``B``: the preset's
  peak rates times its efficiencies; ``floor``: the preset's minimum duration of the kernel's class);
  a GEMM's FLOP time is tile/wave quantised on the SM count, the attention core pays a per-key cost
  for each prefill chunk (short chunks run far below peak), and Mamba-2's state update and chunked
  scan pay ``floor_scan_us`` per launch on top of their roofline time, the scan's dots at
  ``hardware.scan_efficiency`` of peak and its fp32 chunk states per SSD chunk;
* the ``t - 1`` other ranks are reached by one all-reduce per layer output and per embedding, and
  one all-gather of the logits: ``alpha + steps × hop + wire bytes / bandwidth`` each, by the cheaper
  of NCCL's bulk and low-latency protocols (``cgbench.backends.sim.collectives``);
* an **eager** step (Megatron's eager padding applied) costs
  ``max(GPU, host) + sync`` with ``GPU = Σ kernels + kernels × kernel_gap_us`` and
  ``host = host ops × host_op_us + kernels × kernel_launch_us`` (ops and µs per op: the engine's
  host profile, ``cgbench.backends.sim.host_profiles``): the host issues every op through the
  framework while the GPU runs what it has been given;
* a **graphed** step costs ``GPU(padded shape) + kernels × graph_node_us + graph_launch_us +
  input copies + sync``, the copies being ``GRAPH_INPUT_COPIES`` host ops that stage the step's
  inputs in the graph's static buffers.

The attention core is the only term that depends on the step's context (the KV it reads and the
(query, key) pairs it computes), so it is added to the cached shape part per step, with the same
floats on every path (``step_time``, ``stepper``, ``decode_stretch_times``).

The calibrated model (measured step times) lives in ``cgbench.backends.sim.calibrated``.
"""


from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cgbench.backends.sim.collectives import Collectives
from cgbench.backends.sim.draft_head import DraftHead
from cgbench.backends.sim.host_profiles import MEGATRON, host_profile
from cgbench.backends.sim.moe_cost import MOE_LAYER, MoeLayers, moe_layers
from cgbench.config.schema import (
    ConfigError,
    EngineConfig,
    HardwareConfig,
    ModelConfig,
    padded_slot_fraction,
)
from cgbench.engine.contract import StepWork

SSD_CHUNK = 128
# Host ops of Megatron's eager path (the default host profile; cgbench.backends.sim.host_profiles
# has the others and the sources).
HOST_OPS_PER_LAYER = dict(MEGATRON.ops_per_layer)
HOST_OPS_MAMBA_PREFILL = MEGATRON.ops_mamba_prefill
HOST_OPS_PER_STEP = MEGATRON.ops_per_step
HOST_OPS_PER_COLLECTIVE = MEGATRON.ops_per_collective
GRAPH_INPUT_COPIES = 6  # token ids, positions, slot mapping, block table, sequence lengths, sample rows
MAMBA_PREFILL_SCAN_KERNELS = 5  # the chunked scan (cumsum, chunk state, state passing, bmm, scan)
# The kernel classes a step's time is split into (``RooflineCostModel.breakdown``), in order.
KERNEL_CLASSES = ("projections", "attention", "mamba_scan", "mlp", "lm_head", "elementwise", "collectives",
                  "draft_head")
OVERHEAD_CLASSES = ("launch", "dispatch", "sync")
BREAKDOWN_CLASSES = KERNEL_CLASSES + OVERHEAD_CLASSES

_FLOOR_KEY = {"projections": "floor_gemm_us", "mlp": "floor_gemm_us", "lm_head": "floor_gemm_us",
              "attention": "floor_attention_us", "mamba_scan": "floor_scan_us",
              "elementwise": "floor_elementwise_us"}


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


@dataclass(frozen=True, slots=True)
class EagerPadding:
    """Megatron pads an eager step too (docs/design.md §3): tokens to a multiple of ``TOKEN_ROUNDER``,
    requests to a multiple of ``REQUEST_ROUNDER`` (each rounded up to a tp multiple)."""

    max_tokens: int
    max_requests: int
    token_rounder: int = 64
    request_rounder: int = 4
    tp_size: int = 1
    num_speculative_tokens: int = 0

    @classmethod
    def from_engine(cls, engine: EngineConfig) -> EagerPadding:
        return cls(engine.max_tokens, engine.max_requests, engine.token_rounder, engine.request_rounder,
                   engine.tp_size, engine.num_speculative_tokens)

    def pad(self, tokens: int, prefills: int, decodes: int) -> tuple[int, int, int]:
        tp = self.tp_size
        kt = _round_up(self.token_rounder, tp)
        kr = _round_up(self.request_rounder, tp)
        if prefills == 0:
            if self.num_speculative_tokens > 0:
                d_pad = min(self.max_requests, _round_up(decodes, kr))
                t_pad = d_pad * (self.num_speculative_tokens + 1)
            else:
                t_pad = min(self.max_tokens, self.max_requests, _round_up(tokens, kt))
                d_pad = t_pad
            return max(t_pad, tokens), 0, max(d_pad, decodes)
        r_pad = min(self.max_requests, _round_up(prefills + decodes, kr))
        return _round_up(tokens, kt), max(r_pad - decodes, prefills), decodes


def estimate_attention_pairs(tokens: int, prefills: int, decodes: int, context_tokens: int) -> float:
    """Σ_i q_i·(cached_i + (q_i + 1)/2) from the step's totals (see the module docstring)."""
    cached = context_tokens - tokens
    if cached < 0:  # comparisons, not builtin max calls: once per priced step
        cached = 0
    if prefills == 0:
        if decodes <= 0:
            return 0.0
        q = tokens / decodes
        return tokens * cached / decodes + tokens * (q + 1) / 2
    prefill_tokens = tokens - decodes
    if prefill_tokens < 0:
        prefill_tokens = 0
    causal = prefill_tokens * (prefill_tokens / prefills + 1) / 2
    if decodes == 0:
        return prefill_tokens * cached / prefills + causal
    return cached + decodes + causal


def ssd_chunks(prefill_tokens: int, prefills: int, chunk: int) -> float:
    """The SSD chunks of a step's prefill chunks, ``Σ ceil(q_i / Q)`` (Megatron cuts every request's
    chunk at multiples of Q), from their total: exact for one prefill; with more, each further one may
    open one more partial chunk (``ceil(Tp / Q) + P − 1``), and a chunk holds at least one token."""
    if prefill_tokens <= 0 or prefills <= 0:
        return 0.0
    return float(min(prefill_tokens, -(-prefill_tokens // chunk) + prefills - 1))


@dataclass(frozen=True, slots=True)
class GemmTiling:
    """Tile/wave quantisation of a GEMM ``(M × K) · (K × N)``: the output is cut into
    ``tile_m × tile_n`` tiles, one per SM at a time, so a GEMM takes ``ceil(tiles / SMs)`` waves of
    one tile's FLOPs at one SM's rate (``peak × flops_efficiency / SMs``). Small ``M`` pays a whole
    tile row; a tile count just above a multiple of the SM count pays a nearly empty wave."""

    tile_m: int
    tile_n: int
    sm_count: int
    sm_flops: float
    overlap: float = 2.0

    @classmethod
    def from_hardware(cls, hardware: HardwareConfig) -> GemmTiling:
        return cls(int(hardware.gemm_tile_m), int(hardware.gemm_tile_n), int(hardware.sm_count),
                   hardware.peak_flops * hardware.flops_efficiency / hardware.sm_count,
                   float(hardware.gemm_overlap_exponent))

    def combine(self, compute: float, memory: float) -> float:
        """A GEMM's time from its compute and weight-streaming times: ``(c^p + m^p)^(1/p)``, the
        ``p``-norm (``hardware.gemm_overlap_exponent``): ``p → ∞`` is perfect overlap (the roofline's
        max), ``p = 1`` none. Tiles load and multiply in a pipeline that hides one behind the other
        only in part, most visibly where the two are equal (the roofline's ridge)."""
        p = self.overlap
        return (compute ** p + memory ** p) ** (1.0 / p)

    def seconds(self, m: int, n: float, k: float) -> float:
        if m <= 0:
            return 0.0
        tiles = math.ceil(m / self.tile_m) * math.ceil(n / self.tile_n)
        waves = math.ceil(tiles / self.sm_count)
        return waves * 2.0 * self.tile_m * self.tile_n * k / self.sm_flops


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel (or one fused group) run ``layers`` times per step: it costs
    ``layers · max(launches · floor, FLOPs / F, bytes / B)`` with FLOPs and bytes linear in the
    computed tokens ``T``, request slots ``S``, decode tokens ``Td`` and prefill tokens ``Tp``;
    a GEMM (``gemm_n``, ``gemm_k`` set) takes its FLOP time from ``GemmTiling`` with ``M = T`` (``S``
    for the LM head); ``bytes_state`` is per request slot whose recurrent state is read and written,
    ``bytes_chunk`` per SSD chunk of the step's prefill chunks (the chunked scan's fp32 chunk states),
    ``flops_scale`` scales ``F`` for kernels that do not reach a GEMM's rate. With ``floor_adds`` the
    floor is a fixed cost added to the roofline time instead of a lower bound: a small Triton kernel
    (the Mamba state update, the chunked scan's launches) pays its launch and tail whatever its size
    (docs/cost-model.md, "Mamba-2")."""

    cls: str
    name: str
    layers: int
    launches: int = 1
    flops_tok: float = 0.0
    flops_slot: float = 0.0
    flops_decode: float = 0.0
    flops_prefill: float = 0.0
    bytes_fixed: float = 0.0
    bytes_tok: float = 0.0
    bytes_slot: float = 0.0
    bytes_state: float = 0.0
    bytes_chunk: float = 0.0
    gemm_n: float = 0.0
    gemm_k: float = 0.0
    flops_scale: float = 1.0
    floor_adds: bool = False

    def seconds(self, tokens: int, slots: int, decode_tok: int, prefill_tok: int, floor: float, flops: float,
                bandwidth: float, tiling: GemmTiling | None = None, state_slots: float | None = None,
                chunks: float = 0.0) -> float:
        by = self.bytes_fixed + self.bytes_tok * tokens + self.bytes_slot * slots \
            + self.bytes_state * (slots if state_slots is None else state_slots) + self.bytes_chunk * chunks
        if self.gemm_n and tiling is not None:
            compute = tiling.seconds(slots if self.flops_slot else tokens, self.gemm_n, self.gemm_k)
            return self.layers * max(self.launches * floor, tiling.combine(compute, by / bandwidth))
        f = self.flops_tok * tokens + self.flops_slot * slots + self.flops_decode * decode_tok \
            + self.flops_prefill * prefill_tok
        compute = f / (flops * self.flops_scale)
        if self.floor_adds:
            return self.layers * (self.launches * floor + max(compute, by / bandwidth))
        return self.layers * max(self.launches * floor, compute, by / bandwidth)


@dataclass(frozen=True, slots=True)
class StepPrice:
    """The cached, context-free part of one (padded) shape: ``time = max(gpu + attention, host) + sync``."""

    gpu: float
    host: float
    sync: float


class RooflineCostModel:
    """Step time from the model's dimensions and the device's preset (module docstring)."""

    name = "roofline"

    def __init__(self, model: ModelConfig, hardware: HardwareConfig, tp_size: int = 1, *,
                 eager_padding: EagerPadding | None = None, gated_mlp: bool | None = None, ep_size: int = 1,
                 moe_dispatcher: str = "nccl", draft: DraftHead | None = None, ssd_chunk: int = SSD_CHUNK) -> None:
        """``draft``: the MTP head of a speculative engine (``draft_head.py``), its own kernel class;
        ``ssd_chunk``: the Mamba-2 chunked scan's chunk (Megatron's MambaMixer default, 128)."""
        if tp_size < 1:
            raise ConfigError(f"engine.tp_size: must be >= 1, got {tp_size}")
        layers = model.layers
        if not layers or set(layers) - set(HOST_OPS_PER_LAYER) - {MOE_LAYER}:
            raise ConfigError(f"model.layer_pattern: must be a non-empty string of 'M', '*', '-', 'E', "
                              f"got {model.layer_pattern!r}")
        if gated_mlp is None:
            gated_mlp = getattr(model, "gated_mlp", None)
        if gated_mlp is None:
            gated_mlp = model.kind == "transformer"
        t = tp_size
        b = model.dtype_bytes
        h = model.hidden_size
        self.hardware = hardware
        self.flops = hardware.peak_flops * hardware.flops_efficiency
        self.bandwidth = hardware.hbm_bandwidth * hardware.bandwidth_efficiency
        self.tp_size = t
        self.eager_padding = eager_padding
        self.tiling = GemmTiling.from_hardware(hardware)
        self.padded_slot_fraction = padded_slot_fraction(getattr(model, "padded_slot_cost", "full"))
        self.n_attention = na = layers.count("*")
        self.n_mamba = nm = layers.count("M")
        self.n_mlp = nf = layers.count("-")
        self.floors = {cls: getattr(hardware, key) * 1e-6 for cls, key in _FLOOR_KEY.items()}

        # Attention layer (per rank).
        q = model.num_attention_heads / t
        d = model.head_dim
        kv_r = math.ceil(model.num_kv_heads / t)
        qkv = (q + 2 * kv_r) * d
        self.kv_bytes_per_token = 2 * kv_r * d * b * na  # all attention layers
        # MLP layer.
        f = model.ffn_hidden_size / t
        g = 2 if gated_mlp else 1
        # Mamba-2 layer.
        e = model.mamba_num_heads * model.mamba_head_dim / t
        nh = model.mamba_num_heads / t
        n = model.mamba_state_dim
        gn = math.ceil(model.mamba_num_groups / t) * n
        k = model.mamba_conv_kernel
        conv = e + 2 * gn
        in_dim = 2 * e + 2 * gn + nh
        self.mamba_state_bytes = (conv * (k - 1) + e * n) * b * nm  # per request, all layers
        v = model.vocab_size / t

        norm = 2 * h * b
        residual = 3 * h * b
        common: list[Kernel] = []
        if na:
            common += [
                Kernel("elementwise", "attention norm", na, bytes_fixed=h * b, bytes_tok=norm),
                Kernel("projections", "QKV projection", na, flops_tok=2 * h * qkv, bytes_fixed=h * qkv * b,
                       bytes_tok=(h + qkv) * b, gemm_n=qkv, gemm_k=h),
                Kernel("elementwise", "rotary", na, bytes_tok=2 * (q + kv_r) * d * b),
                Kernel("elementwise", "KV write", na, bytes_tok=4 * kv_r * d * b),
                Kernel("projections", "output projection", na, flops_tok=2 * q * d * h,
                       bytes_fixed=q * d * h * b, bytes_tok=(q * d + h) * b, gemm_n=h, gemm_k=q * d),
                Kernel("elementwise", "attention residual", na, bytes_tok=residual),
            ]
        if nf:
            common += [
                Kernel("elementwise", "MLP norm", nf, bytes_fixed=h * b, bytes_tok=norm),
                Kernel("mlp", "MLP up", nf, flops_tok=2 * h * g * f, bytes_fixed=h * g * f * b,
                       bytes_tok=(h + g * f) * b, gemm_n=g * f, gemm_k=h),
                Kernel("elementwise", "MLP activation", nf, bytes_tok=(g * f + f) * b),
                Kernel("mlp", "MLP down", nf, flops_tok=2 * f * h, bytes_fixed=f * h * b, bytes_tok=(f + h) * b,
                       gemm_n=h, gemm_k=f),
                Kernel("elementwise", "MLP residual", nf, bytes_tok=residual),
            ]
        if nm:
            common += [
                Kernel("elementwise", "Mamba norm", nm, bytes_fixed=h * b, bytes_tok=norm),
                Kernel("projections", "Mamba in projection", nm, flops_tok=2 * h * in_dim,
                       bytes_fixed=h * in_dim * b, bytes_tok=(h + in_dim) * b, gemm_n=in_dim, gemm_k=h),
                Kernel("mamba_scan", "causal conv", nm, flops_tok=2 * conv * k, bytes_fixed=conv * (k + 1) * b,
                       bytes_tok=2 * conv * b, bytes_state=2 * conv * (k - 1) * b),
                Kernel("elementwise", "gated norm", nm, bytes_fixed=e * b, bytes_tok=3 * e * b),
                Kernel("projections", "Mamba out projection", nm, flops_tok=2 * e * h, bytes_fixed=e * h * b,
                       bytes_tok=(e + h) * b, gemm_n=h, gemm_k=e),
                Kernel("elementwise", "Mamba residual", nm, bytes_tok=residual),
            ]
        common += [
            Kernel("elementwise", "embedding", 1, bytes_tok=2 * h * b),
            Kernel("elementwise", "final norm", 1, bytes_fixed=h * b, bytes_tok=norm),
            Kernel("lm_head", "LM head", 1, flops_slot=2 * h * v, bytes_fixed=h * v * b,
                   bytes_slot=(h + v) * b, gemm_n=v, gemm_k=h),
            Kernel("elementwise", "sampling", 1, launches=2, bytes_slot=2 * model.vocab_size * 4),
        ]
        # Mamba-2's SSM (docs/cost-model.md, "Mamba-2"); both kernels pay floor_scan_us per launch on top
        # of their roofline time (floor_adds: small Triton kernels, vLLM PR 43083's state-update timings).
        # Decode: selective_state_update reads x, B, C, dt, writes y, and reads and writes the state.
        self.ssd_chunk = q_ssd = ssd_chunk
        g = math.ceil(model.mamba_num_groups / t)
        state_update: dict[str, Any] = dict(flops_decode=6 * e * n, bytes_fixed=(3 * nh + e) * b,
                                            bytes_state=2 * e * n * b)
        decode_ssd = [Kernel("mamba_scan", "SSM update", nm, bytes_tok=(conv + nh + e) * b, floor_adds=True,
                             **state_update)] if nm else []
        # Prefill: the chunked scan (SSD, chunk Q) in five Triton kernels (chunk cumsum, chunk states,
        # state passing, C·Bᵀ, chunk scan) and the decodes' state update. Its tensor-core dots run at
        # hardware.scan_efficiency of peak: per token the chunk states Bᵀ·X and the state output C·h
        # (2·d_inner·N each), the intra-chunk C·Bᵀ (2·Q·G·N) and its causal half product with X
        # (Q·d_inner). Its bytes per token: x and B, C read twice, y written, dt and dA in fp32; per SSD
        # chunk the fp32 chunk states (written, read and written by the state pass, read by the scan:
        # 16·d_inner·N) and C·Bᵀ in fp32 (written and read: 8·G·Q²): a short chunk pays a whole chunk's.
        prefill_ssd = [Kernel("mamba_scan", "SSM chunked scan", nm, launches=1 + MAMBA_PREFILL_SCAN_KERNELS,
                              flops_prefill=4 * e * n + q_ssd * (e + 2 * gn),
                              bytes_tok=(3 * e + 4 * gn) * b + 12 * nh, bytes_chunk=16 * e * n + 8 * g * q_ssd ** 2,
                              flops_scale=hardware.scan_efficiency / hardware.flops_efficiency, floor_adds=True,
                              **state_update)] if nm else []
        self.kernels_decode = tuple(common + decode_ssd)
        self.kernels_prefill = tuple(common + prefill_ssd)
        # MoE layers ('E'): priced by cgbench.backends.sim.moe_cost, added to the shape's classes
        self.moe: MoeLayers | None = moe_layers(model, hardware, t, ep_size, moe_dispatcher, gated_mlp)
        self.weight_bytes = sum(kn.layers * kn.bytes_fixed for kn in self.kernels_decode)  # per rank
        if self.moe is not None:
            self.weight_bytes += self.moe.weight_bytes

        # Collectives: one all-reduce per layer output and per (vocab-parallel) embedding, one logits
        # all-gather (cgbench.backends.sim.collectives).
        self.collectives_per_step = (len(layers) + 2) if t > 1 else 0
        self.collectives = Collectives.from_hardware(hardware, t)
        self._allreduces = len(layers) + 1
        self._allreduce_bytes_tok = h * b
        self._gather_bytes_slot = model.vocab_size * b

        # Attention core: the only context-dependent term. Its FLOP side is
        # (pairs + attention_half_tokens × prefill keys) at peak × attention_efficiency: every query
        # block of a prefill re-reads all the request's keys (K/V loads, softmax rescaling), a cost per
        # key that a long chunk amortises. A q-token chunk over a long cache thus runs at
        # q / (q + attention_half_tokens) of the long-sequence rate, a fresh q-token prompt at
        # q / (q + 2 × attention_half_tokens); decode rows read KV (the memory side).
        self._attn_flop = na * 4 * q * d / (hardware.peak_flops * hardware.attention_efficiency)
        self._attn_half = float(hardware.attention_half_tokens)
        # Its memory side is a fixed latency (launch, split-KV reduction: the floor) plus the KV it
        # streams at attention_bandwidth_efficiency of peak (paged decode kernels stream long rows).
        attn_bw = hardware.hbm_bandwidth * hardware.attention_bandwidth_efficiency
        self._attn_kv = self.kv_bytes_per_token / attn_bw
        self._attn_q = na * 2 * q * d * b / attn_bw
        self._attn_floor = na * self.floors["attention"]

        # Launch counts and host ops.
        coll = self.collectives_per_step
        self.kernels_per_step_decode = sum(kn.layers * kn.launches for kn in self.kernels_decode) + na + coll
        self.kernels_per_step_prefill = sum(kn.layers * kn.launches for kn in self.kernels_prefill) + na + coll
        profile = self.host_profile = host_profile(hardware)
        base_ops = profile.ops_per_step + sum(profile.ops_per_layer.get(c, 0) for c in layers) \
            + profile.ops_per_collective * coll
        if self.moe is not None:
            self.kernels_per_step_decode += self.moe.kernels_per_step
            self.kernels_per_step_prefill += self.moe.kernels_per_step
            base_ops += self.moe.host_ops
        self.draft = draft
        if draft is not None:
            self.kernels_per_step_decode += draft.kernels
            self.kernels_per_step_prefill += draft.kernels
            base_ops += draft.host_ops
        self.host_ops_decode = base_ops
        self.host_ops_prefill = base_ops + profile.ops_mamba_prefill * nm
        self._host_op = profile.op_us * 1e-6
        self._kernel_launch = hardware.kernel_launch_us * 1e-6
        self._kernel_gap = hardware.kernel_gap_us * 1e-6
        self._graph_node = hardware.graph_node_us * 1e-6
        self._graph_launch = hardware.graph_launch_us * 1e-6
        self._input_copies = GRAPH_INPUT_COPIES * (self._host_op + self._kernel_launch)
        self._sync = hardware.sync_us * 1e-6
        # A graphed shape's price depends on the real request count too when padded slots do not
        # pay a full state read/write (model.padded_slot_cost).
        self._slot_sensitive = bool(nm) and self.padded_slot_fraction != 1.0
        self._graphed: dict[tuple[Any, ...], tuple[float, float, float, int, float]] = {}
        # an MoE model's graphed parts, by graph, real slots and real tokens (moe_cost: where padding goes)
        self._graphed_moe: dict[tuple[Any, ...], tuple[float, float, float, int, float]] = {}
        self._eager: dict[tuple[Any, ...], tuple[float, float, float, int, float]] = {}

    # ------------------------------------------------------------------ shape part

    def state_slots(self, slots: int, real_slots: int | None) -> float:
        """The request slots whose Mamba state is read and written: the real ones, plus the padded
        ones at ``model.padded_slot_cost`` (``shared``: all padded rows read one dummy slot)."""
        if real_slots is None or real_slots >= slots:
            return float(slots)
        padded = slots - real_slots
        fraction = self.padded_slot_fraction
        if fraction is None:
            return float(real_slots + 1)
        return real_slots + fraction * padded

    def real_chunks(self, work: StepWork) -> float:
        """The SSD chunks the step's real prefill chunks make (``ssd_chunks`` of its real prefill tokens;
        0 without Mamba layers or prefills): padded tokens open no chunk of their own."""
        if not self.n_mamba or not work.prefills:
            return 0.0
        return ssd_chunks(work.tokens - work.decodes, work.prefills, self.ssd_chunk)

    def shape_classes(self, tokens: int, prefills: int, decodes: int, real_slots: int | None = None,
                      real_tokens: int | None = None, chunks: float | None = None) -> dict[str, float]:
        """Seconds per kernel class (``KERNEL_CLASSES`` but the attention core) of the computed shape,
        ``real_slots`` of its request slots real (the rest padding; None: all real), ``real_tokens``
        of its ``tokens`` (read by MoE layers only) and ``chunks`` SSD chunks (None: those of the
        computed shape's prefill tokens)."""
        slots = prefills + decodes
        state = self.state_slots(slots, real_slots)
        if prefills == 0:
            decode_tok, prefill_tok = tokens, 0
            kernels = self.kernels_decode
        else:
            decode_tok, prefill_tok = decodes, max(tokens - decodes, 0)
            kernels = self.kernels_prefill
        out = dict.fromkeys(KERNEL_CLASSES, 0.0)
        floors, fl, bw, tiling = self.floors, self.flops, self.bandwidth, self.tiling
        if chunks is None:
            chunks = ssd_chunks(prefill_tok, prefills, self.ssd_chunk) if self.n_mamba and prefills else 0.0
        for kn in kernels:
            out[kn.cls] += kn.seconds(tokens, slots, decode_tok, prefill_tok, floors[kn.cls], fl, bw, tiling, state,
                                      chunks)
        if self.draft is not None:
            out["draft_head"] = self.draft.seconds(slots, fl, bw)
        if self.tp_size > 1:
            coll = self.collectives
            out["collectives"] = (self._allreduces * coll.allreduce(self._allreduce_bytes_tok * tokens)
                                  + coll.allgather(self._gather_bytes_slot * slots))
        if self.moe is not None:
            self.moe.add_to(out, tokens, tokens if real_tokens is None else real_tokens)
        return out

    def kernel_count(self, prefills: int) -> int:
        return self.kernels_per_step_prefill if prefills else self.kernels_per_step_decode

    def host_seconds(self, prefills: int) -> float:
        """Host time to issue one eager step: its ops through the framework and its kernel launches."""
        ops = self.host_ops_prefill if prefills else self.host_ops_decode
        return ops * self._host_op + self.kernel_count(prefills) * self._kernel_launch

    def launch_seconds(self, prefills: int, graphed: bool) -> float:
        """GPU time between kernels: launch gaps (eager), or node gaps, one replay and the input copies."""
        kernels = self.kernel_count(prefills)
        if graphed:
            return kernels * self._graph_node + self._graph_launch + self._input_copies
        return kernels * self._kernel_gap

    def _price(self, tokens: int, prefills: int, decodes: int, graphed: bool, real_slots: int | None = None,
               real_tokens: int | None = None, chunks: float | None = None) -> StepPrice:
        gpu = 0.0
        for v in self.shape_classes(tokens, prefills, decodes, real_slots, real_tokens, chunks).values():
            gpu += v
        gpu += self.launch_seconds(prefills, graphed)
        return StepPrice(gpu, 0.0 if graphed else self.host_seconds(prefills), self._sync)

    def computed_shape(self, work: StepWork) -> tuple[int, int, int]:
        """The shape the GPU computes: the graph's, or the real one with Megatron's eager padding."""
        if work.graph is not None:
            return work.graph
        if self.eager_padding is not None:
            return self.eager_padding.pad(work.tokens, work.prefills, work.decodes)
        return work.tokens, work.prefills, work.decodes

    def _shape_part(self, work: StepWork) -> tuple[float, float, float, int, float]:
        """``(gpu, host, sync, Tc, attention Q/O bytes time)`` of the step's shape, cached: graphed steps by
        their graph (with a Mamba layer, and the real slots and SSD chunks), eager ones by their real shape."""
        graph = work.graph
        key: tuple[Any, ...]
        if graph is not None:
            cache = self._graphed
            if self.n_mamba:
                key = (graph, work.prefills + work.decodes if self._slot_sensitive else -1, self.real_chunks(work))
            else:
                key = graph
        else:
            cache, key = self._eager, (work.tokens, work.prefills, work.decodes)
        part = cache.get(key)
        if part is None:
            if graph is not None and self.moe is not None:  # never cached by graph alone
                return self._moe_graphed_part(work, graph)
            if len(cache) > 1 << 16:
                cache.clear()
            tc, pc, dc = self.computed_shape(work)
            price = self._price(tc, pc, dc, graph is not None, work.prefills + work.decodes, work.tokens,
                                self.real_chunks(work))
            part = cache[key] = (price.gpu, price.host, price.sync, tc, self._attn_q * tc)
        return part

    def _moe_graphed_part(self, work: StepWork, graph: tuple[int, int, int]) -> tuple[float, float, float, int, float]:
        """``_shape_part`` of a graphed step of an MoE model: its price depends on the real tokens too."""
        slots = work.prefills + work.decodes
        chunks = self.real_chunks(work)
        key = (graph[0], graph[1], graph[2], work.tokens, slots if self._slot_sensitive else -1, chunks)
        part = self._graphed_moe.get(key)
        if part is None:
            if len(self._graphed_moe) > 1 << 16:
                self._graphed_moe.clear()
            tc, pc, dc = graph
            price = self._price(tc, pc, dc, True, slots, work.tokens, chunks)
            part = self._graphed_moe[key] = (price.gpu, price.host, price.sync, tc, self._attn_q * tc)
        return part

    # ------------------------------------------------------------------ pricing protocol

    def prefill_key_overhead(self, work: StepWork) -> float:
        """``attention_half_tokens × Σ keys`` over the step's prefill chunks (the keys each attends:
        its cached and new tokens), in pairs: exact from the admitted chunks, else estimated as
        ``estimate_attention_pairs`` does (a prefill-only step's context is its chunks' keys; in a
        mixed step prefills are taken as fresh prompts)."""
        if not work.prefills:
            return 0.0
        if work.admitted:
            keys = 0
            for a in work.admitted:
                keys += a.request.finished_chunk
        elif work.decodes == 0:
            keys = work.context_tokens
        else:
            keys = work.tokens - work.decodes
            if keys < 0:
                keys = 0
        return self._attn_half * keys

    def attention_seconds(self, work: StepWork, tc: int) -> float:
        if not self.n_attention:
            return 0.0
        given = work.attention_pairs
        pairs = (estimate_attention_pairs(work.tokens, work.prefills, work.decodes, work.context_tokens)
                 if given is None else given)
        kv = self._attn_kv * (work.context_tokens + tc) + self._attn_q * tc
        return max(self._attn_flop * (pairs + self.prefill_key_overhead(work)), self._attn_floor + kv)

    def step_time(self, work: StepWork) -> float:
        # max(a, b, ...) written as comparisons (max keeps an item only if it is greater than the one
        # kept, so these are its floats, NaN and ties included) to spare the builtin calls per step.
        gpu, host, sync, tc, aq_tc = self._shape_part(work)
        if self.n_attention:
            ctx = work.context_tokens
            given = work.attention_pairs
            pairs = (estimate_attention_pairs(work.tokens, work.prefills, work.decodes, ctx)
                     if given is None else given)
            attn = self._attn_flop * (pairs + self.prefill_key_overhead(work)) if work.prefills \
                else self._attn_flop * (pairs + 0.0)
            kv = self._attn_floor + (self._attn_kv * (ctx + tc) + aq_tc)
            if kv > attn:
                attn = kv
            gpu = gpu + attn
        else:
            gpu = gpu + 0.0
        return (host if host > gpu else gpu) + sync

    def stepper(self, work: StepWork) -> Callable[[int, int], float]:
        """``f(context_tokens, attention_pairs)``: ``step_time`` for steps of ``work``'s shape (a decode
        stretch), with the shape's part computed once; the same floats as ``step_time``."""
        gpu, host, sync, tc, aq_tc = self._shape_part(work)
        if not self.n_attention:
            g = gpu + 0.0
            const = (host if host > g else g) + sync
            return lambda ctx, pairs: const
        af, akv, floor = self._attn_flop, self._attn_kv, self._attn_floor
        extra = self.prefill_key_overhead(work) if work.prefills else 0.0

        def step(ctx: int, pairs: int) -> float:
            attn = af * (pairs + extra)  # step_time's operations, in its order
            kv = floor + (akv * (ctx + tc) + aq_tc)
            if kv > attn:
                attn = kv
            g = gpu + attn
            return (host if host > g else g) + sync

        return step

    def decode_stretch_times(self, work: StepWork, k: int, ctx_step: int, pairs_step: int) -> Any:
        """The times of ``k`` consecutive steps of one shape whose context and attention pairs grow by
        ``ctx_step`` / ``pairs_step`` per step (a decode stretch), as a float64 array: the same floats
        as ``step_time`` on each step (the same operations in the same order, elementwise)."""
        import numpy as np

        gpu, host, sync, tc, aq_tc = self._shape_part(work)
        if not self.n_attention:
            return np.full(k, max(gpu + 0.0, host) + sync)
        if work.attention_pairs is None:  # estimated per step from the growing context
            return np.array([self.step_time(StepWork(work.tokens, work.prefills, work.decodes,
                                                     work.context_tokens + i * ctx_step, work.graph))
                             for i in range(k)], dtype=np.float64)
        j = np.arange(k, dtype=np.int64)
        pairs = (work.attention_pairs + j * pairs_step).astype(np.float64)
        ctx = (work.context_tokens + tc + j * ctx_step).astype(np.float64)
        extra = self.prefill_key_overhead(work) if work.prefills else 0.0
        attn = np.maximum(self._attn_flop * (pairs + extra), self._attn_floor + (self._attn_kv * ctx + aq_tc))
        return np.maximum(gpu + attn, host) + sync

    # ------------------------------------------------------------------ explanation

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """Seconds per class (``BREAKDOWN_CLASSES``) of the step; they add up to ``step_time``.
        ``launch``: GPU time between kernels (launch gaps; for a graph, node gaps, the replay and the
        input copies); ``dispatch``: the time the GPU waits for an eager step's host; ``sync``: the
        end-of-step synchronisation."""
        tc, pc, dc = self.computed_shape(work)
        graphed = work.graph is not None
        out = self.shape_classes(tc, pc, dc, work.prefills + work.decodes, work.tokens, self.real_chunks(work))
        out["attention"] = self.attention_seconds(work, tc)
        out["launch"] = self.launch_seconds(pc, graphed)
        gpu = sum(out.values())
        host = 0.0 if graphed else self.host_seconds(pc)
        out["dispatch"] = max(host - gpu, 0.0)
        out["sync"] = self._sync
        return {cls: out[cls] for cls in BREAKDOWN_CLASSES}
