"""The real engine on the CPU: scheduling never changes what the model generates.

The same requests are generated under every policy, with and without chunked prefill, with
different grids, budgets and a KV pool small enough to pause and evict; each request's tokens
must equal generating it alone (no batching at all).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

pytestmark = pytest.mark.slow  # the real torch engine

torch = pytest.importorskip("torch")

from cgbench.backends.torch.backend import TorchBackend  # noqa: E402
from cgbench.config.compose import load_config  # noqa: E402
from cgbench.engine.request import Outcome  # noqa: E402
from cgbench.grids.build import build_grid  # noqa: E402
from cgbench.pipeline import build_engine, make_backend, metrics_of  # noqa: E402
from cgbench.workload.arrivals import ArrivalStream, RequestSpec  # noqa: E402

LENGTHS = [(5, 7), (33, 5), (17, 9), (48, 4), (9, 8), (26, 6)]
VARIANTS = [
    ["policy=budget"],
    ["policy=megatron", "engine.chunked_prefill=true", "engine.max_tokens=24"],
    ["policy=defer", "engine.chunked_prefill=true", "engine.max_tokens=20", "cg=dense"],
    ["policy=wait_timeout", "engine.chunked_prefill=true", "engine.max_tokens=16", "cg=sparse"],
    ["policy=pad_guard", "engine.max_requests=2", "engine.max_tokens=64"],
    ["policy=megatron", "cg=vllm", "engine.max_requests=3"],
    ["policy=budget", "engine.kv_blocks=6", "engine.block_size=16"],  # pauses and evictions
]


def _torch_backend(cfg) -> TorchBackend:
    backend, _, _ = make_backend(cfg, build_grid(cfg.cg, cfg.engine, cfg.model))
    assert isinstance(backend, TorchBackend)
    return backend


def _generate(model: str, overrides: list[str]):
    cfg = load_config([f"model={model}", "engine=small", "backend=torch", "backend.device=cpu", *overrides])
    cfg = replace(cfg, engine=replace(cfg.engine, check_invariants=True))
    backend = _torch_backend(cfg)
    specs = [RequestSpec(i, 0.0, p, o) for i, (p, o) in enumerate(LENGTHS)]
    eng = build_engine(cfg, backend=backend, stream=ArrivalStream(specs))
    state = eng.run()
    assert state.outcome == "completed", state.diagnosis
    assert all(r.outcome == Outcome.COMPLETED for r in state.requests)
    return {r.id: backend.token_ids(r) for r in state.requests}, eng, state, backend


@pytest.fixture(scope="module", params=["tiny_transformer", "tiny_hybrid"])
def alone(request):
    model = request.param
    cfg = load_config([f"model={model}", "engine=small", "backend=torch", "backend.device=cpu"])
    backend = _torch_backend(cfg)
    expected = {i: backend.runner.generate_alone(backend.runner.prompt_tokens(i, p), o)
                for i, (p, o) in enumerate(LENGTHS)}
    return model, expected


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda v: " ".join(v))
def test_tokens_identical_under_any_scheduling(alone, overrides):
    model, expected = alone
    tokens, eng, state, _ = _generate(model, overrides)
    assert tokens == expected
    if "engine.kv_blocks=6" in overrides:
        assert state.stats.paused_events > 0 or state.stats.evicted_events > 0


def test_torch_schedule_equals_the_simulator_and_every_cpu_step_is_eager():
    """Admission follows the grid on the CPU too, so the schedule is the simulator's; but no graph is
    captured there, so each step the simulator replays as a graph ran eager, for ``not_captured``."""
    ovr = ["model=tiny_hybrid", "engine=small", "workload=small", "policy=megatron", "engine.chunked_prefill=true",
           "engine.max_tokens=32"]
    sim_cfg = load_config(ovr)
    torch_cfg = load_config([*ovr, "backend=torch", "backend.device=cpu"])
    sim = build_engine(sim_cfg)
    sim_state = sim.run()
    backend = _torch_backend(torch_cfg)
    assert backend.captured == frozenset()
    real = build_engine(torch_cfg, backend=backend)
    real_state = real.run()
    ms, mr = metrics_of(sim, sim_state, sim_cfg.slo), metrics_of(real, real_state, torch_cfg.slo)
    for key in ("steps", "deferral_events", "max_cg_wait_iters", "snap_splits", "ttft_steps", "tpot_steps",
                "e2e_steps", "requests", "output_tokens", "queue_wait_iters", "num_graphs", "gating_active"):
        assert ms[key] == mr[key], key
    assert ms["graphed_steps"] > 0 and mr["graphed_steps"] == 0 and real_state.stats.graph_usage == {}
    assert mr["eager_steps"] == mr["steps"] == backend.report()["steps_eager"]
    assert mr["eager_steps_by_reason"] == {**ms["eager_steps_by_reason"], "not_captured": ms["graphed_steps"]}
    assert mr["padded_token_fraction"] == 0 and mr["eager_token_fraction"] == 1
    assert mr["makespan_s"] > 0 and mr["ttft_ms"]["count"] == 12


def test_the_cli_reports_every_cpu_step_as_eager(tmp_path):
    """``cgbench run backend=torch model=tiny_hybrid engine=small workload=small`` on a CPU: the table,
    the note and the result say what ran (every step eager, none replayed)."""
    import json
    import re

    from typer.testing import CliRunner

    from cgbench.cli.app import app

    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["run", "backend=torch", "model=tiny_hybrid", "engine=small", "workload=small",
                                 "backend.device=cpu", "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads(out.read_text())["metrics"]
    steps = m["steps"]
    assert steps > 0 and m["graphed_steps"] == 0 and m["eager_steps"] == steps and m["eager_step_fraction"] == 1
    assert sum(m["eager_steps_by_reason"].values()) == steps and m["eager_steps_by_reason"]["not_captured"] > 0
    assert re.search(rf"steps \(graphed / eager\)\s+{steps} \(0 / {steps}\)", r.stdout)
    assert re.search(r"eager-step fraction\s+100\.00%", r.stdout)
    assert re.search(rf"graphs captured / gating active\s+0 of {m['num_graphs']} / ", r.stdout)
    assert "none of the grid's" in r.stdout and "every step ran eager" in r.stdout
