"""The roofline price of MoE layers (``E`` in ``model.layer_pattern``), per tensor-parallel rank.

An MoE layer is: norm, router GEMM (``hidden × num_experts``, replicated over TP), score function and
top-k, permutation (each token copied once per chosen expert), the experts' grouped GEMMs (up, the
activation, down), un-permutation (the weighted sum back to one row per token), the shared experts
(a dense FFN every token passes through) and the residual. Under expert parallelism
(``engine.ep_size`` = p > 1) each rank holds ``num_experts / p`` experts, and the routed tokens are
exchanged twice per layer (dispatch before the experts, combine after).

Load, under uniform top-k routing: a rank computing ``T`` tokens sends ``T·k`` token copies to the
experts, spread evenly over all ``E`` experts. Each rank is priced as if every rank computed as many
tokens as it does, so its ``E/p`` experts receive ``T·k`` copies in all, and an expert is active
(receives at least one copy) with probability ``1 − (1 − k/E)^(p·T)``. That is the imbalance
assumption: expected load, no hot experts (routers trained with load-balancing losses, as both
presets' are); since a lockstep step costs the slowest rank's price, pricing the busiest rank as if
all ranks were as busy is an upper bound on its experts' work.

Padding: a step computes ``Tc`` tokens of which ``T`` are real (a graph's padded shape, or Megatron's
eager padding). Every computed token is routed and computed (Megatron's inference dispatchers count
the padded tokens as valid: ``update_metadata(hidden_states.shape[0])`` in
``token_dispatcher_inference.py``), but Megatron zero-fills the padded input ids
(``DynamicInferenceContext._clear_input_id_padding``) and points padded rows at the dummy KV block, so
every padded token carries the same hidden state and the router sends all of them to the same ``k``
experts. With ``model.moe_padded_routing=shared`` (the default) padding adds its copies to those ``k``
experts, which are active besides the real tokens' with probability ``1 − active / (E/p)``;
``spread`` routes padded tokens like real ones (uniformly: the upper bound).

The grouped GEMM reads every active expert's weights once (at decode: bound by the bandwidth of the
active experts' weights, not of all experts) and computes every expert's rows in tiles of
``GROUPED_GEMM_TILE_ROWS`` rows: an active expert computes at least one whole tile, so a step computes
``max(copies, active · tile)`` rows (Megatron's inference fused MoE aligns each expert's token count
to 16 for its bf16 grouped GEMM, ``expert_alignment`` in ``megatron/core/inference/moe/fused_moe.py``;
vLLM's ``moe_align_block_size`` pads to the kernel's ``BLOCK_SIZE_M`` the same way).

Dispatch / combine per ``engine.moe_dispatcher`` (Megatron's inference dispatchers), each of the two
exchanges costing ``interconnect_latency + bytes / interconnect_bandwidth`` per layer:

* ``nccl`` (``NCCLAllGatherDispatcher``): an all-gather of every rank's tokens, then a reduce-scatter
  of the experts' partial outputs: each rank receives (and sends) ``(p − 1)·T·hidden`` values per
  exchange, whatever ``k``;
* ``nvls`` (``NVLSAllGatherVDispatcher``): the same all-gather / reduce-scatter through NVLink SHARP
  multicast: the same bytes on each link, so priced as ``nccl`` (its lower latency is not modelled);
* ``te`` (the training MoE layer, whose default token dispatcher is ``alltoall``): an all-to-all of
  the routed copies: ``(p − 1)/p · T·k·hidden`` values per exchange.

Megatron sources read: Megatron-LM main at d98e8a64dd (``megatron/core/inference/``,
``megatron/core/transformer/moe/token_dispatcher_inference.py``); ``docs/cost-model.md`` ("MoE
layers") has a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass

from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig

MOE_LAYER = "E"
GROUPED_GEMM_TILE_ROWS = 16
SCORE_BYTES = 4  # router scores / probabilities in fp32
# Host ops of an eager MoE layer: the MLP layer's 18 (norm, up, activation, down, residual) plus the
# routing (router GEMM, score function, top-k, normalisation, tokens per expert) and the
# (un)permutation (sort, gathers, scatter-add), an estimate of an unfused implementation; and the
# shared experts' up, activation and down.
HOST_OPS_MOE_LAYER = 18 + 22
HOST_OPS_SHARED_EXPERTS = 6
HOST_OPS_PER_EXCHANGE = 2  # as a tensor-parallel collective
ALL_GATHER_DISPATCHERS = ("nccl", "nvls")


def expected_active_experts(tokens: float, num_experts: int, top_k: int, ep_size: int = 1) -> float:
    """The expected number of a rank's ``num_experts / ep_size`` experts that receive at least one of
    the ``ep_size · tokens`` tokens routed (uniform top-k: each token picks ``top_k`` distinct experts)."""
    if tokens <= 0:
        return 0.0
    miss = 1.0 - top_k / num_experts
    return num_experts / ep_size * (1.0 - miss ** (ep_size * tokens))


def padded_rows(copies: float, active: float, tile: int = GROUPED_GEMM_TILE_ROWS) -> float:
    """Rows a grouped GEMM computes for ``copies`` routed rows over ``active`` experts: every active
    expert computes at least one whole tile (the partial last tile of a busier expert, half a tile on
    average, is left out: it matters only while experts hold few tiles)."""
    if copies <= 0 or active <= 0:
        return 0.0
    return max(copies, active * tile)


def exchange_values_per_token(dispatcher: str, ep_size: int, top_k: int) -> float:
    """Hidden-state vectors one rank moves per token it computes, in one dispatch (or one combine)."""
    if ep_size <= 1:
        return 0.0
    if dispatcher in ALL_GATHER_DISPATCHERS:
        return float(ep_size - 1)
    return (ep_size - 1) / ep_size * top_k


@dataclass(frozen=True, slots=True)
class MoeLayers:
    """The MoE layers of a model on one rank; ``classes(tokens)`` prices them for a step that computes
    ``tokens`` tokens (every term is non-decreasing in ``tokens``)."""

    layers: int
    hidden: int
    dtype_bytes: int
    num_experts: int
    top_k: int
    expert_ffn: float  # per rank (divided by tp)
    gate_matrices: int  # 2 for a gated (SwiGLU) expert FFN, else 1
    shared_ffn: float  # all shared experts' FFN width, per rank
    ep_size: int
    dispatcher: str
    padding_shared: bool  # padded tokens all routed to the same k experts (model.moe_padded_routing)
    flops: float  # effective FLOP/s
    bandwidth: float  # effective bytes/s
    floor_gemm: float  # seconds
    floor_elementwise: float
    link_bandwidth: float
    link_latency: float

    @classmethod
    def build(cls, model: ModelConfig, hardware: HardwareConfig, tp_size: int, ep_size: int,
              dispatcher: str, gated: bool) -> MoeLayers:
        return cls(
            layers=model.layers.count(MOE_LAYER), hidden=model.hidden_size, dtype_bytes=model.dtype_bytes,
            num_experts=model.num_experts, top_k=model.experts_per_token,
            expert_ffn=model.moe_ffn_hidden_size / tp_size, gate_matrices=2 if gated else 1,
            shared_ffn=model.moe_shared_experts * model.moe_shared_expert_ffn_hidden_size / tp_size,
            ep_size=ep_size, dispatcher=dispatcher, padding_shared=model.moe_padded_routing == "shared",
            flops=hardware.peak_flops * hardware.flops_efficiency,
            bandwidth=hardware.hbm_bandwidth * hardware.bandwidth_efficiency,
            floor_gemm=hardware.floor_gemm_us * 1e-6, floor_elementwise=hardware.floor_elementwise_us * 1e-6,
            link_bandwidth=hardware.interconnect_bandwidth, link_latency=hardware.interconnect_latency_us * 1e-6)

    # ------------------------------------------------------------------ sizes

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep_size

    @property
    def expert_weight_bytes(self) -> float:
        """One expert's up (and gate) and down matrices, per rank."""
        return (self.gate_matrices + 1) * self.hidden * self.expert_ffn * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        """Every MoE layer's weights on one rank: its ``num_experts / ep_size`` experts, the router, the
        shared experts and the norm."""
        h, b = self.hidden, self.dtype_bytes
        per_layer = (self.local_experts * self.expert_weight_bytes + h * self.num_experts * b
                     + (self.gate_matrices + 1) * h * self.shared_ffn * b + h * b)
        return self.layers * per_layer

    @property
    def kernels_per_step(self) -> int:
        """Launches: norm, router, scores and top-k (2), permute, up, activation, down, unpermute,
        residual; the shared experts' up, activation, down; dispatch and combine under EP."""
        per_layer = 10 + (3 if self.shared_ffn > 0 else 0) + (2 if self.ep_size > 1 else 0)
        return self.layers * per_layer

    @property
    def host_ops(self) -> int:
        per_layer = (HOST_OPS_MOE_LAYER + (HOST_OPS_SHARED_EXPERTS if self.shared_ffn > 0 else 0)
                     + (2 * HOST_OPS_PER_EXCHANGE if self.ep_size > 1 else 0))
        return self.layers * per_layer

    # ------------------------------------------------------------------ prices

    def _kernel(self, floor: float, flops: float, nbytes: float, launches: int = 1) -> float:
        return self.layers * max(launches * floor, flops / self.flops, nbytes / self.bandwidth)

    def routed(self, tokens: int, real_tokens: int | None = None) -> tuple[float, float, float]:
        """``(copies, active experts, rows computed)`` of this rank's experts for a step computing
        ``tokens`` tokens, ``real_tokens`` of them real (all when None)."""
        real = tokens if real_tokens is None or real_tokens > tokens else real_tokens
        copies = float(tokens * self.top_k)
        if self.padding_shared:
            active = expected_active_experts(real, self.num_experts, self.top_k, self.ep_size)
            if tokens > real:  # the padding's k experts, k/p of them here, where not already active
                active += self.top_k / self.ep_size * (1.0 - active / self.local_experts)
        else:
            active = expected_active_experts(tokens, self.num_experts, self.top_k, self.ep_size)
        return copies, active, padded_rows(copies, active)

    def expert_gemm_seconds(self, tokens: int, real_tokens: int | None = None) -> float:
        """The routed experts' grouped up and down GEMMs (all MoE layers)."""
        copies, active, rows = self.routed(tokens, real_tokens)
        h, b, f, g = self.hidden, self.dtype_bytes, self.expert_ffn, self.gate_matrices
        up = self._kernel(self.floor_gemm, 2 * h * g * f * rows, active * h * g * f * b + copies * (h + g * f) * b)
        down = self._kernel(self.floor_gemm, 2 * f * h * rows, active * f * h * b + copies * (f + h) * b)
        return up + down

    def exchange_seconds(self, tokens: int) -> float:
        """Dispatch and combine (all MoE layers); 0 at ``ep_size`` = 1."""
        values = exchange_values_per_token(self.dispatcher, self.ep_size, self.top_k)
        if values == 0.0:
            return 0.0
        one = self.link_latency + values * tokens * self.hidden * self.dtype_bytes / self.link_bandwidth
        return self.layers * 2 * one

    def classes(self, tokens: int, real_tokens: int | None = None) -> dict[str, float]:
        """Seconds per breakdown class (``mlp``: router, experts, shared experts; ``elementwise``: norm,
        scores, (un)permutation, activation, residual; ``collectives``: dispatch and combine)."""
        h, b, e = self.hidden, self.dtype_bytes, self.num_experts
        copies = float(tokens * self.top_k)
        f, g, fs = self.expert_ffn, self.gate_matrices, self.shared_ffn
        fe, ge = self.floor_elementwise, self.floor_gemm
        mlp = self._kernel(ge, 2 * h * e * tokens, h * e * b + tokens * (h + e) * b)  # router
        mlp += self.expert_gemm_seconds(tokens, real_tokens)
        elementwise = (self._kernel(fe, 0.0, h * b + tokens * 2 * h * b)  # norm
                       + self._kernel(fe, 0.0, tokens * e * 2 * SCORE_BYTES, launches=2)  # scores, top-k
                       + self._kernel(fe, 0.0, (tokens + copies) * h * b)  # permute
                       + self._kernel(fe, 0.0, copies * (g * f + f) * b)  # activation
                       + self._kernel(fe, 0.0, (copies + tokens) * h * b)  # unpermute
                       + self._kernel(fe, 0.0, tokens * 3 * h * b))  # residual
        if fs > 0:
            mlp += (self._kernel(ge, 2 * h * g * fs * tokens, h * g * fs * b + tokens * (h + g * fs) * b)
                    + self._kernel(ge, 2 * fs * h * tokens, fs * h * b + tokens * (fs + h) * b))
            elementwise += self._kernel(fe, 0.0, tokens * (g * fs + fs) * b)
        return {"mlp": mlp, "elementwise": elementwise, "collectives": self.exchange_seconds(tokens)}

    def add_to(self, out: dict[str, float], tokens: int, real_tokens: int | None = None) -> None:
        """Add the MoE layers' seconds of a ``tokens``-token step (``real_tokens`` real) to a breakdown."""
        for cls, seconds in self.classes(tokens, real_tokens).items():
            out[cls] += seconds


def moe_layers(model: ModelConfig, hardware: HardwareConfig, tp_size: int, ep_size: int, dispatcher: str,
               gated: bool) -> MoeLayers | None:
    """The model's MoE layers, or None for a model without any."""
    if MOE_LAYER not in model.layers:
        return None
    return MoeLayers.build(model, hardware, tp_size, ep_size, dispatcher, gated)


def moe_activation_width(model: ModelConfig, tp_size: int, gated: bool) -> float:
    """Live values per token of an MoE layer (the widest point: the routed copies' input, intermediate
    and output, the shared experts', the scores), per rank; for the graph-pool estimate."""
    g = 2 if gated else 1
    f = model.moe_ffn_hidden_size / tp_size
    fs = model.moe_shared_experts * model.moe_shared_expert_ffn_hidden_size / tp_size
    h = model.hidden_size
    return (h + model.experts_per_token * (h + g * f + f + h) + (g * fs + fs if fs else 0.0) + h
            + model.num_experts * SCORE_BYTES / model.dtype_bytes)


def engine_ep(engine: EngineConfig | None) -> tuple[int, str]:
    """``(ep_size, moe_dispatcher)`` of an engine config (1 and nccl without one)."""
    if engine is None:
        return 1, "nccl"
    return engine.ep_size, engine.moe_dispatcher
