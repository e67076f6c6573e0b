"""What a run (``--sensitivity``) or a recommendation (``advise``) is compared with: the lines users run.

Each baseline is a plain ``cgbench run`` of the overrides it names, on the same workload, hardware,
backend and seed:

* ``gating_off``: the configuration as given with gating off: ``policy=budget`` on the same grid
  (skipped when the run already runs without gating);
* ``launch_line``: the user's own Megatron launch line (``--megatron-args``) alone, as Megatron runs
  it: its translation with only the user's overrides outside the groups a launch line describes
  (model, engine, cg, policy), and Megatron's scheduler (``policy=megatron``): what they run today;
* ``megatron_default``: Megatron's default line for the same model and engine: graphs on and every
  graph flag at Megatron's default (no ``--inference-cuda-graph-all-prefills``, so no gating) under
  ``policy=megatron``;
* ``no_graphs``: no CUDA graphs at all (``cg=none policy=budget``; Megatron's own
  ``--cuda-graph-impl`` default).

A baseline that composes to the run itself, or to an earlier baseline, is not compared twice: the
notes say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cgbench.config.megatron_args import translate, with_megatron_args
from cgbench.config.megatron_lines import megatron_default_line
from cgbench.config.overrides import override_key
from cgbench.config.schema import BenchConfig

GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT, NO_GRAPHS, DEFAULT_GRID = (
    "gating_off", "launch_line", "megatron_default", "no_graphs", "default_grid")
KINDS = (GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT, NO_GRAPHS, DEFAULT_GRID)
SCENARIO_GROUPS = ("model", "engine", "cg", "policy")  # what a Megatron launch line describes


@dataclass(frozen=True)
class Baseline:
    kind: str  # one of KINDS
    name: str  # short, for a table column
    label: str  # what it is, with the overrides that make it
    overrides: tuple[str, ...]
    cfg: BenchConfig

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.kind, "name": self.name, "label": self.label, "overrides": list(self.overrides)}


def _group(o: str) -> str:
    return override_key(o).partition(".")[0]


def without_groups(overrides: Sequence[str], groups: Sequence[str]) -> list[str]:
    """``overrides`` less every override of these groups (``cg``, ``cg.*``)."""
    return [o for o in overrides if _group(o) not in groups]


def megatron_default_overrides() -> list[str]:
    """Megatron's default graph settings under Megatron's scheduler: ``cg=megatron`` (Megatron's
    generator at its defaults) with what its default line translates to (``cg.all_prefills=false``),
    and ``policy=megatron``."""
    return ["cg=megatron", *translate(megatron_default_line()).overrides, "policy=megatron"]


def baseline_overrides(kind: str, overrides: Sequence[str], launch_line: str | None = None,
                       config_dirs: Sequence[Any] = ()) -> list[str] | None:
    """The overrides of one baseline of the run of ``overrides`` (None: ``launch_line`` without a line)."""
    if kind == GATING_OFF:
        return [*without_groups(overrides, ("policy",)), "policy=budget"]
    if kind == LAUNCH_LINE:
        if launch_line is None:
            return None
        context = [*without_groups(overrides, SCENARIO_GROUPS), "policy=megatron"]
        return with_megatron_args(launch_line, context, config_dirs=list(config_dirs))[0]
    if kind == MEGATRON_DEFAULT:
        return [*without_groups(overrides, ("cg", "policy")), *megatron_default_overrides()]
    if kind == NO_GRAPHS:
        return [*without_groups(overrides, ("cg", "policy")), "cg=none", "policy=budget"]
    raise ValueError(f"baseline {kind!r} is not one of {KINDS}")


_NAMES = {GATING_OFF: "gating off", LAUNCH_LINE: "your launch line", MEGATRON_DEFAULT: "Megatron's default line",
          NO_GRAPHS: "no graphs"}


def _label(kind: str) -> str:
    return {
        GATING_OFF: "the configuration as given with gating off (policy=budget, same grid)",
        LAUNCH_LINE: "your launch line (--megatron-args alone, Megatron's scheduler: policy=megatron)",
        MEGATRON_DEFAULT: f"Megatron's default line ({megatron_default_line()}, no "
                          "--inference-cuda-graph-all-prefills: cg=megatron cg.all_prefills=false policy=megatron)",
        NO_GRAPHS: "no graphs (cg=none policy=budget; Megatron's --cuda-graph-impl default)",
    }[kind]


def baselines(cfg: BenchConfig, overrides: Sequence[str], *, launch_line: str | None = None,
              kinds: Sequence[str] = (GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT, NO_GRAPHS),
              config_dirs: Sequence[Any] = (), subject: str = "this run") -> tuple[list[Baseline], list[str]]:
    """The baselines of the run ``cfg`` (composed from ``overrides``; ``subject`` names it), and a
    note for each one not compared (no line given, the run itself, the same as another)."""
    from cgbench.config.compose import load_config
    from cgbench.pipeline import gating_of

    out: list[Baseline] = []
    notes: list[str] = []
    seen = {_key(cfg): subject}
    for kind in kinds:
        if kind == GATING_OFF:
            g = gating_of(cfg)
            if cfg.policy.name == "budget" or (not g.active and g.policy_blind):
                notes.append(f"{_NAMES[kind]}: {subject} already runs without gating ({g.reason})")
                continue
        ovr = baseline_overrides(kind, overrides, launch_line, config_dirs)
        if ovr is None:
            notes.append(f"{_NAMES[kind]}: no --megatron-args line given")
            continue
        b_cfg = load_config(ovr, config_dirs=list(config_dirs))
        same = seen.get(_key(b_cfg))
        if same is not None:
            notes.append(f"{_NAMES[kind]}: composes to the same config as {same} ({' '.join(ovr)})")
            continue
        seen[_key(b_cfg)] = _NAMES[kind]
        out.append(Baseline(kind, _NAMES[kind], _label(kind), tuple(ovr), b_cfg))
    return out, notes


def default_grid(overrides: Sequence[str], cfg: BenchConfig, name: str) -> Baseline:
    """``advise``'s default: the given config's own grid."""
    return Baseline(DEFAULT_GRID, "the default grid", f"the default grid ({name}): the given config", tuple(overrides),
                    cfg)


def from_json(doc: dict[str, Any], config_dirs: Sequence[Any] = ()) -> Baseline:
    """A baseline a report recorded (``to_json``), composed again."""
    from cgbench.config.compose import load_config

    return Baseline(doc["baseline"], doc["name"], doc["label"], tuple(doc["overrides"]),
                    load_config(list(doc["overrides"]), config_dirs=list(config_dirs)))


def _key(cfg: BenchConfig) -> str:
    import json

    return json.dumps(asdict(cfg), sort_keys=True, default=str)
