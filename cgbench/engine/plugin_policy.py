"""A plug-in's own policy object behind the plug-in boundary: the engine asks it every round, so
each answer goes through ``plugin_source.foreign`` (whatever it raises but Ctrl-C is the plug-in's
one line) and is checked against the contract (``DEFER`` / ``EAGER``; a bool for the guard)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cgbench.config.registry.plugin_source import PluginError, foreign, shown
from cgbench.engine.policies import DEFER, EAGER

_ANSWERS = (DEFER, EAGER)


@dataclass(frozen=True)
class GuardedPolicy:
    """``AdmissionPolicy`` over the plug-in's object ``inner``; ``where`` names the plug-in."""

    inner: Any
    where: str
    name: str
    gates: bool
    gates_chunks: bool

    @staticmethod
    def over(inner: Any, where: str) -> GuardedPolicy:
        def read(attr: str) -> Any:
            return foreign(where, f"its policy's {attr} failed", getattr, inner, attr)

        flags = [read("gates"), read("gates_chunks")]
        if not all(isinstance(f, bool) for f in flags):
            raise PluginError(f"{where}: its policy's gates and gates_chunks must be bools, not "
                              f"{shown(flags[0])}, {shown(flags[1])}")
        name = read("name")
        return GuardedPolicy(inner, where, name if isinstance(name, str) else shown(name), *flags)

    def _answer(self, method: str, *args: Any) -> str:
        answer = foreign(self.where, f"{method} failed", getattr(self.inner, method), *args)
        if not isinstance(answer, str) or answer not in _ANSWERS:
            raise PluginError(f"{self.where}: {method} returned {shown(answer)}, not {DEFER!r} or {EAGER!r}")
        return answer

    def on_non_chunked_miss(self, cg_wait_iters: int) -> str:
        return self._answer("on_non_chunked_miss", cg_wait_iters)

    def on_chunk_miss(self, cg_wait_iters: int, engine_idle: bool) -> str:
        return self._answer("on_chunk_miss", cg_wait_iters, engine_idle)

    def forward_guard(self, real_tokens: int, prefills: int, graph_tokens: int) -> bool:
        answer = foreign(self.where, "forward_guard failed", self.inner.forward_guard, real_tokens, prefills,
                         graph_tokens)
        if not isinstance(answer, bool):
            raise PluginError(f"{self.where}: forward_guard returned {shown(answer)}, not a bool")
        return answer
