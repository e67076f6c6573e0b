"""A range declared beside its field (``cgbench.config.rules.bounds``): every bounded field of every
section is checked, first, with one line naming its key; a new bounded setting is its field alone."""

from __future__ import annotations

import dataclasses

import pytest

from cgbench.config.rules.bounds import at_least, check_bounds, within
from cgbench.config.schema import BenchConfig, ConfigError, EngineConfig, validate


@pytest.mark.parametrize(("key", "value", "message"), [
    ("ssm_chunk_alignment", 0, "engine.ssm_chunk_alignment: must be >= 1, got 0"),
    ("handoff_release_steps", -1, "engine.handoff_release_steps: must be >= 0, got -1"),
])
def test_a_bounded_engine_field_out_of_range_is_one_line(key, value, message):
    cfg = BenchConfig(engine=EngineConfig(**{key: value}))
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert str(e.value) == message


def test_the_edges_are_allowed():
    validate(BenchConfig(engine=EngineConfig(ssm_chunk_alignment=1, handoff_release_steps=0)))


@dataclasses.dataclass
class _Inner:
    fraction: float = dataclasses.field(default=0.5, metadata=within(0.0, 1.0, "(a share)"))


@dataclasses.dataclass
class _Section:
    new_flag: int = dataclasses.field(default=4, metadata=at_least(1, "(1 = off)"))
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    free: int = -5  # no bound: not checked


@dataclasses.dataclass
class _Config:
    section: _Section = dataclasses.field(default_factory=_Section)


def test_a_new_bounded_setting_is_its_field_alone():
    check_bounds(_Config())
    with pytest.raises(ConfigError, match=r"^section\.new_flag: must be >= 1 \(1 = off\), got 0$"):
        check_bounds(_Config(_Section(new_flag=0)))
    with pytest.raises(ConfigError, match=r"^section\.inner\.fraction: must be in \[0.0, 1.0\] \(a share\), got 1.5$"):
        check_bounds(_Config(_Section(inner=_Inner(fraction=1.5))))
