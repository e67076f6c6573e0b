"""Prefix-block ids for generated workloads (``workload.prefix``), and where a run's ids come from.

A trace brings its own ids (Mooncake's ``hash_ids``, ``block_tokens`` each). A generated workload
gets them from this model, in source blocks of ``SOURCE_TOKENS`` tokens (fine enough to map onto any
engine block size: ``cgbench.workload.prefix_hashes``):

* **Shared system prompts.** With ``system_prompts = K > 0`` every session starts with one of ``K``
  system prompts of ``system_prompt_tokens = S`` tokens, drawn uniformly (seeded: the ``prefix``
  random stream). The source blocks that lie wholly inside the first ``S`` tokens carry the system
  prompt's ids, the same for every session that drew it.
* **Multi-turn sessions.** Requests ``i`` with the same ``i // session_turns`` form a session: its
  turns are consecutive requests. Every turn's prompt is the session's history (the previous turn's
  prompt and its output) followed by the new turn's drawn prompt tokens, so turn ``t`` repeats
  turn ``t - 1``'s whole prompt and output as its prefix. A session's tokens past the system prompt
  carry ids of its own; the block that straddles the system prompt's end is the session's.

So a request's prompt is ``S + history + drawn`` tokens (``S`` 0 without system prompts); the output
length is drawn as usual. The model changes prompt lengths only when ``workload.prefix`` is set.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator
from dataclasses import replace

from cgbench.config.schema import PrefixModelConfig, WorkloadConfig
from cgbench.workload.arrivals import RequestSpec
from cgbench.workload.prefix_hashes import mix
from cgbench.workload.trace import TraceOptions, trace_block_tokens

SOURCE_TOKENS = 16  # tokens per source block of a generated workload's ids
_SYSTEM, _SESSION = 1, 2


def with_prefix_blocks(specs: Iterator[RequestSpec], p: PrefixModelConfig,
                       rng: random.Random) -> Iterator[RequestSpec]:
    """``specs`` with their prompts grown and ids set by the model (see the module docstring); ``rng``
    draws each session's system prompt (the run's ``prefix`` random stream)."""
    system = 0
    history = 0
    for s in specs:
        session, turn = divmod(s.id, p.session_turns)
        if turn == 0:
            system = rng.randrange(p.system_prompts) if p.system_prompts else 0
            history = 0
        shared = p.system_prompt_tokens if p.system_prompts else 0
        prompt = shared + history + s.prompt_tokens
        yield replace(s, prompt_tokens=prompt, prefix_blocks=_ids(prompt, shared, system, session))
        history = prompt - shared + s.output_tokens


def _ids(prompt: int, shared: int, system: int, session: int) -> array[int]:
    sys_root, sess_root = mix(_SYSTEM, system), mix(_SESSION, session)
    n = -(-prompt // SOURCE_TOKENS)
    whole = shared // SOURCE_TOKENS  # source blocks wholly inside the system prompt
    return array("q", [mix(sys_root, j) if j < whole else mix(sess_root, j) for j in range(n)])


def prefix_source_tokens(w: WorkloadConfig) -> int:
    """Tokens per source block of the run's prefix ids: the trace's (0: it has none), else the model's."""
    if w.trace:
        return trace_block_tokens(w.trace, TraceOptions.of(w))
    return SOURCE_TOKENS
