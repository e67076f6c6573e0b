"""Small real models (seeded random weights) for the ``torch`` backend. Imports torch."""

from cgbench.backends.torch.models.lm import DEFAULT_SSD_CHUNK, CausalLM, build_model, check_model
from cgbench.backends.torch.models.step import ModelCache, StepInputs

__all__ = ["DEFAULT_SSD_CHUNK", "CausalLM", "ModelCache", "StepInputs", "build_model", "check_model"]
