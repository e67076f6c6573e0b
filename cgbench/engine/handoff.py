"""Megatron main's hybrid SSM state handoff pinning (#6584 ``731b7914``), as far as admission sees it.

On a disaggregated prefill engine (``inference_state_handoff.py``: ``enable_handoff_pinning`` is set for
the ``prefill`` role) a finished request that hands its state to a decode engine keeps its live Mamba
state slot after its request row is gone, until the decode side has pulled it
(``release_handoff_blocks``). ``DynamicInferenceContext.check_availability`` at ``731b7914`` /
``d98e8a64`` therefore also needs a free Mamba slot for a hybrid model:
``mamba_state_free_slot_count > 0``. There are ``max_requests`` slots; a running, paused or admitted
request holds one, and so does every pinned handoff.

cgbench has no decode engine: ``engine.handoff_pinning`` makes every finished request hand off, and
``engine.handoff_release_steps`` is how many scheduling rounds its slot stays pinned after the step it
finished in (a request finishing in step ``s`` frees its slot for the round of step
``s + 1 + handoff_release_steps``). An engine with nothing to run does not step, so it waits for the
pulls instead: its pinned slots are all released before it idles. The KV blocks a handoff also pins
are not modelled: they go back to the pool when the request finishes, as without pinning.
"""

from __future__ import annotations

from collections import deque


class HandoffPins:
    """The pinned handoff slots, as the steps at which each is released (in finishing order, so
    non-decreasing)."""

    __slots__ = ("release_steps", "delay")

    def __init__(self, delay: int) -> None:
        self.release_steps: deque[int] = deque()
        self.delay = delay

    def pin(self, finish_step: int) -> None:
        """A request finished in ``finish_step``: its slot stays pinned for the next ``delay`` rounds."""
        self.release_steps.append(finish_step + 1 + self.delay)

    def release_all(self) -> bool:
        """The engine idles until every pull has completed: release every pinned slot. True if any was."""
        if not self.release_steps:
            return False
        self.release_steps.clear()
        return True

    def pinned_at(self, step: int) -> int:
        """Slots still pinned for the round of ``step`` (those released by then are dropped)."""
        pins = self.release_steps
        while pins and pins[0] <= step:
            pins.popleft()
        return len(pins)

    def next_release_after(self, step: int) -> int | None:
        """The first step after ``step`` at which a pinned slot is released (None if none)."""
        for r in self.release_steps:
            if r > step:
                return r
        return None
