"""The set-up of one ``cgbench advise`` search: the request checked against the config it searches
(the simulator only; a re-check that changes the workload, not the grid, and that composes), the
search's state (``Search``) with the baselines it compares with, and the default candidate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from cgbench.analysis.advise.candidates import Candidate
from cgbench.analysis.advise.capture import CaptureEstimator
from cgbench.analysis.advise.megatron_space import MegatronKnobs
from cgbench.analysis.advise.prices import ShapePrices
from cgbench.analysis.advise.request import AdviseRequest, check_request, is_cg, without_keys
from cgbench.analysis.advise.search import Search
from cgbench.analysis.baselines import GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT, baselines
from cgbench.config.overrides import override_key
from cgbench.config.schema import ConfigError

# what the recommendation is compared with besides the default grid (analysis/baselines.py)
ADVISE_BASELINES = (GATING_OFF, LAUNCH_LINE, MEGATRON_DEFAULT)


def setup(req: AdviseRequest, progress: Callable[[str, int | None], None]) -> tuple[Search, Candidate]:
    """The request checked against its config (every refusal before any run), the search's state,
    and the default candidate: the given config's own grid."""
    from cgbench.backends.sim.factory import make_cost_model
    from cgbench.config.compose import load_config
    from cgbench.engine.policy_registry import make_policy
    from cgbench.grids.build import build_grid

    objective, slos = check_request(req)
    cfg = load_config(list(req.overrides))
    if cfg.backend.name != "sim":
        raise ConfigError(f"backend: advise runs every candidate in the simulator; backend={cfg.backend.name} "
                          "is not supported (use backend=sim)")
    if req.check_workload:
        keys = {override_key(o) for o in req.check_workload}
        grid_keys = sorted(k for k in keys if k == "cg" or k.startswith("cg."))
        if grid_keys:  # the re-check runs the recommended grid: a grid of its own would replace it
            raise ConfigError(f"--check-workload: {', '.join(grid_keys)} sets the grid, which is what advise "
                              "recommends; a re-check changes the workload (workload=..., workload.*, seed, "
                              "engine limits), not the grid")
        try:
            other = load_config(without_keys(req.overrides, keys) + list(req.check_workload))
        except ConfigError as e:
            raise ConfigError(f"--check-workload: {e}") from None
        if asdict(other) == asdict(cfg):
            raise ConfigError(f"--check-workload: {' '.join(req.check_workload)} changes nothing "
                              "(it is the searched workload)")
    if req.check_seed is not None and req.check_seed == cfg.seed:
        raise ConfigError(f"--check-seed: {req.check_seed} is the search's own seed; give another")
    # the re-check's config is the user's: refused now, before any candidate runs, not as failed rows
    seed = req.check_seed if req.check_seed is not None else cfg.seed + 1
    try:
        load_config(without_keys(req.overrides, {"seed"}) + [f"seed={seed}"])
    except ConfigError as e:
        option = "--check-seed" if req.check_seed is not None else f"seed (the re-check runs seed={seed})"
        raise ConfigError(f"{option}: {e}") from None
    pricer = make_cost_model(cfg.backend, cfg.model, cfg.hardware, cfg.engine)
    search = Search(req=req, objective=objective, slos=slos, base=list(req.overrides),
                    base_no_cg=[o for o in req.overrides if not is_cg(o)], strict=cfg.model.kind == "hybrid",
                    all_prefills=cfg.cg.all_prefills, num_speculative_tokens=cfg.engine.num_speculative_tokens,
                    estimator=CaptureEstimator(cfg.model, cfg.hardware, cfg.engine),
                    prices=ShapePrices(pricer, gating=make_policy(cfg.policy).gates),
                    engine=cfg.engine, seed=cfg.seed, progress=progress)
    search.gating = make_policy(cfg.policy).gates and cfg.cg.all_prefills
    search.default_kind = cfg.cg.kind
    search.baselines, search.baseline_notes = baselines(
        cfg, list(req.overrides), launch_line=req.launch_line, kinds=ADVISE_BASELINES, subject="the default")
    grid = build_grid(cfg.cg, cfg.engine, cfg.model)
    gs = tuple(tuple(g) for g in grid.graphs)
    c = cfg.cg
    knobs = None
    if c.kind == "megatron" and c.sizes_per_octave == 1 and c.p_per_octave == 1 and c.num_cuda_graphs is not None:
        knobs = MegatronKnobs(c.num_cuda_graphs, c.distribution, c.mixed_prefill_count, c.all_prefills,
                              c.cuda_graph_max_tokens, c.non_decode)
    default = Candidate("default", "default", f"the given config's grid (cg={c.kind})", tuple(req.overrides),
                        gs, search.estimator.estimate(gs), knobs=knobs, want_shapes=True)
    return search, default
