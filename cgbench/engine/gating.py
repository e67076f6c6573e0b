"""Whether graph-aware admission gating (PR #4870) is active for a policy, grid and config, and why.

``gating_status`` is the one gating condition (``scheduler.gating_active`` is its yes/no): the
policy gates, ``cg.all_prefills`` (Megatron's ``--inference-cuda-graph-all-prefills``),
``cg.non_decode`` and a non-empty graph list; the cgbench-only gating policies also need a prefill
or mixed graph in the list (``Policy.megatron_conditions``: the policies that reproduce Megatron's
code do not check it). Its ``reason`` names every condition that fails, with the setting (and
Megatron flag) that would change it, so "gating active: no" never stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cgbench.config.megatron_lines import flag_name
from cgbench.config.schema import CGConfig
from cgbench.engine.policies import Policy
from cgbench.grids.lookup import Grid


@dataclass(frozen=True)
class GatingStatus:
    """Gating on or off for one run, and why."""

    active: bool
    reason: str  # one line: what gates, or every failing condition ("; ")
    # the failing conditions of the grid and its settings (not the policy's own choice not to gate)
    config_causes: tuple[str, ...] = ()
    # the points of a policy sweep that differ only in policy run the same steps: gating is off and
    # no policy guards a graph at forward time (``pad_guard``) or answers as a plug-in does
    policy_blind: bool = False

    @property
    def text(self) -> str:
        """``yes — <why>`` or ``no — <why>``, as every table shows it."""
        return f"{'yes' if self.active else 'no'} — {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"active": self.active, "reason": self.reason}


def all_prefills_flag() -> str:
    """``--inference-cuda-graph-all-prefills / cg.all_prefills=true``: how to switch Megatron's gate on."""
    return f"{flag_name('cg.all_prefills=true')} / cg.all_prefills=true"


def gating_status(policy: Policy, cg: CGConfig, grid: Grid, *, non_decode_off_by: str = "") -> GatingStatus:
    """The gating condition and its reason (docs/design.md §6.1). ``non_decode_off_by``: what turned
    ``cg.non_decode`` off when the config did not (expert parallelism's dispatcher, ``engine.ep``)."""
    policy_off = [] if policy.gates else [
        f"policy={policy.name} does not gate admission (a gating policy: e.g. policy=megatron)"]
    off: list[str] = []
    if len(grid.graphs) == 0:
        off.append("the grid captures no graphs (cg=none, or cg.num_cuda_graphs=null)")
    else:
        if not cg.all_prefills:
            off.append(f"needs {all_prefills_flag()}")
        if not cg.non_decode:
            off.append(non_decode_off_by or f"cg.non_decode=false ({flag_name('cg.non_decode=false')}): no prefill "
                       "or mixed graphs to gate on")
    if not off and not policy_off and not grid.non_decode and not policy.megatron_conditions:
        off.append(f"the graph list has no prefill or mixed graph, and policy={policy.name} gates only when it "
                   "has one (docs/design.md §6.1)")
    if off or policy_off:
        blind = policy.plugin is None and policy.pad_ratio <= 0
        return GatingStatus(False, "; ".join(policy_off + off), tuple(off), policy_blind=blind)
    n_mixed = sum(1 for g in grid.graphs if g.prefill_req_count > 0)
    return GatingStatus(True, f"policy={policy.name} defers a prefill no graph covers ({all_prefills_flag()}; "
                              f"{n_mixed} of {len(grid.graphs)} graphs take prefills)")
