"""A policy is one record (``PolicySpec`` in ``cgbench.config.registry.policies``): the schema's
option sections, the engine's ``Policy``, the shipped YAML files and the README's tables all name
the registry's policies, and a new built-in policy needs nothing but its record (and its YAML)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import pytest
import yaml

from cgbench.config import schema
from cgbench.config.registry import policies as registry
from cgbench.config.registry.policies import BUILTIN_POLICIES, PolicySpec, builtin_sections
from cgbench.engine.policies import Policy
from cgbench.engine.policy_registry import build_policy, make_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY_YAMLS = {p.stem: p for p in (ROOT / "conf" / "policy").glob("*.yaml")}


def test_the_shipped_policy_files_are_the_registrys_policies():
    assert sorted(POLICY_YAMLS) == sorted(BUILTIN_POLICIES)
    for name, path in POLICY_YAMLS.items():
        doc = yaml.safe_load(path.read_text())
        spec = BUILTIN_POLICIES[name]
        assert doc.pop("name") == name
        # a policy's file holds its own options section, at the record's defaults, and nothing else
        expected = {name: asdict(spec.default_options())} if spec.options is not None else {}
        assert doc == expected, name


def test_the_readme_names_the_registrys_policies():
    readme = (ROOT / "README.md").read_text()
    group_row = next(line for line in readme.splitlines() if line.startswith("| `policy` |"))
    assert re.findall(r"`(\w+)`", group_row.split("|")[2]) == list(BUILTIN_POLICIES)
    table = re.findall(r"^\| `(\w+)` \| ", readme.split("| policy | on a shape miss |", 1)[1].split("\n\n", 1)[0],
                       flags=re.M)
    assert table == list(BUILTIN_POLICIES)


def test_the_schema_sections_are_derived_from_the_records():
    assert [f.name for f in fields(schema.PolicyConfig)] == ["name", *builtin_sections()]
    for section in builtin_sections():
        assert isinstance(getattr(schema.PolicyConfig(), section), BUILTIN_POLICIES[section].options)
    assert schema.PolicyConfig().name == "megatron" and schema.PolicyConfig.__module__ == "cgbench.config.schema"


# The built-ins as the engine built them by hand before the records carried their traits: the
# records must build the very same policies.
_BEFORE = {
    "budget": Policy("budget", gates=False),
    "megatron": Policy("megatron", gates=True, megatron_conditions=True),
    "defer": Policy("defer", gates=True, gates_chunks=True),
    "pad_guard": Policy("pad_guard", gates=False, pad_ratio=2.0),
    "wait_timeout": Policy("wait_timeout", gates=True, gates_chunks=True, timeout_iters=50),
    "megatron_6675": Policy("megatron_6675", gates=True, gates_chunks=True, snaps_continuing=True,
                            megatron_conditions=True),
    "cover": Policy("cover", gates=True, gates_chunks=True, admits_covered=True),
}


def test_each_record_builds_the_policy_it_built_before():
    assert set(_BEFORE) <= set(BUILTIN_POLICIES)  # a policy added later has no "before"
    for name, before in _BEFORE.items():
        assert make_policy(schema.PolicyConfig(name=name)) == before, name
    options = BUILTIN_POLICIES["pad_guard"].options(max_ratio=3.5)
    assert build_policy("pad_guard", options).pad_ratio == 3.5


def test_the_records_set_only_policy_fields():
    policy_fields = {f for f in Policy.__dataclass_fields__} - {"name", "plugin"}
    for spec in BUILTIN_POLICIES.values():
        assert set(spec.traits) | set(spec.from_options) <= policy_fields, spec.name
        if spec.from_options:
            assert set(spec.from_options.values()) <= {f.name for f in fields(spec.options)}, spec.name


@dataclass
class _EagerAfterConfig:
    iters: int = 7


def test_a_new_builtin_policy_is_one_record(monkeypatch: pytest.MonkeyPatch):
    record = PolicySpec("eager_after", _EagerAfterConfig, summary="defer, then eager after iters rounds",
                        traits={"gates": True}, from_options={"timeout_iters": "iters"})
    monkeypatch.setitem(registry.BUILTIN_POLICIES, record.name, record)
    assert "eager_after" in registry.policy_names(plugins=False) and "eager_after" in builtin_sections()
    derived = schema._policy_config()  # what the schema module derives when it is imported
    assert isinstance(derived().eager_after, _EagerAfterConfig)
    cfg = derived(name="eager_after")
    assert make_policy(cfg) == Policy("eager_after", gates=True, timeout_iters=7)
