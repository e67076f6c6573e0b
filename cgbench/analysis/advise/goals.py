"""What ``cgbench advise`` optimises (``--objective``) and the constraints it must meet (``--slo``),
read from a run's metrics by their result-JSON names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cgbench.config.schema import ConfigError
from cgbench.results.names import number_at


@dataclass(frozen=True)
class Objective:
    name: str
    metric: str  # dotted path in the run JSON's metrics
    maximize: bool
    unit: str


OBJECTIVES = {
    "throughput": Objective("throughput", "output_throughput_tok_s", True, "tok/s"),
    "ttft_p99": Objective("ttft_p99", "ttft_ms.p99", False, "ms"),
    "tpot_p99": Objective("tpot_p99", "tpot_ms.p99", False, "ms"),
    "eager_fraction": Objective("eager_fraction", "eager_step_fraction", False, ""),
}

# --slo NAME=VALUE: (metric, True when VALUE is an upper bound)
SLO_METRICS = {
    "ttft_p99": ("ttft_ms.p99", True),
    "tpot_p99": ("tpot_ms.p99", True),
    "eager_fraction": ("eager_step_fraction", True),
    "max_wait": ("max_cg_wait_iters", True),
    "throughput": ("output_throughput_tok_s", False),
}


@dataclass(frozen=True)
class Slo:
    name: str
    metric: str
    bound: float
    upper: bool

    @classmethod
    def parse(cls, text: str) -> Slo:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or name not in SLO_METRICS:
            raise ConfigError(f"--slo: {text!r} must be NAME=VALUE with NAME one of {', '.join(SLO_METRICS)}")
        try:
            bound = float(value)
        except ValueError:
            raise ConfigError(f"--slo {name}: {value!r} is not a number") from None
        if not math.isfinite(bound) or bound < 0:
            raise ConfigError(f"--slo {name}: must be a finite number >= 0, got {value}")
        metric, upper = SLO_METRICS[name]
        return cls(name, metric, bound, upper)

    def violated_by(self, metrics: dict[str, Any]) -> str | None:
        v = number_at(metrics, self.metric)
        if v is None:
            return f"{self.name}: no {self.metric}"
        if (v > self.bound) if self.upper else (v < self.bound):
            return f"{self.name} {v:g} {'>' if self.upper else '<'} {self.bound:g}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "bound": self.bound,
                "kind": "at most" if self.upper else "at least"}
