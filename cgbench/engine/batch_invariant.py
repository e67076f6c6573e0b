"""Megatron main's batch-invariant mode (``engine.batch_invariant``), the scheduling side.

With a hybrid model and chunked prefill (``dynamic_engine.py`` ``schedule_chunked_prefill`` and
``_mamba_batch_invariant_prefill_chunk_length``, #4871 ``57deb435``, unchanged through #6711 ``436bae00``
and ``d98e8a64``), a non-final chunk must start and end on an SSM chunk boundary:

* a chunk that does not finish the prompt is floored to a multiple of ``ssm_chunk_alignment``; when
  that would leave exactly one token, one alignment less; when nothing is left, the request waits
  (the round ends, as on any budget stop);
* the flash-attn one-token guard does not run (the floor already keeps a one-token tail away).

A transformer in batch-invariant mode schedules as without it. The graph side (the 64-token ladder)
is the grid's (``cgbench.grids.megatron``).
"""

from __future__ import annotations

from cgbench.config.schema import EngineConfig


def ssm_alignment(engine: EngineConfig, hybrid: bool) -> int:
    """The SSM chunk alignment the scheduler floors chunks to; 0 when the rule is off (not
    batch-invariant, not a hybrid model, or not chunked prefill)."""
    if engine.batch_invariant and hybrid and engine.chunked_prefill:
        return engine.ssm_chunk_alignment
    return 0


def aligned_chunk(remaining: int, capacity: int, alignment: int) -> int:
    """The prefill chunk of a request with ``remaining`` prompt tokens given room for ``capacity``:
    the whole rest when it fits, else ``capacity`` floored to ``alignment`` (one alignment less when
    that leaves one token); 0 means the request waits."""
    if capacity >= remaining:
        return remaining
    chunk = capacity // alignment * alignment
    if remaining - chunk == 1:
        chunk -= alignment
    return chunk if chunk > 0 else 0
