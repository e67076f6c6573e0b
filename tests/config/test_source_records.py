"""A workload source and a step pricer are one record each (``WorkloadSource`` in
``cgbench.config.registry.workloads``, ``PricerSpec`` in ``cgbench.config.registry.pricers``): the
fields each reads are the schema's fields, each names a builder its family's builders half resolves,
and a new built-in needs nothing but its record (validation, the unread keys and the build follow)."""

from __future__ import annotations

import random
import typing
from dataclasses import dataclass, fields

import pytest

from cgbench.backends.sim.factory import make_cost_model, make_roofline
from cgbench.config.compose import load_config
from cgbench.config.registry import pricers, workloads
from cgbench.config.registry.pricers import COST_MODELS, PricerSpec
from cgbench.config.registry.records import builder
from cgbench.config.registry.workloads import ARRIVAL_PROCESSES, LENGTH_DISTRIBUTIONS, Rate, WorkloadSource
from cgbench.config.schema import (
    ArrivalConfig,
    BackendConfig,
    BenchConfig,
    ConfigError,
    DistConfig,
    unread_keys,
    validate,
)
from cgbench.workload.sources import lengths_drawer, times_drawer
from cgbench.workload.stream import generate_requests

_SCHEMA = {"arrival": ArrivalConfig, "length": DistConfig}


def _assert_schema_fields(record_fields: type, schema: type) -> None:
    mine, theirs = typing.get_type_hints(record_fields), typing.get_type_hints(schema)
    for name, kind in mine.items():
        assert name in theirs and kind == theirs[name], (record_fields.__name__, name)


def test_each_record_reads_schema_fields_and_names_a_builder_of_its_package():
    for table, package in ((ARRIVAL_PROCESSES, "cgbench.workload."), (LENGTH_DISTRIBUTIONS, "cgbench.workload."),
                           (COST_MODELS, "cgbench.backends.sim.")):
        for name, record in table.items():
            schema = BackendConfig if table is COST_MODELS else _SCHEMA[record.family]
            if record.fields is not None:
                _assert_schema_fields(record.fields, schema)
            assert record.reads == (tuple(f.name for f in fields(record.fields)) if record.fields else ()), name
            assert record.builder.startswith(package) and callable(builder(record.builder)), name
    assert ARRIVAL_PROCESSES["gamma"].reads == ("rate", "burstiness")
    assert COST_MODELS["calibrated"].reads == ("calibration",) and COST_MODELS["roofline"].reads == ()


def test_a_source_gives_reads_or_fields_not_both():
    with pytest.raises(TypeError, match="give reads or fields, not both"):
        WorkloadSource("both", ("rate",), fields=Rate)
    assert WorkloadSource("plug", ("rate",), family="arrival").reads == ("rate",)  # a plug-in's record, as before


def halving_times(a: ArrivalConfig, rng: random.Random):
    """The scratch process's builder: gaps of 1 / rate, then half that, then a quarter ..."""
    state = {"t": 0.0, "gap": 1.0 / a.rate, "first": True}

    def draw(n: int) -> list[float]:
        out = []
        for _ in range(n):
            if not state["first"]:
                state["t"] += state["gap"]
                state["gap"] /= 2
            state["first"] = False
            out.append(state["t"])
        return out

    return draw


def _check_halving(a: ArrivalConfig, key: str) -> None:
    if a.rate > 1000:
        raise ConfigError(f"{key}.rate: must be <= 1000 for process=halving, got {a.rate}")


def test_a_new_builtin_arrival_process_is_one_record(monkeypatch: pytest.MonkeyPatch):
    record = WorkloadSource("halving", summary="halving gaps from 1 / rate", fields=Rate, check=_check_halving,
                            builder=f"{__name__}:halving_times")
    monkeypatch.setitem(workloads.ARRIVAL_PROCESSES, record.name, record)
    cfg = load_config(["workload.arrival.process=halving", "workload.arrival.rate=4", "workload.num_requests=4"])
    assert [r.arrival_s for r in generate_requests(cfg.workload, 0)] == [0.0, 0.25, 0.375, 0.4375]
    # validation: the open-loop rule (it reads rate), then its own
    cfg.workload.arrival.rate = 0.0
    with pytest.raises(ConfigError, match=r"^workload.arrival.rate: must be > 0 for process=halving, got 0.0$"):
        validate(cfg)
    cfg.workload.arrival.rate = 2000.0
    with pytest.raises(ConfigError, match=r"^workload.arrival.rate: must be <= 1000 for process=halving"):
        validate(cfg)
    # the unread keys: what the others read, and it reads rate with the open-loop processes
    unread = unread_keys(cfg)
    assert unread["workload.arrival.burstiness"] == "workload.arrival.process=halving (read with gamma)"
    assert "workload.arrival.rate" not in unread
    why = unread_keys(BenchConfig())["workload.arrival.rate"]  # all_at_once: the open-loop processes read it
    assert why.startswith("workload.arrival.process=all_at_once (read with poisson, gamma, constant") and \
        why.endswith(", halving)")
    assert times_drawer(ArrivalConfig(process="halving", rate=1.0), random.Random(0))(3) == [0.0, 1.0, 1.5]


@dataclass
class _Mode:
    mean: float


def around_mean(d: DistConfig, rng: random.Random):
    return lambda n: [min(max(round(d.mean) + rng.randint(-1, 1), d.min), d.max) for _ in range(n)]


def _check_mode(d: DistConfig, key: str) -> None:
    if not d.mean >= 2:
        raise ConfigError(f"{key}.mean: must be >= 2 for dist=around, got {d.mean}")


def test_a_new_builtin_length_distribution_is_one_record(monkeypatch: pytest.MonkeyPatch):
    record = WorkloadSource("around", family="length", fields=_Mode, check=_check_mode,
                            builder=f"{__name__}:around_mean")
    monkeypatch.setitem(workloads.LENGTH_DISTRIBUTIONS, record.name, record)
    cfg = load_config(["workload.prompt_len.dist=around", "workload.prompt_len.mean=500", "workload.num_requests=20"])
    assert {r.prompt_tokens for r in generate_requests(cfg.workload, 0)} <= {499, 500, 501}
    cfg.workload.prompt_len.mean = 1.0
    with pytest.raises(ConfigError, match=r"^workload.prompt_len.mean: must be >= 2 for dist=around, got 1.0$"):
        validate(cfg)
    unread = unread_keys(cfg)
    assert unread["workload.prompt_len.std"] == "workload.prompt_len.dist=around (read with dist=normal)"
    assert "workload.prompt_len.mean" not in unread
    fixed = BenchConfig()
    fixed.workload.prompt_len.dist = "fixed"
    assert unread_keys(fixed)["workload.prompt_len.mean"].endswith("(read with dist=normal/lognormal/around)")
    assert set(lengths_drawer(DistConfig(dist="around", mean=9.0, max=100), random.Random(0))(20)) <= {8, 9, 10}


@dataclass
class _Scale:
    calibration: typing.Optional[str]  # as schema.BackendConfig types it


def scaled_roofline(backend: BackendConfig, model, hardware, engine):
    return make_roofline(model, hardware, engine)


def _check_scaled(backend: BackendConfig) -> None:
    if backend.calibration is not None and not backend.calibration.endswith(".json"):
        raise ConfigError(f"backend.calibration: cost_model=scaled reads a .json table, got {backend.calibration!r}")


def test_a_new_builtin_pricer_is_one_record(monkeypatch: pytest.MonkeyPatch):
    record = PricerSpec("scaled", "the roofline, for a scratch check", _Scale, _check_scaled,
                        builder=f"{__name__}:scaled_roofline")
    monkeypatch.setitem(pricers.COST_MODELS, record.name, record)
    cfg = load_config(["backend.cost_model=scaled"])
    assert type(make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)).__name__ == "RooflineCostModel"
    cfg.backend.calibration = "t.csv"
    with pytest.raises(ConfigError, match=r"^backend.calibration: cost_model=scaled reads a .json table"):
        validate(cfg)
    roofline = BenchConfig()
    assert unread_keys(roofline)["backend.calibration"] == \
        "backend.cost_model=roofline (read with cost_model=calibrated/scaled)"
