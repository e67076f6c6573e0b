"""A small causal LM that follows ``ModelConfig.layers``: 'M' Mamba-2 mixer, '*' attention, '-' SwiGLU MLP.

A Llama-style transformer is the pattern "*-" repeated; a Nemotron-H-style hybrid mixes all three. Every layer is
pre-norm residual; weights are random from a generator seeded by the config seed (no downloads).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cgbench.backends.torch.models.layers import MLP, Attention, RMSNorm
from cgbench.backends.torch.models.mamba import Mamba2Mixer
from cgbench.backends.torch.models.step import ModelCache, StepInputs
from cgbench.config.schema import BenchConfig, ModelConfig, validate

DEFAULT_SSD_CHUNK = 64
QK_GAIN = 3.0  # attention logits with std ~3: position-dependent attention instead of a context average


class Block(nn.Module):
    def __init__(self, mixer: nn.Module, hidden: int):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.mixer = mixer

    def forward(self, h: torch.Tensor, *args: object) -> torch.Tensor:
        return h + self.mixer(self.norm(h), *args)

    def forward_dense(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mixer.forward_dense(self.norm(h))


class CausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, *, tie_embeddings: bool = False, ssd_chunk: int = DEFAULT_SSD_CHUNK):
        super().__init__()
        check_model(cfg)
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        blocks, n_attn, n_mamba = [], 0, 0
        for kind in cfg.layers:
            if kind == "*":
                mixer, n_attn = Attention(cfg, n_attn), n_attn + 1
            elif kind == "M":
                mixer, n_mamba = Mamba2Mixer(cfg, n_mamba, ssd_chunk), n_mamba + 1
            else:
                mixer = MLP(cfg)
            blocks.append(Block(mixer, cfg.hidden_size))
        self.blocks = nn.ModuleList(blocks)
        self.num_attention_layers, self.num_mamba_layers = n_attn, n_mamba
        self.norm = RMSNorm(cfg.hidden_size)
        self.lm_head = None if tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm(h)
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return h @ weight.T

    def forward(self, step: StepInputs, cache: ModelCache) -> torch.Tensor:
        """Logits (R, vocab) after each row's last token (rows without tokens: meaningless values)."""
        valid = step.token_valid()[:, None]  # (T, 1)
        h = torch.where(valid, self.embed(step.input_ids), 0.0)  # (T, hidden)
        layout = step.attention_layout()
        for block in self.blocks:
            h = torch.where(valid, block(h, step, cache, layout), 0.0)  # padding tokens stay exactly zero
        return self._logits(h[step.last_token.clamp(min=0)])

    def forward_dense(self, input_ids: torch.Tensor) -> torch.Tensor:
        """One whole sequence, no cache: input_ids (L,) -> logits (L, vocab)."""
        h = self.embed(input_ids)
        for block in self.blocks:
            h = block.forward_dense(h)
        return self._logits(h)

    def allocate_cache(self, *, num_blocks: int, block_size: int, num_slots: int, device: torch.device,
                       dtype: torch.dtype) -> ModelCache:
        """num_blocks / num_slots include the trash block / slot (the last one)."""
        cfg = self.cfg
        kv_shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        mixers = [b.mixer for b in self.blocks if isinstance(b.mixer, Mamba2Mixer)]
        state_dtype = torch.promote_types(dtype, torch.float32)
        return ModelCache(
            k=[torch.zeros(kv_shape, device=device, dtype=dtype) for _ in range(self.num_attention_layers)],
            v=[torch.zeros(kv_shape, device=device, dtype=dtype) for _ in range(self.num_attention_layers)],
            conv=[torch.zeros(num_slots, cfg.mamba_conv_kernel - 1, m.conv_dim, device=device, dtype=dtype)
                  for m in mixers],
            ssm=[torch.zeros(num_slots, m.heads, m.head_dim, m.state_dim, device=device, dtype=state_dtype)
                 for m in mixers])


def check_model(cfg: ModelConfig) -> None:
    """The model rules live in the one validator (``cgbench.config.schema.validate``), so the simulator
    refuses exactly the models this engine cannot build; this applies them to a bare ModelConfig."""
    validate(BenchConfig(model=cfg))


def init_weights(model: CausalLM, seed: int) -> None:
    """Deterministic random weights. Linear layers get std 1/sqrt(fan_in) so activations stay O(1). Two choices
    keep greedy decoding from collapsing onto one repeated token (checked in tests/backends/test_models.py): a small
    embedding, so a token's own direction does not dominate the residual stream (with a tied head it would
    predict itself), and sharper q / k, so attention does not average the context into a fixed point."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: tuple[int, ...], std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name == "embed.weight":
                value = normal(p.shape, 1.0 / math.sqrt(p.shape[1]))
            elif name.endswith(("wq.weight", "wk.weight")):
                value = normal(p.shape, QK_GAIN / math.sqrt(p.shape[1]))
            elif leaf == "conv_weight":
                value = normal(p.shape, 1.0 / math.sqrt(p.shape[1]))
            elif leaf == "dt_bias":  # dt = softplus(dt_bias) log-uniform in [1e-3, 1e-1], as Mamba-2 inits
                dt = torch.exp(torch.rand(p.shape, generator=gen) * math.log(100.0) + math.log(1e-3))
                value = dt + torch.log(-torch.expm1(-dt))
            elif leaf == "a_log":  # A uniform in [1, 16]
                value = torch.log(1.0 + 15.0 * torch.rand(p.shape, generator=gen))
            elif p.dim() == 2:
                value = normal(p.shape, 1.0 / math.sqrt(p.shape[1]))
            else:  # norm weights, D skip: ones; biases: zeros
                value = torch.ones(p.shape) if leaf in ("weight", "norm_weight", "d_skip") else torch.zeros(p.shape)
            p.copy_(value)


def build_model(cfg: ModelConfig, *, seed: int, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32, tie_embeddings: bool = False,
                ssd_chunk: int = DEFAULT_SSD_CHUNK) -> CausalLM:
    """The model with seeded weights, on ``device`` in ``dtype``, frozen, in eval mode.
    Weights are drawn on the CPU in float32 first, so every device and dtype sees the same values."""
    model = CausalLM(cfg, tie_embeddings=tie_embeddings, ssd_chunk=ssd_chunk)
    init_weights(model, seed)
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model
