"""Limits before the work on every path that builds an engine (issue 44 class 5): rank counts in the
billions, a doctored result's request count re-run by ``explain``, a wait count at 2^63-1 carried to
the output."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.compose import load_config
from cgbench.config.limits import validate_within_limits
from cgbench.config.schema import ConfigError
from tests.helpers import one_error_line

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.parametrize("key", ["ep_size", "dp_size"])
def test_rank_counts_in_the_billions_are_refused_before_any_engine(key) -> None:
    cfg = load_config([])
    with pytest.raises(ConfigError, match=f"engine.{key}: 2,147,483,648 ranks, more than the 1,024-rank limit"):
        validate_within_limits(replace(cfg, engine=replace(cfg.engine, **{key: 2**31})))
    validate_within_limits(replace(cfg, engine=replace(cfg.engine, **{key: 1})))
    from cgbench.config.limits import MAX_RANKS

    assert MAX_RANKS >= 512  # far above any served deployment


@pytest.mark.parametrize("command", [["run"], ["sweep", "seed=1,2"]])
def test_run_and_sweep_refuse_billions_of_ranks_in_one_line(tmp_path, command) -> None:
    r = runner.invoke(app, [*command, "engine.dp_size=3000000000", "--out", str(tmp_path / "out")])
    one_error_line(r, "engine.dp_size", "1,024-rank limit")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_explain_applies_run_s_size_checks_to_the_recorded_config(tmp_path, monkeypatch) -> None:
    run = tmp_path / "run.json"
    r = runner.invoke(app, ["run", "workload.num_requests=20", "policy=budget", "--out", str(run)])
    assert r.exit_code == 0, r.output
    monkeypatch.setenv("CGBENCH_MEMORY_LIMIT_GB", "0.00001")  # 10 KiB: fewer than 20 requests
    r = runner.invoke(app, ["explain", str(run), "--step", "3"])
    one_error_line(r, "run.json: config: workload.num_requests: 20 requests need about", "lower workload.num_requests")


def test_a_state_count_that_a_round_would_carry_past_64_bits_is_refused(tmp_path) -> None:
    doc = json.loads((ROOT / "tests/states/11_3_starvation.json").read_text())
    doc["queue"][0]["cg_wait_iters"] = 2**63 - 1
    state = tmp_path / "hostile_inputs" / "wait.json"
    state.parent.mkdir()
    state.write_text(json.dumps(doc))
    r = runner.invoke(app, ["schedule", str(state), "--format", "json"])
    one_error_line(r, "queue[0].cg_wait_iters: 9,223,372,036,854,775,807 is more than the", "limit of a count")


def test_no_document_is_written_with_an_integer_past_64_bits(tmp_path) -> None:
    from cgbench.safeio import dumps_strict, write_json_atomic

    assert dumps_strict({"ids": ["1234567890123456789012"], "n": 2**63 - 1}) is not None  # digits in a string
    with pytest.raises(ConfigError, match=r"waits\[1\]: an integer that does not fit in 64 bits"):
        dumps_strict({"waits": [1, 2**63]})
    with pytest.raises(ConfigError, match="cannot write"):
        write_json_atomic(tmp_path / "w.json", {"waits": [-(2**63) - 1]})
    assert not list(tmp_path.iterdir())


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=20))
def test_a_document_is_refused_exactly_when_an_integer_is_past_64_bits(doc) -> None:
    """The dump's quick scan for long digit runs (a C pass) misses no wide integer and refuses nothing
    else: the oracle walks the document itself."""
    from cgbench.safeio import dumps_strict, first_wide_int

    wide = first_wide_int(doc)
    try:
        dumps_strict(doc, None)
    except ConfigError as e:
        assert wide is not None and "does not fit in 64 bits" in str(e)
    else:
        assert wide is None
