"""What a shell completes an override to (``cgbench.cli.options.complete_override``): a group's
options, a record's keys, the groups and top-level keys; computed from the config trees and the
schema (``compose.known_keys``), so a new option file or key is completed without any list to keep."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cgbench.config.labels import EXPERIMENT
from cgbench.config.paths import GROUPS, group_options


def override_completions(incomplete: str, config_dirs: Sequence[str | Path] = ()) -> list[str]:
    """The overrides ``incomplete`` can become: ``model=hy`` -> ``model=hybrid``; ``engine.max_`` ->
    ``engine.max_requests=`` ...; ``mo`` -> ``model=``; ``+experiment=`` -> the user folders' experiments."""
    plus = "+" if incomplete.startswith("+") else ""
    text = incomplete[len(plus):]
    key, eq, partial = text.partition("=")
    if eq:
        if key in GROUPS or key == EXPERIMENT:
            return [f"{plus}{key}={o}" for o in group_options(key, config_dirs) if o.startswith(partial)]
        return []
    from cgbench.config.compose import known_keys

    keys, _ = known_keys()
    records = {k.rsplit(".", 1)[0] for k in keys if "." in k}  # keys that hold keys (engine, model, ...)
    head, dot, _ = text.rpartition(".")
    out: set[str] = set()
    for k in keys:
        if not k.startswith(text) or (dot and not k.startswith(head + ".")):
            continue
        rest = k[len(head) + 1:] if dot else k
        name = f"{head}.{rest.split('.', 1)[0]}" if dot else rest.split(".", 1)[0]
        out.add(f"{name}." if name in records else f"{name}=")
    if not dot:
        out.update(f"{g}=" for g in GROUPS if g.startswith(text))
        if EXPERIMENT.startswith(text) and group_options(EXPERIMENT, config_dirs):
            out.add(f"+{EXPERIMENT}=")
    return sorted(f"{plus}{c}" for c in out)
