"""The error an engine raises when one of its own invariants breaks (a bug, never bad input).

Kept apart from the engine modules: they may be compiled (mypyc), and a compiled module cannot
define a subclass of a built-in exception."""

from __future__ import annotations


class InvariantError(AssertionError):
    """An internal engine invariant broke; the message names the step and request."""
