"""What the torch backend would run on, asked without building anything (imports torch on call)."""

from __future__ import annotations


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def device_kind(setting: str) -> str:
    """The device ``backend.device`` runs on: cpu or cuda (``auto``: cuda when torch sees a GPU)."""
    if setting == "auto":
        return "cuda" if cuda_available() else "cpu"
    return setting.split(":")[0]
