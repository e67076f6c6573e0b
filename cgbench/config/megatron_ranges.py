"""The ranges Megatron-LM accepts for the ``--megatron-args`` values cgbench does arithmetic on, checked
before any of it (``megatron_args.translate``): one table, each refusal one line naming the flag.

The ranges are Megatron's own (megatron-core 0.19.2 and its main branch): argparse ``type=int``
sizes and counts that only make sense >= 1 (a layer, a head, a TP rank; a divisor); the asserts of
``megatron/training/arguments.py`` (``inference_dynamic_batching_num_cuda_graphs > 0 or == -1``;
``hidden_size % num_attention_heads == 0`` when ``--kv-channels`` is absent) and of
``megatron/core/inference/contexts/dynamic_context.py`` (``0 < mamba_memory_ratio < 1``; the
buffer's ``int(buffer_size_gb * 1024**3)`` bytes, which a CUDA allocation takes as a 64-bit size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cgbench.errors import ConfigError

GIB = 1024**3
INT64_MAX = 2**63 - 1
MAX_BUFFER_GB = INT64_MAX // GIB  # the largest whole GiB whose bytes fit a 64-bit size


@dataclass(frozen=True)
class Range:
    """``flag``'s value: an integer (or a number, ``integer=False``) within ``low`` .. ``high``
    (``open``: strictly inside), or one of ``also`` (Megatron's special values)."""

    flag: str
    low: float = 1
    high: float = INT64_MAX
    integer: bool = True
    open: bool = False
    also: tuple[int, ...] = ()
    why: str = ""


def _sizes(*flags: str) -> tuple[Range, ...]:
    return tuple(Range(f) for f in flags)


RANGES: dict[str, Range] = {r.flag: r for r in (
    *_sizes("--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
            "--kv-channels", "--mamba-state-dim", "--mamba-head-dim", "--mamba-num-groups", "--mamba-num-heads",
            "--padded-vocab-size", "--vocab-size", "--make-vocab-size-divisible-by",
            "--tensor-model-parallel-size", "--expert-model-parallel-size", "--num-experts", "--moe-router-topk",
            "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
            "--inference-dynamic-batching-block-size", "--inference-dynamic-batching-max-requests",
            "--inference-dynamic-batching-max-tokens", "--inference-max-seq-length", "--max-position-embeddings",
            "--inference-cuda-graph-max-tokens"),
    Range("--num-speculative-tokens", low=0),
    Range("--inference-dynamic-batching-cuda-graph-mixed-prefill-count", low=0),
    Range("--inference-dynamic-batching-num-cuda-graphs", also=(-1,), why="a positive integer or -1 (Megatron)"),
    Range("--inference-dynamic-batching-buffer-size-gb", low=0, high=MAX_BUFFER_GB, integer=False,
          why=f"GiB whose bytes fit a 64-bit size: 0 to {MAX_BUFFER_GB:,}"),
    Range("--inference-dynamic-batching-paused-buffer-size-gb", low=0, high=MAX_BUFFER_GB, integer=False,
          why=f"GiB whose bytes fit a 64-bit size: 0 to {MAX_BUFFER_GB:,}"),
    Range("--inference-dynamic-batching-mamba-memory-ratio", low=0, high=1, integer=False, open=True,
          why="strictly between 0 and 1, as Megatron asserts"),
)}


def _number(r: Range, text: str) -> float:
    try:
        return int(text) if r.integer else float(text)
    except ValueError:
        kind = "an integer" if r.integer else "a number"
        raise ConfigError(f"--megatron-args: {r.flag} takes {kind}, got {text!r}") from None


def _inside(r: Range, v: float) -> bool:
    if not math.isfinite(v):
        return False
    return (r.low < v < r.high) if r.open else (r.low <= v <= r.high)


def _wanted(r: Range) -> str:
    if r.why:
        return r.why
    return f"an integer >= {r.low:g}" if r.high == INT64_MAX else f"an integer from {r.low:g} to {r.high:,}"


def check_values(given: dict[str, list[str]]) -> None:
    """Refuse the first value of ``given`` (flag -> its words) outside Megatron's range, naming the flag;
    then the relations Megatron asserts between them. A flag given other than once is left to the
    translation's own message (``takes one value``)."""
    values: dict[str, float] = {}
    for flag, words in given.items():
        r = RANGES.get(flag)
        if r is None or len(words) != 1:
            continue
        v = _number(r, words[0])
        if not (_inside(r, v) or v in r.also):
            raise ConfigError(f"--megatron-args: {flag} must be {_wanted(r)}, got {words[0]!r}")
        values[flag] = v
    hidden, heads = values.get("--hidden-size"), values.get("--num-attention-heads")
    if hidden and heads and "--kv-channels" not in given and hidden % heads:
        raise ConfigError(f"--megatron-args: --hidden-size {hidden:g} is not a multiple of --num-attention-heads "
                          f"{heads:g} (Megatron asserts it when --kv-channels is absent)")
