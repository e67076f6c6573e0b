"""The errors an engine raises when one of its own invariants breaks (bugs, never bad input).

Kept apart from the engine modules: they may be compiled (mypyc), and a compiled module cannot
define a subclass of a built-in exception."""

from __future__ import annotations


class InvariantError(AssertionError):
    """An internal engine invariant broke; the message names the step and request."""


class LedgerError(InvariantError):
    """A request was retired twice or before its end, or changed after it was retired."""


class MegatronAssertion(AssertionError):
    """Megatron's own code raises at this point (an assertion or an error of its block allocators,
    reproduced): the run stops with outcome ``engine_assertion``, as Megatron's engine does."""
