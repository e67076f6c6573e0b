"""cgbench against Megatron-LM's own code, live: Megatron's inference functions driven step by step
on random scenarios next to cgbench's engine (scripts/megatron_diff.py). Needs torch and a Megatron-LM
tree: ``CGBENCH_MEGATRON_LM`` (one or more trees) or ``CGBENCH_MEGATRON_GIT`` (a git directory the
refs are extracted from); skipped without one (CI has none: tests/engine/test_megatron_golden.py
replays recorded runs instead). ``make test-deep`` (hypothesis's deep profile) runs 1,000 scenarios
per rule set; other profiles 30."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.helpers import load_script

md = load_script("megatron_diff")
pytestmark = pytest.mark.slow


def _runs() -> int:
    return 1000 if settings().max_examples >= 1000 else 30


def _megatron(rules: str):
    if rules not in md.megatron_trees():
        pytest.skip(f"no Megatron-LM tree for {rules} (set CGBENCH_MEGATRON_LM or CGBENCH_MEGATRON_GIT)")
    pytest.importorskip("torch")
    return md.load_megatron(rules)


@pytest.mark.parametrize("rules", ["0.19.2", "main"])
def test_random_scenarios_give_megatrons_state_at_every_step(rules):
    _megatron(rules)
    runs, diffs, _ = md.live(rules, seed=20261201, runs=_runs())
    assert runs == _runs() and diffs == []


def test_random_routings_give_the_coordinators_ranks():
    import random

    mg = _megatron("0.19.2")
    rng = random.Random(20261201)
    for _ in range(_runs()):
        case = md.random_routing_case(rng)
        assert md.route_cgbench(case) == md.route_megatron(case, mg), case
