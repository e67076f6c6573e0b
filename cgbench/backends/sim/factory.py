"""The step-pricer registry's builders half: the cost model that ``backend.cost_model`` names.

Each pricer is one record, ``cgbench.config.registry.pricers.PricerSpec``, holding its name, the keys
it reads, its rule and its builder's name (``module:function``: here, ``build_roofline`` and
``make_calibrated``); ``make_cost_model`` resolves the builder from the record."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from cgbench.backends.sim.calibrated import CalibratedCostModel, HostCalibration
from cgbench.backends.sim.cost_model import EagerPadding, RooflineCostModel
from cgbench.backends.sim.draft_head import draft_head
from cgbench.backends.sim.host_profiles import host_cost_statement
from cgbench.config.content_memo import ContentMemo
from cgbench.config.registry.pricers import COST_MODELS
from cgbench.config.registry.records import builder
from cgbench.config.schema import BackendConfig, ConfigError, EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepPricer


def resolve_hardware(hardware: HardwareConfig) -> HardwareConfig:
    """The preset with ``hardware.host_calibration``'s values in place, if it names a file: a host
    calibration's measured ``host_op_us``, or the parameters a log calibration fitted
    (``cgbench calibrate --megatron-log``, ``cgbench.backends.sim.log_calibration``)."""
    if not hardware.host_calibration:
        return hardware
    from cgbench.backends.sim.log_calibration import LogCalibration, load_machine_calibration

    found = load_machine_calibration(hardware.host_calibration)
    if isinstance(found, LogCalibration):
        return found.applied(hardware)
    assert isinstance(found, HostCalibration)
    return dataclasses.replace(hardware, host_op_us=found.host_op_us)


def host_cost_label(backend: BackendConfig, hardware: HardwareConfig) -> str:
    """The host cost that prices a simulated run's eager steps, and its source (``labels.host_cost``)."""
    if backend.cost_model != "roofline":
        return f"none: backend.cost_model={backend.cost_model} (its measured step times hold the host)"
    return roofline_host_cost(hardware)


def roofline_host_cost(hardware: HardwareConfig) -> str:
    """The roofline model's host cost per op on ``hardware`` and where it comes from."""
    if hardware.host_calibration:
        from cgbench.backends.sim.log_calibration import LogCalibration, load_machine_calibration

        found = load_machine_calibration(hardware.host_calibration)
        if isinstance(found, LogCalibration):  # fitted to a production log: the log's server is the host
            if "hardware.host_op_us" not in found.fitted:  # the log could not price an eager step
                return host_cost_statement(dataclasses.replace(hardware, host_calibration=None)) + \
                    f"; not fitted by megatron log {found.log_name()} ({found.kept.get('hardware.host_op_us', 'kept')})"
            return host_cost_statement(found.applied(hardware), f"the server of megatron log {found.log_name()}")
        return host_cost_statement(dataclasses.replace(hardware, host_op_us=found.host_op_us), found.host)
    return host_cost_statement(hardware)


# The last few roofline models by their records' content: a sweep's points mostly share the three
# records, and a model's price caches hold pure functions of its constants and the step's shape, so a
# run that reuses one reads the same floats it would compute (and skips computing them). Nothing else
# in a model changes after it is built. A host calibration is a file, read every time.
_ROOFLINES: ContentMemo[RooflineCostModel] = ContentMemo(4)


def make_roofline(model: ModelConfig, hardware: HardwareConfig, engine: EngineConfig) -> RooflineCostModel:
    """The roofline model of this model on this device, with the engine's tp size, eager padding, for
    MoE layers its expert parallelism and dispatcher, and under speculative decoding its MTP draft head.
    Kept by content and shared (its price caches too) unless ``hardware.host_calibration`` names a file."""
    if hardware.host_calibration:
        return _build_roofline(model, hardware, engine)
    return _ROOFLINES.get((model, hardware, engine), lambda: _build_roofline(model, hardware, engine))


def _build_roofline(model: ModelConfig, hardware: HardwareConfig, engine: EngineConfig) -> RooflineCostModel:
    hw = resolve_hardware(hardware)
    gated = getattr(model, "gated_mlp", None)
    draft = draft_head(model, hw, engine, model.kind == "transformer" if gated is None else gated)
    return RooflineCostModel(model, hw, engine.tp_size, eager_padding=EagerPadding.from_engine(engine),
                             ep_size=engine.ep_size, moe_dispatcher=engine.moe_dispatcher, draft=draft)


def make_calibrated(backend: BackendConfig, model: ModelConfig, hardware: HardwareConfig,
                    engine: EngineConfig) -> CalibratedCostModel:
    """The calibrated model of ``backend.calibration``, checked against this model and tp size."""
    if hardware.host_calibration:
        raise ConfigError("hardware.host_calibration: cost_model=calibrated prices steps from measured "
                          "step times, which already include the host; drop the host calibration")
    if not backend.calibration:
        raise ConfigError("backend.calibration: cost_model=calibrated needs a calibration table path")
    cost = CalibratedCostModel.from_file(backend.calibration)
    measured = cost.table.model["name"]
    if measured != model.name:
        raise ConfigError(f"backend.calibration: '{backend.calibration}' was measured for model "
                          f"{measured!r}, but model.name is {model.name!r}")
    if cost.table.tp_size != engine.tp_size:
        raise ConfigError(f"backend.calibration: '{backend.calibration}' was measured at tp_size="
                          f"{cost.table.tp_size}, but engine.tp_size is {engine.tp_size}")
    return cost


def build_roofline(backend: BackendConfig, model: ModelConfig, hardware: HardwareConfig,
                   engine: EngineConfig) -> RooflineCostModel:
    """``cost_model=roofline``'s builder: ``make_roofline`` (it reads no ``backend`` key)."""
    return make_roofline(model, hardware, engine)


PricerBuilder = Callable[[BackendConfig, ModelConfig, HardwareConfig, EngineConfig], StepPricer]


def make_cost_model(backend: BackendConfig, model: ModelConfig, hardware: HardwareConfig,
                    engine: EngineConfig) -> StepPricer:
    """The cost model ``backend.cost_model`` names, built for this model, device and engine by the
    builder its record names."""
    spec = COST_MODELS.get(backend.cost_model)
    if spec is None:
        raise ConfigError(f"backend.cost_model: {backend.cost_model!r} is not one of {', '.join(COST_MODELS)}")
    build: PricerBuilder = builder(spec.builder)
    return build(backend, model, hardware, engine)
