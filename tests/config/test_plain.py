"""``config_dict`` is ``dataclasses.asdict`` for every config: the same containers, equal, and copies
(a change to the result leaves the config as it was); an unusual value takes ``asdict`` itself."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from dataclasses import asdict

import pytest

from cgbench.config.compose import load_config
from cgbench.config.plain import config_dict

CONFIGS = [
    [],
    ["model=hybrid", "cg=dense", "policy=wait_timeout", "policy.wait_timeout.iters=7"],
    ["cg=explicit", "cg.graphs=[[8,1,0],[16,2,1]]", "workload=chat", "workload.num_requests=16"],
    ["workload=trace", "engine.chunked_prefill=true", "hardware=h100"],
    ["cg.distribution=hybrid", "engine.megatron_rules=main"],
]


def _same_structure(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)  # the same key order: the JSON written is the same
        for k in a:
            _same_structure(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_structure(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("overrides", CONFIGS)
def test_config_dict_is_asdict(overrides):
    cfg = load_config(overrides)
    fast = config_dict(cfg)
    _same_structure(fast, asdict(cfg))
    for section in ("policy", "cg", "engine", "model", "workload"):
        _same_structure(config_dict(getattr(cfg, section)), asdict(getattr(cfg, section)))


def test_the_result_is_a_copy():
    cfg = load_config(["cg=explicit", "cg.graphs=[[8,1,0],[16,2,1]]"])
    out = config_dict(cfg)
    out["cg"]["graphs"][0][0] = 999
    out["workload"]["arrival"]["process"] = "changed"
    assert cfg.cg.graphs[0][0] == 8 and cfg.workload.arrival.process != "changed"


Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class _Inner:
    x: int = 1


@dataclasses.dataclass
class _Odd:
    pair: Pair = Pair(_Inner(), 2)  # noqa: RUF009 - a namedtuple of a record: asdict keeps the namedtuple
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    mapping: dict = dataclasses.field(default_factory=lambda: {"k": (_Inner(), [1.5])})


def test_an_unusual_value_takes_asdict():
    odd = _Odd()
    assert config_dict(odd) == asdict(odd)
    assert type(config_dict(odd)["pair"]) is Pair
    assert config_dict(odd)["mapping"] == {"k": ({"x": 1}, [1.5])}
