"""Build the cost model that ``backend.cost_model`` names."""

from __future__ import annotations

from cgbench.backends.sim.calibrated import CalibratedCostModel
from cgbench.backends.sim.cost_model import EagerPadding, RooflineCostModel
from cgbench.config.schema import BackendConfig, ConfigError, EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepPricer


def make_cost_model(backend: BackendConfig, model: ModelConfig, hardware: HardwareConfig,
                    engine: EngineConfig) -> StepPricer:
    """The cost model ``backend.cost_model`` names, built for this model, device and engine."""
    if backend.cost_model == "roofline":
        return RooflineCostModel(model, hardware, engine.tp_size,
                                 eager_padding=EagerPadding.from_engine(engine))
    if backend.cost_model == "calibrated":
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
    raise ConfigError(f"backend.cost_model: {backend.cost_model!r} is not one of roofline, calibrated")
