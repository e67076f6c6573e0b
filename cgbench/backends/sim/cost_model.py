"""Step-time cost models for the ``sim`` backend: a roofline model and a calibrated table.

The engine asks ``CostModel.step_time(StepWork)`` once per simulated step, so both models do their
work in ``__init__`` and answer with a handful of arithmetic operations (plus a dict lookup).

Roofline
--------
Per tensor-parallel rank (``t = tp_size``: heads, FFN width, Mamba heads and the LM head are split
``t`` ways; KV heads and Mamba groups are split too but never below one per rank), a step costs::

    gpu = n_attn  [gemm(W_A) + max(4·(n_q/t)·d·pairs / F,  (kv·(ctx + Tc) + 2·(n_q/t)·d·b·Tc) / B)]
        + n_mamba [gemm(W_M) + max(ssd_flops / F,          (2·Rc·state + act_M·b·Tc) / B)]
        + n_mlp   [gemm(W_F)]
        + max(2·Sc·h·V/t / F, (h·V/t·b + Sc·(h + V/t)·b) / B) + 2·Tc·h·b / B
    gemm(W) = max(2·W·Tc / F, (W·b + act·b·Tc) / B)

with ``F = peak_flops · flops_efficiency``, ``B = hbm_bandwidth · bandwidth_efficiency``, ``b`` the
dtype bytes and, each for one layer on one rank:

* ``W_A = h·d·(n_q/t + 2·kv_r) + (n_q/t)·d·h`` (QKV and output projections, ``kv_r = ceil(n_kv/t)``),
  ``kv = 2·kv_r·d·b`` bytes of K and V per token.
* ``W_F = (g + 1)·h·f/t`` with ``g = 2`` for a gated (SwiGLU) MLP and ``g = 1`` for a plain one
  (squared ReLU, Nemotron-H); ``ModelConfig`` has no flag, so ``kind=transformer`` ⇒ gated.
* ``W_M = h·(2·e + 2·G·N + H) + conv·(K + 1) + e·h`` with ``e = mamba heads × head dim / t``,
  ``H = mamba heads / t``, ``G = ceil(groups / t)``, ``conv = e + 2·G·N``;
  ``state = (conv·(K - 1) + e·N)·b`` bytes of conv and SSM state per request.
* Every ``W`` also counts its layer's norm and per-head vectors.
* ``ssd_flops = 2·conv·K·Tc + decode_tokens·6·e·N + prefill_tokens·(4·e·N + 2·Q·(e + G·N))``: the
  recurrent update for decode tokens and the chunked scan (chunk ``Q = 128``) for prefill tokens.
* ``act`` counts the elements each layer's kernels read and write per token (GEMM inputs and
  outputs, norm, residual) — small next to the weights.

Each kernel class (projections, attention core, SSD scan, LM head) is a separate roofline term, so
a step can be memory-bound in one (the attention reading the KV cache, the Mamba state traffic) and
compute-bound in another (the projections of a long prefill). Weights are read once per step.

``pairs`` is the number of (query, key) pairs the attention computes, Σ_i q_i·(cached_i + (q_i+1)/2)
over the real requests. The engine can pass it exactly (``StepWork.attention_pairs``); otherwise it
is estimated from ``(T, P, D, ctx)`` with ``cached = ctx - T``: decode-only steps and prefill-only
steps share ``cached`` evenly between their requests (exact for decode-only steps and for a single
prefill chunk); in mixed steps the prefills are taken as fresh prompts and the decodes hold the
cache. Prefill tokens split evenly between the prefill requests for the causal term.

Shapes: a **graphed** step is computed on the replayed graph's padded shape — ``Tc = Tg`` tokens
through every projection, ``Rc = Pg + Dg`` request slots of Mamba state, ``Sc = Pg + Dg`` rows
through the LM head (it runs on the sampled last token of each request only) — with the attention
reading only the real requests' KV (``ctx``, ``pairs``), plus one ``graph_launch_us``. An **eager**
step is computed on the real shape, or on Megatron's eager padding when an ``EagerPadding`` is given
(``make_cost_model`` passes the engine's: tokens rounded up to 64, requests to 4, semantics §4.1),
plus ``kernel_launch_us`` for each kernel it launches: ``KERNELS_PER_LAYER`` per layer (attention 8,
Mamba 10, MLP 5), ``MAMBA_PREFILL_KERNELS`` more per Mamba layer when the step has prefills (the
chunked-scan path), and ``KERNELS_PER_STEP`` for embedding, final norm, LM head and sampling.
Tensor-parallel communication is not modelled.

The calibrated model (measured step times) lives in ``cgbench.backends.sim.calibrated``.
"""


from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cgbench.config.schema import (
    ConfigError,
    EngineConfig,
    HardwareConfig,
    ModelConfig,
)
from cgbench.engine.contract import StepWork

KERNELS_PER_LAYER = {"*": 8, "M": 10, "-": 5}
MAMBA_PREFILL_KERNELS = 6
KERNELS_PER_STEP = 6
SSD_CHUNK = 128


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


@dataclass(frozen=True, slots=True)
class EagerPadding:
    """Megatron pads an eager step too (semantics §4.1): tokens to a multiple of ``TOKEN_ROUNDER``,
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
    cached = max(context_tokens - tokens, 0)
    if prefills == 0:
        if decodes <= 0:
            return 0.0
        q = tokens / decodes
        return tokens * cached / decodes + tokens * (q + 1) / 2
    prefill_tokens = max(tokens - decodes, 0)
    causal = prefill_tokens * (prefill_tokens / prefills + 1) / 2
    if decodes == 0:
        return prefill_tokens * cached / prefills + causal
    return cached + decodes + causal


class RooflineCostModel:
    """Roofline step time from the model's dimensions and the device's peak rates (module docstring)."""

    name = "roofline"

    def __init__(self, model: ModelConfig, hardware: HardwareConfig, tp_size: int = 1, *,
                 eager_padding: EagerPadding | None = None, gated_mlp: bool | None = None) -> None:
        if tp_size < 1:
            raise ConfigError(f"engine.tp_size: must be >= 1, got {tp_size}")
        layers = model.layers
        if not layers or set(layers) - set(KERNELS_PER_LAYER):
            raise ConfigError(f"model.layer_pattern: must be a non-empty string of 'M', '*', '-', "
                              f"got {model.layer_pattern!r}")
        if gated_mlp is None:
            gated_mlp = getattr(model, "gated_mlp", None)
        if gated_mlp is None:
            gated_mlp = model.kind == "transformer"
        t = tp_size
        b = model.dtype_bytes
        h = model.hidden_size
        flops = hardware.peak_flops * hardware.flops_efficiency
        bw = hardware.hbm_bandwidth * hardware.bandwidth_efficiency
        self.tp_size = t
        self.eager_padding = eager_padding
        self.n_attention = layers.count("*")
        self.n_mamba = layers.count("M")
        self.n_mlp = layers.count("-")

        # Attention layer (per rank).
        q = model.num_attention_heads / t
        d = model.head_dim
        kv_r = math.ceil(model.num_kv_heads / t)
        w_attn = h * d * (q + 2 * kv_r) + q * d * h + h
        act_attn = (h + d * (q + 2 * kv_r)) + (q * d + h) + 4 * h
        self.kv_bytes_per_token = 2 * kv_r * d * b * self.n_attention  # all attention layers
        # MLP layer.
        f = model.ffn_hidden_size / t
        g = 2 if gated_mlp else 1
        w_mlp = (g + 1) * h * f + h
        act_mlp = (h + g * f) + (g * f + f) + (f + h) + 4 * h
        # Mamba-2 layer.
        e = model.mamba_num_heads * model.mamba_head_dim / t
        nh = model.mamba_num_heads / t
        n = model.mamba_state_dim
        gn = math.ceil(model.mamba_num_groups / t) * n
        k = model.mamba_conv_kernel
        conv = e + 2 * gn
        in_dim = 2 * e + 2 * gn + nh
        w_mamba = h * in_dim + conv * (k + 1) + 3 * nh + e + e * h + h
        act_mamba = (h + in_dim) + (e + h) + 4 * h
        self.mamba_state_bytes = (conv * (k - 1) + e * n) * b * self.n_mamba  # per request, all layers
        # LM head (untied output projection) and final norm.
        w_head = h * model.vocab_size / t + h
        self.weight_bytes = b * (self.n_attention * w_attn + self.n_mlp * w_mlp + self.n_mamba * w_mamba
                                 + w_head)

        # Coefficients of the step-time terms, in seconds per unit.
        self._gemm = [(count * 2 * w / flops, count * w * b / bw, count * a * b / bw)
                      for count, w, a in ((self.n_attention, w_attn, act_attn), (self.n_mlp, w_mlp, act_mlp),
                                          (self.n_mamba, w_mamba, act_mamba)) if count]
        self._attn_flop = self.n_attention * 4 * q * d / flops
        self._attn_kv = self.kv_bytes_per_token / bw
        self._attn_q = self.n_attention * 2 * q * d * b / bw
        self._ssd_tok = self.n_mamba * 2 * conv * k / flops
        self._ssd_decode = self.n_mamba * 6 * e * n / flops
        self._ssd_prefill = self.n_mamba * (4 * e * n + 2 * SSD_CHUNK * (e + gn)) / flops
        self._ssd_state = 2 * self.mamba_state_bytes / bw
        self._ssd_act = self.n_mamba * (2 * conv + nh + 2 * e) * b / bw
        self._head_flop = 2 * h * model.vocab_size / t / flops
        self._head_weights = w_head * b / bw
        self._head_row = (h + model.vocab_size / t) * b / bw
        self._embed = 2 * h * b / bw
        launch = hardware.kernel_launch_us * 1e-6
        base = KERNELS_PER_STEP + sum(KERNELS_PER_LAYER[c] for c in layers)
        self.eager_kernels_decode = base
        self.eager_kernels_prefill = base + MAMBA_PREFILL_KERNELS * self.n_mamba
        self._launch_decode = launch * self.eager_kernels_decode
        self._launch_prefill = launch * self.eager_kernels_prefill
        self._graph_launch = hardware.graph_launch_us * 1e-6
        self._cache: dict[tuple[int, int, int, bool], float] = {}

    def _shape_time(self, tokens: int, prefills: int, decodes: int, graphed: bool) -> float:
        """Everything but the attention core: it depends only on the computed (padded) shape."""
        slots = prefills + decodes
        if prefills == 0:
            decode_tok, prefill_tok = tokens, 0
        else:
            decode_tok, prefill_tok = decodes, max(tokens - decodes, 0)
        total = 0.0
        for flop, weights, act in self._gemm:
            total += max(flop * tokens, weights + act * tokens)
        if self.n_mamba:
            ssd = self._ssd_tok * tokens + self._ssd_decode * decode_tok + self._ssd_prefill * prefill_tok
            total += max(ssd, self._ssd_state * slots + self._ssd_act * tokens)
        total += max(self._head_flop * slots, self._head_weights + self._head_row * slots)
        total += self._embed * tokens
        if graphed:
            return total + self._graph_launch
        return total + (self._launch_prefill if prefills else self._launch_decode)

    def _shape_part(self, work: StepWork) -> tuple[float, int]:
        """(time of everything but the attention core, tokens computed) for the step's shape."""
        if work.graph is not None:
            tc, pc, dc = work.graph
            key = (tc, pc, dc, True)
        else:
            if self.eager_padding is not None:
                tc, pc, dc = self.eager_padding.pad(work.tokens, work.prefills, work.decodes)
            else:
                tc, pc, dc = work.tokens, work.prefills, work.decodes
            key = (tc, pc, dc, False)
        shape = self._cache.get(key)
        if shape is None:
            if len(self._cache) > 1 << 16:
                self._cache.clear()
            shape = self._cache[key] = self._shape_time(tc, pc, dc, key[3])
        return shape, tc

    def step_time(self, work: StepWork) -> float:
        shape, tc = self._shape_part(work)
        if not self.n_attention:
            return shape
        pairs = work.attention_pairs
        if pairs is None:
            pairs = estimate_attention_pairs(work.tokens, work.prefills, work.decodes, work.context_tokens)
        return shape + max(self._attn_flop * pairs,
                           self._attn_kv * (work.context_tokens + tc) + self._attn_q * tc)

    def stepper(self, work: StepWork) -> Callable[[int, int], float]:
        """``f(context_tokens, attention_pairs)``: ``step_time`` for steps of ``work``'s shape (a decode
        stretch), with the shape's part computed once; the same floats as ``step_time``."""
        shape, tc = self._shape_part(work)
        if not self.n_attention:
            return lambda ctx, pairs: shape
        af, akv, aq_tc = self._attn_flop, self._attn_kv, self._attn_q * tc
        return lambda ctx, pairs: shape + max(af * pairs, akv * (ctx + tc) + aq_tc)

    def decode_stretch_times(self, work: StepWork, k: int, ctx_step: int, pairs_step: int) -> Any:
        """The times of ``k`` consecutive steps of one shape whose context and attention pairs grow by
        ``ctx_step`` / ``pairs_step`` per step (a decode stretch), as a float64 array: the same floats
        as ``step_time`` on each step (the same operations in the same order, elementwise)."""
        import numpy as np

        shape, tc = self._shape_part(work)
        if not self.n_attention:
            return np.full(k, shape)
        if work.attention_pairs is None:  # estimated per step from the growing context
            return np.array([self.step_time(StepWork(work.tokens, work.prefills, work.decodes,
                                                     work.context_tokens + i * ctx_step, work.graph))
                             for i in range(k)], dtype=np.float64)
        j = np.arange(k, dtype=np.int64)
        pairs = (work.attention_pairs + j * pairs_step).astype(np.float64)
        ctx = (work.context_tokens + tc + j * ctx_step).astype(np.float64)
        return shape + np.maximum(self._attn_flop * pairs, self._attn_kv * ctx + self._attn_q * tc)
