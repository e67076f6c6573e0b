"""cgbench against Megatron-LM's own code, on recorded runs (no Megatron needed).

``scripts/megatron_diff.py record`` ran Megatron's inference code (megatron-core 0.19.x's
``core_r0.19.0`` and main ``d98e8a64``) on seeded random scenarios and stored each scenario with
Megatron's state after every step (tests/data/megatron_diff/*.json.gz, the script's own output). Here
cgbench runs the same scenarios and must reach the same state at every step, with the same outcome:
0 differences. The live comparison, when a Megatron-LM tree is at hand, is
tests/engine/test_megatron_differential.py."""

from __future__ import annotations

import pytest

from tests.helpers import load_script

md = load_script("megatron_diff")

RULES = ("0.19.2", "main")
# what main does differently: registration is idempotent (no double count, no assertion) and resume
# counts cached blocks when the free pool is short
NOT_ON_MAIN = {"not_a_forest", "resume_capped_by_free_pool"}


def _doc(rules: str) -> dict:
    return md.read_json_gz(md.golden_path(rules))


@pytest.mark.slow
@pytest.mark.parametrize("rules", RULES)
def test_cgbench_reaches_megatrons_state_at_every_step_of_the_recorded_runs(rules):
    doc = _doc(rules)
    assert doc["rules"] == rules and doc["ref"] == md.REFS[rules] and len(doc["cases"]) >= 200
    assert md.replay(doc) == []


@pytest.mark.parametrize("rules", RULES)
def test_the_recorded_runs_exercise_every_behaviour(rules):
    """Each behaviour of issue 39, Megatron's defect and the speculative rewind occur in the corpus
    (as Megatron's own code reported them while it was recorded)."""
    seen = {t for case in _doc(rules)["cases"] for t in case["tags"]}
    wanted = set(md.COVERAGE) - (NOT_ON_MAIN if rules == "main" else set())
    assert wanted <= seen, sorted(wanted - seen)
    if rules == "main":
        assert not seen & NOT_ON_MAIN


def test_megatrons_defect_is_reproduced_as_an_engine_assertion():
    cases = [c for c in _doc("0.19.2")["cases"] if "not_a_forest" in c["tags"]]
    assert cases and all(c["outcome"]["outcome"] == "engine_assertion" for c in cases)
    assert md.replay({"cases": cases}) == []


def test_cgbench_routes_every_recorded_request_to_the_coordinators_rank():
    doc = md.read_json_gz(md.routing_golden_path())
    assert len(doc["cases"]) >= 200
    assert {c["case"]["policy"] for c in doc["cases"]} == {"load_balanced", "first_prefix_block", "longest_prefix"}
    assert md.replay_routing(doc) == []
