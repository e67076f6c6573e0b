"""The draft (MTP) head: its own kernel class in the roofline, absent without speculation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cgbench.backends.sim.cost_model import BREAKDOWN_CLASSES
from cgbench.backends.sim.draft_head import draft_head
from cgbench.backends.sim.factory import make_roofline
from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepWork


def _cost(spec: int, **model):
    m = replace(ModelConfig(), kind="transformer", layer_pattern="*-", **model)
    return make_roofline(m, HardwareConfig(), replace(EngineConfig(), num_speculative_tokens=spec))


def test_no_speculation_no_draft_head():
    assert draft_head(ModelConfig(), HardwareConfig(), EngineConfig(), True) is None
    work = StepWork(64, 0, 64, 64 * 500, (64, 0, 64))
    assert _cost(0).breakdown(work)["draft_head"] == 0.0


@pytest.mark.parametrize("graphed", [True, False])
def test_the_draft_head_is_a_class_of_the_step_and_adds_up(graphed):
    work = StepWork(64, 0, 32, 32 * 500, (64, 0, 32) if graphed else None)
    with_head, without = _cost(1), _cost(0)
    parts = with_head.breakdown(work)
    assert list(parts) == list(BREAKDOWN_CLASSES) and parts["draft_head"] > 0
    assert sum(parts.values()) == pytest.approx(with_head.step_time(work))
    assert with_head.step_time(work) > without.step_time(work)


def test_each_depth_is_a_serial_pass_reading_the_layer_and_lm_head_weights():
    m = replace(ModelConfig(), kind="transformer")
    hw = HardwareConfig()
    one = draft_head(m, hw, replace(EngineConfig(), num_speculative_tokens=1), True)
    three = draft_head(m, hw, replace(EngineConfig(), num_speculative_tokens=3), True)
    bw = hw.hbm_bandwidth * hw.bandwidth_efficiency
    fl = hw.peak_flops * hw.flops_efficiency
    assert three.seconds(8, fl, bw) == pytest.approx(3 * one.seconds(8, fl, bw))
    # a small batch is weight-bound: at least the weights over the bandwidth, per depth
    assert one.seconds(1, fl, bw) >= one.weight_bytes / bw
    lm_head = m.hidden_size * m.vocab_size * m.dtype_bytes
    assert one.weight_bytes > lm_head  # the shared output layer plus one transformer layer
    # request-count shaped: more rows cost more once compute-bound
    assert one.seconds(4096, fl, bw) > one.seconds(8, fl, bw)
