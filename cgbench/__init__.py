"""cgbench: measure CUDA-graph-aware admission gating in an LLM engine's prefill scheduler."""

from cgbench.native import install_guard

__version__ = "0.1.0"

install_guard()  # before any compiled module can be imported: a stale build must never run
