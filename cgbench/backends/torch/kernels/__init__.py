"""Attention and Mamba-2 SSD kernels: pure torch, with flash-attn / mamba-ssm used when importable on CUDA.

Set ``CGBENCH_KERNELS=torch`` to force the pure-torch paths.
"""

from cgbench.backends.torch.kernels.attention import (
    PagedLayout,
    flash_available,
    paged_attention,
    paged_attention_torch,
    write_kv,
)
from cgbench.backends.torch.kernels.ssd import (
    mamba_ssm_available,
    segsum,
    ssd_chunked,
    ssd_sequential,
    ssd_step,
    ssd_varlen,
)

__all__ = [
    "PagedLayout",
    "flash_available",
    "mamba_ssm_available",
    "paged_attention",
    "paged_attention_torch",
    "segsum",
    "ssd_chunked",
    "ssd_sequential",
    "ssd_step",
    "ssd_varlen",
    "write_kv",
]
