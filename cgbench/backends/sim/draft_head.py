"""The draft (MTP) head's share of a speculative step: the roofline's kernel class ``draft_head``.

What Megatron 0.19.2 runs (``text_generation_controller._compute_serial_mtp_and_sample``): after the
target model's forward and the verification, ``S = num_speculative_tokens`` MTP depths run one after
the other, each on one token per active request (decode and prefill rows alike: "MTP forwards are
request-count shaped", padded to the graph's request count under CUDA graphs). A depth is
``LanguageModule.compute_mtp_single_step``: ``MultiTokenPredictionLayer.forward_single_position``
(the verified token's embedding, two RMSNorms, ``eh_proj`` from ``2h`` to ``h``, one transformer
layer) and the output layer, whose weight is the shared embedding when the model ties them, then
sampling. No inference context reaches the MTP layer, so its attention sees its own position only.

Sizes (DeepSeek-V3 §2.2's MTP module, as Megatron builds it): the MTP layer has the shape of one of
the model's own attention + MLP layers (``model.hidden_size``, heads, ``model.ffn_hidden_size``,
gated like the main model's MLP); a dense MLP is assumed (an MoE model's MTP layer reads one
expert set's worth of weights per token, which this model does not split out). Every depth reads the
layer's and the LM head's weights once (``mtp_use_repeated_layer`` or not: each depth is its own
pass), and each weight matrix is split over the ``tp_size`` ranks as the main model's are. The tensor-
parallel collectives of the MTP layer are left out (2 all-reduces of ``N x h`` per depth: small next
to the LM head's weight read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig

# kernels per depth: embedding, 2 norms, eh_proj, attention (norm, QKV, rotary, core, out projection,
# residual), MLP (norm, up, activation, down, residual), final norm, LM head, sampling (2)
KERNELS_PER_DEPTH = 19
HOST_OPS_PER_DEPTH = 70  # one layer's ops (attention 50 + MLP 18, as the roofline counts them) + 2


@dataclass(frozen=True, slots=True)
class _Gemm:
    flops_slot: float  # FLOPs per request row
    bytes_fixed: float  # weight bytes
    bytes_slot: float  # activation bytes per request row


@dataclass(frozen=True, slots=True)
class DraftHead:
    """``depths`` serial MTP passes over a step's request rows, priced on the roofline: each GEMM costs
    ``max(floor_gemm, FLOPs / F, bytes / B)``, the rest ``elementwise`` kernels at their floor or their
    bytes."""

    depths: int
    gemms: tuple[_Gemm, ...]
    elementwise_bytes_slot: float
    elementwise_kernels: int
    floor_gemm_s: float
    floor_elementwise_s: float

    @property
    def kernels(self) -> int:
        return self.depths * KERNELS_PER_DEPTH

    @property
    def host_ops(self) -> int:
        return self.depths * HOST_OPS_PER_DEPTH

    @property
    def weight_bytes(self) -> float:
        """Weight bytes one depth reads (the LM head's included: it is the shared output layer)."""
        return sum(g.bytes_fixed for g in self.gemms)

    def seconds(self, slots: int, flops: float, bandwidth: float) -> float:
        """GPU seconds of the draft head on a step of ``slots`` request rows (``flops``, ``bandwidth``:
        the roofline's effective rates)."""
        per_depth = 0.0
        for g in self.gemms:
            t = g.flops_slot * slots / flops
            m = (g.bytes_fixed + g.bytes_slot * slots) / bandwidth
            per_depth += max(self.floor_gemm_s, t, m)
        ew = self.elementwise_bytes_slot * slots / bandwidth
        per_depth += max(self.elementwise_kernels * self.floor_elementwise_s, ew)
        return self.depths * per_depth


def draft_head(model: ModelConfig, hardware: HardwareConfig, engine: EngineConfig,
               gated_mlp: bool) -> DraftHead | None:
    """The MTP head of ``model`` for ``engine.num_speculative_tokens`` depths; None without speculation."""
    spec = engine.num_speculative_tokens
    if spec == 0:
        return None
    t, b, h = engine.tp_size, model.dtype_bytes, model.hidden_size
    q = model.num_attention_heads / t
    d = model.head_dim
    kv = math.ceil(model.num_kv_heads / t)
    qkv = (q + 2 * kv) * d
    f = model.ffn_hidden_size / t
    g = 2 if gated_mlp else 1
    v = model.vocab_size / t
    gemms = (
        _Gemm(2 * 2 * h * h / t, 2 * h * h / t * b, (2 * h + h / t) * b),  # eh_proj, column-parallel
        _Gemm(2 * h * qkv, h * qkv * b, (h + qkv) * b),
        _Gemm(2 * q * d * h, q * d * h * b, (q * d + h) * b),
        _Gemm(2 * h * g * f, h * g * f * b, (h + g * f) * b),
        _Gemm(2 * f * h, f * h * b, (f + h) * b),
        _Gemm(2 * h * v, h * v * b, (h + v) * b),  # the shared output layer
    )
    # embedding, norms, rotary, residuals, activation, sampling: a few h-sized reads and writes per row
    ew_bytes = (2 * h + 2 * h * 4 + 2 * (q + kv) * d + 2 * 3 * h + (g * f + f)) * b + 2 * model.vocab_size * 4
    return DraftHead(spec, gemms, ew_bytes, KERNELS_PER_DEPTH - len(gemms), hardware.floor_gemm_us * 1e-6,
                     hardware.floor_elementwise_us * 1e-6)
