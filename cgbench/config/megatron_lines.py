"""Megatron launch lines that cgbench prints: the translator's table (``megatron_args.RULES``) read
backwards, config setting -> flag.

Every Megatron flag a printer writes (``advise``'s recommendation, the gating reasons, the reports)
comes from ``flag_for``: the one rule that ``sets`` a setting. ``graph_launch_args`` gives the graph
flags of a CUDA-graph config; ``launch_advice`` says which flags to add to, and remove from, the
user's own line (``--megatron-args``) or any line, and checks its answer by translating the result
again: the line it prints composes to the settings it was asked for, or it raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cgbench.config.megatron_args import RULES, Rule, launch_tokens, parse_flags, rule_of, translate
from cgbench.config.overrides import override_key, override_value


@dataclass(frozen=True)
class LaunchArg:
    """One flag of a launch line and its value (None: a switch)."""

    flag: str
    value: str | None = None

    def __str__(self) -> str:
        return self.flag if self.value is None else f"{self.flag} {self.value}"


def flag_for(setting: str) -> Rule:
    """The rule whose flag writes ``setting`` (a key, or ``key=value`` for a switch): exactly one."""
    hits = [r for r in RULES if r.sets == setting and not r.alias_of]
    if len(hits) != 1:
        raise KeyError(f"no single Megatron flag sets {setting!r} (megatron_args.RULES)")
    return hits[0]


def flag_name(setting: str) -> str:
    """The Megatron flag that writes ``setting`` (``cg.all_prefills=true``: ``--inference-cuda-graph-all-prefills``)."""
    return flag_for(setting).flag


def launch_arg(setting: str, value: Any = None) -> LaunchArg:
    """The flag and value that write ``setting``: ``key`` with ``value``, or ``key=value`` (a switch,
    or a flag whose value is fixed)."""
    rule = flag_for(setting)
    if "=" in setting:
        return LaunchArg(rule.flag, rule.value or None)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return LaunchArg(rule.flag, text)


def graph_launch_args(cg: Any) -> list[LaunchArg] | None:
    """Megatron's graph flags that compose to ``cg`` (a ``CGConfig``): graphs on (``--cuda-graph-impl
    local``), their count and sizing, and either decode-only graphs or the mixed count with
    all-prefills or the token cap. None when Megatron's flags cannot express ``cg`` (another grid
    kind, more than one size per octave, no graphs)."""
    if cg.kind != "megatron" or cg.sizes_per_octave != 1 or cg.p_per_octave != 1 or cg.num_cuda_graphs is None:
        return None
    args = [launch_arg("cg.kind=megatron"), launch_arg("cg.num_cuda_graphs", cg.num_cuda_graphs),
            launch_arg("cg.distribution", cg.distribution)]
    if not cg.non_decode:
        return args + [launch_arg("cg.non_decode=false")]
    args.append(launch_arg("cg.mixed_prefill_count", cg.mixed_prefill_count))
    if cg.all_prefills:
        args.append(launch_arg("cg.all_prefills=true"))
    else:
        args.append(launch_arg("cg.cuda_graph_max_tokens", cg.cuda_graph_max_tokens))
    return args


def megatron_default_line() -> str:
    """Megatron's graph flags at its defaults (0.19.2): graphs on and nothing else, so no
    ``--inference-cuda-graph-all-prefills`` (16 graphs, exponential sizes, mixed graphs on, the
    512-token cap; no admission gating)."""
    return str(launch_arg("cg.kind=megatron"))


def command_text(args: list[LaunchArg]) -> str:
    return " ".join(str(a) for a in args)


def as_mapping(args: list[LaunchArg]) -> dict[str, int | str | bool]:
    """``{flag: value}`` (a switch maps to True; integers as integers), the JSON form of the reports."""
    out: dict[str, int | str | bool] = {}
    for a in args:
        out[a.flag] = True if a.value is None else (int(a.value) if a.value.lstrip("-").isdigit() else a.value)
    return out


def _graph_family(rule: Rule) -> bool:
    """A flag that decides the CUDA graphs: it sets a ``cg`` key, or is an older spelling of one that does."""
    target = rule_of(rule.alias_of) if rule.alias_of else rule
    return target.sets.startswith("cg.")


GRAPH_FLAGS: tuple[str, ...] = tuple(r.flag for r in RULES if _graph_family(r))


def cg_settings(line: str) -> dict[str, str]:
    """The ``cg`` keys a launch line translates to (key -> value text)."""
    return {override_key(o): override_value(o) for o in translate(line).overrides
            if override_key(o).startswith("cg.")}


@dataclass
class LaunchAdvice:
    """What to change on a launch line to run a recommended grid: the full graph flags, the flags to
    add and the flags to remove, against the user's own line or against any line (``against``)."""

    args: list[LaunchArg]
    add: list[LaunchArg] = field(default_factory=list)
    remove: list[LaunchArg] = field(default_factory=list)
    against: str = ""  # "your --megatron-args line", or "any line" (remove: if present)

    @property
    def command(self) -> str:
        return command_text(self.args)

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "args": as_mapping(self.args), "add": [str(a) for a in self.add],
                "remove": [str(a) for a in self.remove], "against": self.against}

    def text(self) -> str:
        """``on <line>: add ...; remove ...`` in words (``remove if present`` without the user's line)."""
        return change_text(self.to_json())

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LaunchAdvice:
        def args(words: list[str]) -> list[LaunchArg]:
            return [LaunchArg(*w.split(" ", 1)) for w in words]

        return cls(args([f"{k}" if v is True else f"{k} {v}" for k, v in doc["args"].items()]), args(doc["add"]),
                   args(doc["remove"]), doc["against"])


def change_text(doc: dict[str, Any]) -> str:
    """A report's ``megatron_line`` in words: ``on your --megatron-args line: add ...; remove ...``."""
    parts = []
    if doc["add"]:
        parts.append("add " + " ".join(doc["add"]))
    if doc["remove"]:
        parts.append(("remove " if doc["against"] == YOUR_LINE else "remove if present ") + " ".join(doc["remove"]))
    return f"on {doc['against']}: " + ("; ".join(parts) or "nothing to change")


YOUR_LINE, ANY_LINE = "your --megatron-args line", "any launch line"


def applied(line: str, advice: LaunchAdvice) -> str:
    """``line`` with the advice's removals taken out and its additions appended (shell words)."""
    import shlex

    launcher, words = launch_tokens(line)
    gone = {a.flag for a in advice.remove}
    kept = [(f, v) for f, v in parse_flags(words) if f not in gone]
    out = [*launcher]
    for f, values in kept:
        out += [f, *values]
    for a in advice.add:
        out += [a.flag] + ([a.value] if a.value is not None else [])
    return " ".join(shlex.quote(w) for w in out)


def launch_advice(args: list[LaunchArg], user_line: str | None = None) -> LaunchAdvice:
    """The flags to add to and remove from ``user_line`` (or, without one, from any line: remove
    the graph flags the recommendation leaves out, if present) so that the line composes to the
    graph settings ``args`` compose to. Checked: the changed line is translated again and must
    give exactly those settings."""
    wanted = {a.flag: a for a in args}
    if user_line is None:
        remove = [LaunchArg(f) for f in GRAPH_FLAGS if f not in wanted]
        advice = LaunchAdvice(list(args), list(args), remove, ANY_LINE)
    else:
        given: dict[str, list[str]] = {}
        for f, values in parse_flags(launch_tokens(user_line)[1]):
            given[f] = values
        add, remove = [], []
        for a in args:
            have = given.get(a.flag)
            if have == ([] if a.value is None else [a.value]):
                continue
            aliases = [f for f in given if rule_of(f).alias_of == a.flag]
            if have is None and aliases and cg_settings(" ".join(aliases)) == cg_settings(str(a)):
                continue  # an older spelling of the same flag (--enable-cuda-graph)
            if have is not None:
                remove.append(LaunchArg(a.flag, " ".join(have) or None))
            add.append(a)
        for f, values in given.items():
            if f in GRAPH_FLAGS and f not in wanted and not (
                    rule_of(f).alias_of in wanted and not any(x.flag == rule_of(f).alias_of for x in add)):
                remove.append(LaunchArg(f, " ".join(values) or None))
        advice = LaunchAdvice(list(args), add, remove, YOUR_LINE)
    _check(advice, args, user_line)
    return advice


def _check(advice: LaunchAdvice, args: list[LaunchArg], user_line: str | None) -> None:
    """The printed change must compose to what was asked (a wrong flag can never be printed)."""
    want = cg_settings(command_text(args))
    base = user_line if user_line is not None else command_text(advice.remove)
    got = cg_settings(applied(base, advice))
    if got != want:
        raise AssertionError(f"launch advice {advice.text()!r} on {base!r} composes to {got}, not {want}")
