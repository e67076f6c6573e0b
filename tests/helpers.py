"""Builders for engine tests: explicit requests, Megatron list (B), the default limits, and the random
engine scenarios that several property tests draw from."""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from cgbench.config.schema import (
    EP_ROUTINGS,
    MEGATRON_RULES,
    MOE_DISPATCHERS,
    POLICIES,
    BenchConfig,
    CGConfig,
    EngineConfig,
    ModelConfig,
    PolicyConfig,
)
from cgbench.engine.build import Parts, build_core, build_scheduler
from cgbench.engine.context import Context
from cgbench.engine.core import Engine
from cgbench.engine.fast import FastEngine
from cgbench.engine.policy_registry import make_policy
from cgbench.engine.scheduler import Scheduler
from cgbench.grids.build import build_grid
from cgbench.grids.lookup import Grid
from cgbench.native import simulator_build
from cgbench.pipeline import build_engine
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from cgbench.workload.prefix_hashes import mix


def make_cfg(*, kind: str = "transformer", policy: str = "megatron", chunked: bool = False,
             cg: CGConfig | None = None, **engine) -> BenchConfig:
    e = replace(EngineConfig(), chunked_prefill=chunked, check_invariants=True, **engine)
    model = replace(ModelConfig(), kind=kind, name=kind,
                    layer_pattern="M-M*-" if kind == "hybrid" else "*-")
    return BenchConfig(model=model, cg=cg or CGConfig(), policy=PolicyConfig(name=policy), engine=e)


def specs(*lengths: tuple[int, int], arrival_s: float = 0.0) -> list[RequestSpec]:
    return [RequestSpec(i, arrival_s, p, o) for i, (p, o) in enumerate(lengths)]


def run_engine(cfg: BenchConfig, reqs: list[RequestSpec], *, concurrency: int = 0):
    eng = build_engine(cfg, trace=True, stream=ArrivalStream(reqs, concurrency=concurrency))
    state = eng.run()
    return eng, state


def round_scheduler(cfg: BenchConfig, *, ctx: Context | None = None, grid: Grid | None = None) -> Scheduler:
    """The scheduler of a hand-built round, as an engine of ``cfg`` gets it (``engine.build.build_scheduler``):
    on ``ctx`` (a fresh context of ``cfg.engine`` by default) and ``grid`` (``cfg``'s by default), under
    ``cfg``'s policy."""
    grid = grid if grid is not None else build_grid(cfg.cg, cfg.engine, cfg.model)
    ctx = ctx if ctx is not None else Context.from_engine(cfg.engine)
    return build_scheduler(ctx, cfg.engine, cfg.cg, grid, make_policy(cfg.policy))


def core_of_class(cls: type[Engine], cfg: BenchConfig, reqs: list[RequestSpec], *, trace: bool = True) -> Engine:
    """One engine core of ``cfg`` on ``reqs``, built as ``build_engine`` builds one but as ``cls`` (a test's
    recording subclass of ``Engine``, step by step, or of ``FastEngine``, event-proportional)."""
    from cgbench.pipeline import make_backend

    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    backend, _, _ = make_backend(cfg, grid)
    parts = Parts(cfg, grid, make_policy(cfg.policy), backend, trace)
    return build_core(parts, ArrivalStream(reqs), step_by_step=not issubclass(cls, FastEngine), engine_class=cls)


def examples(default: int, *, stretch: bool = True) -> int:
    """A property's number of examples. Under the quick profile (fewer than hypothesis's default of
    100: ``make test`` and ``make test-fast``) at most the profile's count; otherwise ``default``, or,
    where the property ``stretch``es, the loaded profile's count when that is larger (the deep
    profile of tests/conftest.py). An explicit ``max_examples`` overrides any profile, so every
    property sizes itself here."""
    profile = settings().max_examples
    if profile < settings.get_profile("default").max_examples:  # hypothesis's own default profile
        return min(default, profile)
    return max(default, profile) if stretch else default


# a test that subclasses the engine in Python: possible only when the engine runs as plain Python
# (the compiled build, make native, cannot be subclassed from Python)
needs_python_engine = pytest.mark.skipif(simulator_build() != "python",
                                         reason="subclasses the engine; the compiled engine cannot be subclassed")


# the ledger's column widths grow at these request counts (one byte, then two): a scenario sometimes
# has one request less, as many, or one more
WIDTH_EDGE_COUNTS = (127, 128, 129)


@st.composite
def engine_features(draw) -> dict:
    """Engine keys of the features a random scenario draws beyond the single engine: expert
    parallelism (``ep_size`` ranks in lockstep, the MoE dispatcher, the routing rule). The one place
    that draws them: a new engine feature adds its keys here, and every property over ``scenarios``
    (the invariants, fast == oracle, the column metrics) draws it."""
    return {"ep_size": draw(st.sampled_from([1, 1, 1, 2, 3, 4])),
            "moe_dispatcher": draw(st.sampled_from(MOE_DISPATCHERS)),
            "ep_routing": draw(st.sampled_from(EP_ROUTINGS))}


# random engine configs, grids, policies and workloads: the engine invariants, the fast engine's
# equality with the oracle and the column metrics all draw from these
@st.composite
def scenarios(draw):
    max_requests = draw(st.sampled_from([2, 4, 8, 16]))
    max_tokens = draw(st.sampled_from([max_requests, 64, 128, 512]))
    msl = draw(st.sampled_from([64, 128, 300]))
    block = draw(st.sampled_from([16, 32, 64]))
    per_req = -(-msl // block)
    kv = draw(st.sampled_from([0, max(per_req, 2), per_req * 2, per_req * max_requests // 2 + 1]))
    paused = draw(st.sampled_from([0, 0, 4]))
    chunked = draw(st.booleans())
    policy = draw(st.sampled_from(POLICIES))
    kind = draw(st.sampled_from(["transformer", "hybrid"]))
    n_graphs = draw(st.sampled_from([None, 1, 2, 4, 16, -1]))
    cg = CGConfig(num_cuda_graphs=n_graphs, all_prefills=draw(st.booleans()),
                  cuda_graph_max_tokens=draw(st.sampled_from([16, 512])),
                  distribution=draw(st.sampled_from(["exponential", "linear", "hybrid"])),
                  non_decode=draw(st.booleans()), sizes_per_octave=draw(st.sampled_from([1, 2])))
    n = draw(st.one_of(st.integers(1, 24), st.integers(1, 24), st.integers(1, 24), st.sampled_from(WIDTH_EDGE_COUNTS)))
    longest = 80 if n <= 24 else 6  # a hundred requests or more: short outputs keep the example quick
    reqs = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 0.001, 0.05]))
        prompt = draw(st.one_of(st.integers(1, msl), st.integers(1, msl + 20)))
        reqs.append(RequestSpec(i, t, prompt, draw(st.integers(1, longest))))
    spec = draw(st.sampled_from([0, 0, 0, 1, 3]))
    max_tokens = max(max_tokens, max_requests * (spec + 1))
    cfg = make_cfg(kind=kind, policy=policy, chunked=chunked, cg=cg, max_requests=max_requests,
                   max_tokens=max_tokens, max_sequence_length=msl, block_size=block, kv_blocks=kv,
                   paused_blocks=paused, num_speculative_tokens=spec,
                   kv_corners=draw(st.sampled_from(["megatron", "safe"])),
                   megatron_rules=draw(st.sampled_from(MEGATRON_RULES)), **draw(engine_features()))
    # Megatron main's batch-invariant mode where its config allows it (hybrid: one-token decode, and
    # with chunked prefill max_tokens > the SSM chunk alignment)
    alignment = draw(st.sampled_from([16, 32, 128]))
    if (cfg.engine.megatron_rules == "main" and draw(st.booleans())
            and (kind != "hybrid" or (spec == 0 and (not chunked or max_tokens > alignment)))):
        cfg = replace(cfg, engine=replace(cfg.engine, batch_invariant=True, ssm_chunk_alignment=alignment))
    # Megatron main's hybrid SSM handoff pinning: finished requests pin their Mamba slot for a few rounds
    release = draw(st.sampled_from([0, 1, 3]))
    if cfg.engine.megatron_rules == "main" and kind == "hybrid" and draw(st.booleans()):
        cfg = replace(cfg, engine=replace(cfg.engine, handoff_pinning=True, handoff_release_steps=release))
    cfg = replace(cfg, policy=replace(cfg.policy, wait_timeout=replace(cfg.policy.wait_timeout, iters=3)))
    return with_prefix_caching(draw, cfg, reqs)


def prefix_ids(family: int, diverge: int, prompt: int) -> array:
    """Source block ids (16 tokens each, a generated workload's size) of a prompt that follows prompt
    family ``family`` for its first ``diverge`` source blocks and is its own after them."""
    n = -(-prompt // 16)
    return array("q", [mix(family + 1, j) if j < diverge else mix(1000 + family, mix(prompt, j)) for j in range(n)])


def with_prefix_caching(draw, cfg: BenchConfig, reqs: list[RequestSpec]) -> tuple[BenchConfig, list[RequestSpec]]:
    """Half the time: prefix caching on, with requests of a few prompt families that share prefixes
    (and, on a hybrid model, a Mamba state cache of a few slots, or none)."""
    # modelled on one engine (both rule sets, both eviction policies)
    e = cfg.engine
    if e.ep_size > 1 or e.handoff_pinning or (e.batch_invariant and cfg.model.kind == "hybrid") \
            or not draw(st.booleans()):
        return cfg, reqs
    slots = draw(st.sampled_from([0, 2, 8])) if cfg.model.kind == "hybrid" else 0
    gate = draw(st.sampled_from(["full", "full", "computed"]))
    cfg = replace(cfg, engine=replace(cfg.engine, prefix_caching=True, prefix_caching_mamba_slots=slots,
                                      prefix_gate=gate,
                                      prefix_caching_eviction=draw(st.sampled_from(["lru", "lru", "ref_zero"]))))
    if slots:  # the SSM chunk at whose multiples Mamba states are recorded
        b = cfg.engine.block_size
        cfg = replace(cfg, engine=replace(cfg.engine, ssm_chunk_alignment=draw(st.sampled_from([b, 2 * b, 128]))))
    out = []
    for r in reqs:
        family = draw(st.integers(0, 2))
        diverge = draw(st.sampled_from([0, 2, 4, 1000]))
        out.append(replace(r, prefix_blocks=prefix_ids(family, diverge, r.prompt_tokens)))
    return cfg, out


# small KV pools that force pauses, evictions and the corners where Megatron stops
@st.composite
def tight_pools(draw):
    block = draw(st.sampled_from([4, 8]))
    msl = 64
    kv = draw(st.integers(msl // block // 2 + 1, 2 * msl // block))
    paused = draw(st.sampled_from([0, 1, 2, 4, 8]))
    chunked = draw(st.booleans())
    spec = draw(st.sampled_from([0, 0, 1]))
    max_requests = draw(st.sampled_from([4, 8]))
    n = draw(st.integers(2, 12))
    reqs, t = [], 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 0.0005]))
        reqs.append(RequestSpec(i, t, draw(st.integers(1, 30)), draw(st.integers(1, 40))))
    cfg = make_cfg(kind="transformer", policy=draw(st.sampled_from(["budget", "megatron"])), chunked=chunked,
                   cg=replace(CGConfig(), all_prefills=False), max_requests=max_requests,
                   max_tokens=max(16, max_requests * (spec + 1)),
                   max_sequence_length=msl, block_size=block, kv_blocks=kv, paused_blocks=paused,
                   num_speculative_tokens=spec, kv_corners=draw(st.sampled_from(["megatron", "safe"])),
                   megatron_rules=draw(st.sampled_from(MEGATRON_RULES)))
    return with_prefix_caching(draw, cfg, reqs)


_VALIDATORS: dict = {}
# documents the suite's fixture validated, by kind, and the seconds it spent (conftest prints them)
SCHEMA_TALLY: dict[str, float] = {}


def _validator(kind: str):
    """The jsonschema validator of the committed ``cgbench/schemas/<kind>.schema.json``, built once."""
    if kind not in _VALIDATORS:
        import json

        from jsonschema import Draft202012Validator

        from cgbench.analysis.schemas import schema_path

        _VALIDATORS[kind] = Draft202012Validator(json.loads(schema_path(kind).read_text(encoding="utf-8")))
    return _VALIDATORS[kind]


def schema_errors(doc) -> tuple[str | None, list[str]]:
    """(the document's kind, its schema violations) for a parsed JSON document; (None, []) when it is
    none of the kinds cgbench has a schema for."""
    import time

    from cgbench.analysis.schemas import document_kind

    t0 = time.perf_counter()
    kind = document_kind(doc)
    if kind is None:
        return None, []
    errors = sorted(_validator(kind).iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    SCHEMA_TALLY[kind] = SCHEMA_TALLY.get(kind, 0) + 1
    SCHEMA_TALLY["seconds"] = SCHEMA_TALLY.get("seconds", 0.0) + time.perf_counter() - t0
    return kind, [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]


def one_error_line(result, *needles: str) -> str:
    """A refused command's one line: exit code 2, no traceback, a single ``error: `` line on stderr
    holding every one of ``needles``."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def load_script(name: str):
    """``scripts/<name>.py`` imported as a module (registered in ``sys.modules``, where the dataclasses
    of a script look their module up)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"cgbench_script_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def default_sigint() -> None:
    """``preexec_fn`` of a child a test signals with SIGINT: its SIGINT at the default, as a terminal
    starts a command, so its Python turns the signal into KeyboardInterrupt. A test process started
    in the background by a non-interactive shell (``cmd &``, ``nohup``: how a CI script may run) has
    SIGINT ignored, as POSIX starts background jobs, and a child inherits an ignored signal; cgbench
    rightly leaves that as it is, so without this the test would wait on a run that never stops."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
