"""``schema.validate`` is a loop over each feature's rules (``schema.RULES``, the functions of
``cgbench.config.rules`` and the registries): it runs them all, in their order, and the first
broken rule names its key."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from cgbench.config import schema
from cgbench.config.schema import BenchConfig, ConfigError, validate

RULES_DIR = Path(schema.__file__).parent / "rules"


def _error(cfg: BenchConfig) -> str:
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    return str(info.value)


def test_the_first_features_rule_broken_is_the_one_named():
    base = BenchConfig()
    bad_model = replace(base, model=replace(base.model, hidden_size=0))
    bad_engine = replace(base.engine, max_requests=0)
    bad_workload = replace(base.workload, num_requests=0)
    # model before engine before workload, as the one validate always checked them
    assert _error(replace(bad_model, engine=bad_engine, workload=bad_workload)).startswith("model.hidden_size:")
    assert _error(replace(base, engine=bad_engine, workload=bad_workload)).startswith("engine.max_requests:")
    assert _error(replace(base, workload=bad_workload)).startswith("workload.num_requests:")
    bad_prefix = replace(base.engine, prefix_gate="computed")
    bad_grid = replace(base.cg, cuda_graph_max_tokens=0)
    assert _error(replace(base, engine=bad_prefix, cg=bad_grid)).startswith("engine.prefix_gate:")
    assert _error(replace(base, cg=bad_grid, policy=schema.PolicyConfig(name="nope"))).startswith(
        "cg.cuda_graph_max_tokens:")


def test_validate_runs_every_rule_in_order(monkeypatch: pytest.MonkeyPatch):
    seen: list[str] = []
    rules = tuple((lambda cfg, n=i: seen.append(str(n))) for i in range(len(schema.RULES)))
    monkeypatch.setattr(schema, "RULES", rules)
    cfg = BenchConfig()
    assert validate(cfg) is cfg and seen == [str(i) for i in range(len(rules))]


def test_each_rule_module_is_run_by_validate_and_reads_no_schema():
    run = {f.__module__ for f in schema.RULES}
    for path in RULES_DIR.glob("*.py"):
        if path.stem in ("__init__", "base", "speculative"):  # helpers (speculative: part of engine's rules)
            continue
        assert f"cgbench.config.rules.{path.stem}" in run, path.stem
        imported = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
        assert "cgbench.config.schema" not in imported, path.stem
