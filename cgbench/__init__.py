"""cgbench: measure CUDA-graph-aware admission gating in an LLM engine's prefill scheduler."""

__version__ = "0.1.0"
