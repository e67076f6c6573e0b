"""What the torch backend would run on, asked without building anything (imports torch on call)."""

from __future__ import annotations


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
