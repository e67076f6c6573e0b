"""Host cost per serving engine: how many framework ops an eager step issues, and what each costs.

An eager step's host time is ``ops × op_us + kernels × kernel_launch_us`` (``RooflineCostModel``);
the engine decides the first term. ``hardware.host_profile`` picks one of these profiles and
``hardware.host_op_us`` (or ``hardware.host_calibration``) overrides its µs per op. Each figure
names its source; docs/cost-model.md tabulates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cgbench.backends.sim.host_op_default import DEFAULT_HOST_OP_SOURCE as DEFAULT_HOST_OP_SOURCE
from cgbench.backends.sim.host_op_default import DEFAULT_HOST_OP_SUMMARY as DEFAULT_HOST_OP_SUMMARY
from cgbench.backends.sim.host_op_default import DEFAULT_HOST_OP_US as DEFAULT_HOST_OP_US
from cgbench.backends.sim.host_op_default import HOST_OP_RANGE_US as HOST_OP_RANGE_US
from cgbench.config.schema import ConfigError, HardwareConfig


@dataclass(frozen=True)
class HostProfile:
    """Framework ops an eager step issues per layer kind (``*``, ``-``, ``M``), the extra ops of a
    Mamba layer when the step has prefills, per step and per collective, and the host µs per op."""

    name: str
    ops_per_layer: Mapping[str, int]
    ops_mamba_prefill: int
    ops_per_step: int
    ops_per_collective: int
    op_us: float
    source: str = ""
    notes: tuple[str, ...] = field(default=())



MEGATRON = HostProfile(
    "megatron", {"*": 50, "-": 18, "M": 40}, 20, 34, 2, DEFAULT_HOST_OP_US,
    source="op counts: cgbench's torch model (calibrate --host counts them); µs/op: " + DEFAULT_HOST_OP_SOURCE)
# vLLM and SGLang fuse norms, rotary, activation and the KV write into custom ops (one op each) and
# call one attention op. Counted from vLLM's Llama decoder layer (vllm/model_executor/models/llama.py:
# fused-add RMSNorm, qkv_proj, split, rotary, the attention call with its q/k/v views, KV write and
# kernel, o_proj: ~14; fused-add RMSNorm, gate_up_proj, the output buffer, SiluAndMul, down_proj: 6),
# SGLang's llama.py having the same structure; ~60 per step (input preparation, logits, sampling) is
# an estimate. Their µs per op is fitted to a published eager-vs-graph pair each.
VLLM = HostProfile(
    "vllm", {"*": 14, "-": 6, "M": 16}, 8, 60, 2, 30.0,
    source="µs/op fitted to vllm-omni issue 7960 (Qwen2.5-Omni-7B thinker, A800: TPOT ~22-23 ms eager "
           "vs ~13 ms graphed); op counts: vLLM's Llama decoder layer (vllm/model_executor/models/llama.py)")
SGLANG = HostProfile(
    "sglang", {"*": 14, "-": 6, "M": 16}, 8, 60, 2, 10.3,
    source="µs/op fitted to sgl-project/sglang PR 1401 (Llama-3-8B, batch 1, flashinfer: 8.23 ms eager vs "
           "7.35 ms graphed); op counts as vllm")
# `measured`: Megatron's op counts at the µs per op of a `cgbench calibrate --host` file.
MEASURED = HostProfile("measured", MEGATRON.ops_per_layer, MEGATRON.ops_mamba_prefill, MEGATRON.ops_per_step,
                       MEGATRON.ops_per_collective, MEGATRON.op_us,
                       source="Megatron's op counts; µs/op from hardware.host_calibration")

HOST_PROFILES: dict[str, HostProfile] = {p.name: p for p in (MEGATRON, VLLM, SGLANG, MEASURED)}


def host_cost_statement(hardware: HardwareConfig, calibration_host: str | None = None) -> str:
    """Which host cost prices an eager step, and where it comes from: the run header's ``host`` part
    and the result's ``labels.host_cost``. ``calibration_host``: the measured host of the
    ``hardware.host_calibration`` file (whose µs per op is then ``hardware.host_op_us``)."""
    profile = host_profile(hardware)
    us = f"{profile.op_us:g} µs/op"
    if hardware.host_calibration:
        return f"{us} from hardware.host_calibration={hardware.host_calibration} (measured on {calibration_host})"
    if hardware.host_op_us is not None:
        return f"{us} set by hardware.host_op_us ({profile.name} profile's op counts)"
    if profile is MEGATRON:
        return f"{us}, the megatron profile's default (calibrate --host on a 2-core AMD EPYC VM; " \
               f"--sensitivity: {HOST_OP_RANGE_US[0]:g}-{HOST_OP_RANGE_US[1]:g})"
    return f"{us}, the {profile.name} profile's (fitted to a published eager step)"


def host_profile(hardware: HardwareConfig) -> HostProfile:
    """The hardware's host profile with its µs per op: ``hardware.host_op_us`` when set (a host
    calibration file sets it, ``cgbench.backends.sim.factory``), else the profile's."""
    profile = HOST_PROFILES.get(hardware.host_profile)
    if profile is None:
        raise ConfigError(f"hardware.host_profile: {hardware.host_profile!r} is not one of "
                          f"{', '.join(HOST_PROFILES)}")
    if hardware.host_op_us is None:
        return profile
    return HostProfile(profile.name, profile.ops_per_layer, profile.ops_mamba_prefill, profile.ops_per_step,
                       profile.ops_per_collective, float(hardware.host_op_us), profile.source, profile.notes)
