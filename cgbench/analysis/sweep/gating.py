"""What a sweep's plan says about gating before anything runs: the points whose gating is off and why
(``engine.gating``), and a policy axis whose points are provably the same run.

Without gating the scheduler never asks the policy anything, so points that differ only in their
policy run the very same steps unless a policy acts at forward time (``pad_guard``'s padding guard)
or is a plug-in's own object. A policy axis every one of whose points is such a run is refused
before the sweep starts (``identical_policy_refusal``); one where only some are is warned about,
in the sweep's output and its index (``gating_warnings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cgbench.config.content_memo import ContentMemo
from cgbench.config.overrides import override_key
from cgbench.config.schema import BenchConfig
from cgbench.engine.gating import GatingStatus, all_prefills_flag


class SweepPoint(Protocol):
    """What this module reads of a planned point (``plan.SweepPoint``, which imports this one)."""

    @property
    def overrides(self) -> tuple[str, ...]: ...

    @property
    def cfg(self) -> BenchConfig: ...

SHOWN = 8  # point numbers listed in one line


def _is_policy(key: str) -> bool:
    return key == "policy" or key.startswith("policy.")


def point_gating(points: Sequence[SweepPoint]) -> list[GatingStatus]:
    """Each point's gating status (computed once per distinct policy, grid, engine and model)."""
    from cgbench.pipeline import gating_of

    memo: ContentMemo[GatingStatus] = ContentMemo(len(points))
    return [memo.get((p.cfg.policy, p.cfg.cg, p.cfg.engine, p.cfg.model), lambda c=p.cfg: gating_of(c))
            for p in points]


def _numbers(indices: Sequence[int]) -> str:
    shown = ", ".join(str(i + 1) for i in indices[:SHOWN])
    return shown + (f", ... ({len(indices)} in all)" if len(indices) > SHOWN else "")


def _same_but_policy(points: Sequence[SweepPoint]) -> dict[tuple[str, ...], list[int]]:
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(tuple(o for o in p.overrides if not _is_policy(override_key(o))), []).append(i)
    return groups


def identical_policy_refusal(points: Sequence[SweepPoint], varying: Sequence[str],
                             status: Sequence[GatingStatus]) -> str | None:
    """The refusal when a policy axis varies and every point of it runs the same steps as the other
    policies of its group (gating off, no forward-time guard); None otherwise."""
    axes = [k for k in varying if _is_policy(k)]
    if not axes:
        return None
    groups = [g for g in _same_but_policy(points).values() if len(g) > 1]
    if not groups or not all(all(status[i].policy_blind for i in g) for g in groups):
        return None
    causes = list(dict.fromkeys(c for g in groups for i in g for c in status[i].config_causes))
    why = "; ".join(causes) if causes else "; ".join(dict.fromkeys(status[i].reason for g in groups for i in g))
    values = ",".join(dict.fromkeys(v for k in axes for v in _axis_values(points, k)))
    return (f"{', '.join(axes)}: the {values} points run the same steps as one another: gating is off in every "
            f"point ({why}), and without gating these policies do not differ; switch gating on"
            + (f" ({all_prefills_flag()})" if any("all_prefills" in c for c in causes) else "")
            + " or drop the policy axis (docs/sweeps.md)")


def _axis_values(points: Sequence[SweepPoint], key: str) -> list[str]:
    from cgbench.config.overrides import override_value

    return [override_value(o) for p in points for o in p.overrides if override_key(o) == key]


def gating_warnings(points: Sequence[SweepPoint], varying: Sequence[str],
                    status: Sequence[GatingStatus]) -> list[str]:
    """One line per reason gating is off in some points, and one per group of points that differ only
    in a policy yet run the same steps."""
    out = []
    by_cause: dict[str, list[int]] = {}
    for i, s in enumerate(status):
        for cause in s.config_causes:  # a policy that never gates is the user's choice, not a surprise
            by_cause.setdefault(cause, []).append(i)
    for cause, idx in by_cause.items():
        out.append(f"gating active: no in {len(idx)} of {len(points)} points ({_numbers(idx)}): {cause}")
    if any(_is_policy(k) for k in varying):
        for group in _same_but_policy(points).values():
            blind = [i for i in group if status[i].policy_blind]
            if len(blind) > 1:
                why = "; ".join(status[blind[0]].config_causes) or status[blind[0]].reason
                out.append(f"points {_numbers(blind)} differ only in their policy and run the same steps: gating is "
                           f"off in them ({why})")
    return out
