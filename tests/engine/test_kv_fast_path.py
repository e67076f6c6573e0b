"""The fast engine's one-move KV block boundary (``FastEngine._pause_and_resume_at_once``) leaves the
engine exactly as the full pause -> resume -> evict -> resume pass would, pass by pass: the row order,
the paused rows, every request's blocks and pause count, the free-block count and the anchored rows
with their live events. Each scenario runs twice, with the one-move path and with the full pass only,
and both runs must also equal the step-by-step oracle."""

from __future__ import annotations

import functools
from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import HealthCheck, event, given, settings

from cgbench.config.schema import CGConfig, SloConfig
from cgbench.engine.fast import FastEngine
from cgbench.engine.request import Request
from cgbench.engine.rows import compact_finished, move_pausing_left, pause_swap
from cgbench.pipeline import build_engine, metrics_of
from cgbench.results.metrics import graph_usage_records, request_record
from cgbench.workload.arrivals import ArrivalStream, RequestSpec
from tests.helpers import core_of_class, examples, make_cfg, needs_python_engine, tight_pools

pytestmark = pytest.mark.slow  # oracle comparisons over random configs

NO_ALL_PREFILLS = replace(CGConfig(), all_prefills=False)
EXAMPLES = examples(300)  # the deep profile raises it


@functools.cache
def _engine_classes() -> tuple[type, type]:
    """(the recording fast engine, the same forced to the full pass): Python subclasses of the engine,
    so they exist only when it runs as plain Python (see ``needs_python_engine``)."""

    class _Passes(FastEngine):
        """The fast engine, recording the engine's state after every KV-pressure pass."""

        one_move = True  # False: every pass runs the full pause/resume/evict sequence

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.passes: list[dict] = []
            self.at_once = 0  # passes the one-move path handled

        def _pause_and_resume_at_once(self, needing: list[Request], ran_chunk: Request | None) -> bool:
            if not self.one_move:
                return False
            done = super()._pause_and_resume_at_once(needing, ran_chunk)
            self.at_once += done
            return done

        def _kv_pressure(self, needing: list[Request], ran_chunk: Request | None) -> None:
            needing_ids = sorted(r.id for r in needing)
            super()._kv_pressure(needing, ran_chunk)
            rows = self.rows
            self.passes.append(dict(
                step=self.step, needing=needing_ids, order=[r.id for r in self.order],
                paused=[r.id for r in self.paused], queue=[r.id for r in self.queue],
                blocks={r.id: (r.blocks, r.pauses, r.evictions) for r in self.state.requests},
                free=self.ctx.free_blocks, held=rows.held_blocks, stored=rows.stored_kv,
                paused_events=self.state.stats.paused_events, irregular=sorted(rows.irregular),
                anchors=sorted((row.req.id, row.step, row.gen, row.kv, row.pos) for row in rows.rows.values()),
                live=sorted((step, pos, row.req.id) for step, pos, row in rows.events if pos == row.pos)))


    class _FullPasses(_Passes):
        one_move = False

    return _Passes, _FullPasses


def _everything(eng, state):
    return (metrics_of(eng, state, SloConfig()), graph_usage_records(state.stats, eng.grid.graphs),
            [t.to_json() for t in state.trace], [request_record(r) for r in state.requests])


def _run(cls: type, cfg, reqs: list[RequestSpec]) -> tuple[FastEngine, tuple]:
    eng = core_of_class(cls, cfg, reqs)
    state = eng.run()
    return eng, _everything(eng, state)


def _twins(cfg, reqs: list[RequestSpec]) -> FastEngine:
    """Run ``reqs`` with and without the one-move path and with the oracle; all must agree. Returns the
    one-move run."""
    passes, full_passes = _engine_classes()
    fast, fast_all = _run(passes, cfg, reqs)
    full, full_all = _run(full_passes, cfg, reqs)
    assert full.at_once == 0
    assert fast.passes == full.passes
    assert fast_all == full_all
    oracle_cfg = replace(cfg, engine=replace(cfg.engine, oracle=True))
    oracle = build_engine(oracle_cfg, trace=True, stream=ArrivalStream(reqs))
    assert fast_all == _everything(oracle, oracle.run())
    return fast


def _cfg(**engine):
    base = dict(max_requests=4, max_tokens=64, max_sequence_length=64, block_size=4, kv_blocks=32)
    base.update(engine)
    return make_cfg(kind="transformer", policy="budget", chunked=False, cg=NO_ALL_PREFILLS, **base)


def _specs(*lengths: tuple[int, int]) -> list[RequestSpec]:
    return [RequestSpec(i, 0.0, p, o) for i, (p, o) in enumerate(lengths)]


@needs_python_engine
def test_several_rows_cross_in_one_step_and_swap_to_the_left():
    """Prompts 4, 3, 4, 8 (4-token blocks) admitted together: after step 0 rows 0, 2 and 3 need a block.
    Pausing swaps the staying row 1 with the pausing row 3, and resuming all three puts them back on
    the left in that order: [0, 3, 2, 1]. Each counts a pause; none missed a step."""
    eng = _twins(_cfg(), _specs((4, 6), (3, 6), (4, 6), (8, 6)))
    first = eng.passes[0]
    assert (first["step"], first["needing"], first["order"]) == (0, [0, 2, 3], [0, 3, 2, 1])
    assert {rid: first["blocks"][rid] for rid in range(4)} == {0: (2, 1, 0), 1: (1, 0, 0), 2: (2, 1, 0),
                                                               3: (3, 1, 0)}
    assert first["paused_events"] == 0 and first["paused"] == []
    assert eng.at_once == len(eng.passes)


@needs_python_engine
def test_a_nearly_full_pool_takes_the_one_move_path_when_every_grant_fits_exactly():
    """Prompts 4 and 8 hold 1 + 2 blocks after step 0 and both need one more: a 5-block pool fits
    both grants exactly."""
    eng = _twins(_cfg(kv_blocks=5), _specs((4, 4), (8, 4)))
    first = eng.passes[0]
    assert (first["step"], first["needing"], first["order"], first["free"]) == (0, [0, 1], [0, 1], 0)
    assert eng.at_once == len(eng.passes) and eng.state.stats.paused_events == 0


@needs_python_engine
def test_one_block_short_runs_the_full_pass():
    """The same two requests on a 4-block pool with no paused budget: only request 1 (the right-most
    paused row after the swap) resumes, request 0 is evicted and re-prefilled."""
    eng = _twins(_cfg(kv_blocks=4), _specs((4, 4), (8, 4)))
    first = eng.passes[0]
    assert (first["step"], first["needing"], first["order"], first["queue"]) == (0, [0, 1], [1], [0])
    assert first["blocks"][0] == (0, 1, 1)
    assert eng.state.stats.paused_events == 1 and eng.state.stats.evicted_events == 1


@needs_python_engine
def test_a_boundary_in_the_step_a_row_finishes():
    """Request 0 (prompt 1, two tokens) finishes at step 1, the step request 1 (prompt 7) fills its
    second block: compaction first, then the boundary in one move."""
    eng = _twins(_cfg(), _specs((1, 2), (7, 5)))
    first = eng.passes[0]
    assert (first["step"], first["needing"], first["order"]) == (1, [1], [1])
    assert eng.at_once == len(eng.passes)


@needs_python_engine
def test_a_boundary_in_the_step_a_request_is_admitted():
    """max_tokens 8 holds request 1 (prompt 4) back at step 0; at step 1 it is admitted while request 0
    (prompt 7) fills its block: the row that just joined and the stepped row cross together (the
    joined row's first event goes stale when it is re-anchored)."""
    eng = _twins(_cfg(max_tokens=8), _specs((7, 5), (4, 5)))
    first = eng.passes[0]
    assert (first["step"], first["needing"], first["order"]) == (1, [0, 1], [0, 1])
    assert eng.state.trace[1].real == (5, 1, 1)
    assert eng.at_once == len(eng.passes)


@needs_python_engine
@pytest.mark.parametrize("spec", [1, 2])
def test_several_tokens_per_decode_row(spec):
    """With speculative tokens a row advances 2 or 3 tokens a step and crosses blocks at uneven steps."""
    eng = _twins(_cfg(num_speculative_tokens=spec, max_tokens=64),
                 _specs((2, 20), (3, 17), (5, 30), (8, 9), (1, 25)))
    assert eng.at_once > 0


@needs_python_engine
def test_a_tight_pool_mixes_both_paths():
    """Six requests on a 12-block pool with a paused budget: some boundaries resume at once, others
    pause, and a request is evicted and re-prefilled."""
    eng = _twins(_cfg(kv_blocks=12, paused_blocks=2, max_requests=6),
                 _specs((5, 20), (9, 14), (3, 25), (12, 10), (6, 18), (2, 22)))
    assert 0 < eng.at_once < len(eng.passes)
    assert eng.state.stats.paused_events > 0


@needs_python_engine
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(tight_pools())
def test_one_move_equals_the_full_pass_on_tight_pools(scenario):
    cfg, reqs = scenario
    eng = _twins(cfg, reqs)
    event(f"one move: {'none' if eng.at_once == 0 else 'all' if eng.at_once == len(eng.passes) else 'some'}")


# -- the row moves, every subset of up to seven rows, against the rules spelled out naively ----------

def _naive_compact(active: list[int], finished: set[int]) -> tuple[list[int], list[int]]:
    """Survivors right of the new boundary fill the finished slots left of it, in order."""
    k = len(active) - len(finished)
    holes = [i for i in range(k) if i in finished]
    movers = [active[i] for i in range(k, len(active)) if i not in finished]
    out = list(active)
    for hole, row in zip(holes, movers, strict=True):
        out[hole] = row
    return out[:k], holes


def _naive_pause(active: list[int], pausing: set[int]) -> list[int]:
    """Staying rows left of ``m`` swap pairwise, in order, with pausing rows right of it."""
    m = len(pausing)
    out = list(active)
    left = [i for i in range(m) if i not in pausing]
    right = [i for i in range(m, len(active)) if i in pausing]
    for a, b in zip(left, right, strict=True):
        out[a], out[b] = out[b], out[a]
    return out


def _subsets(n: int):
    for size in range(1, n + 1):
        yield from (set(c) for c in combinations(range(n), size))


def test_row_moves_equal_the_rules_for_every_subset():
    for n in range(1, 8):
        active = [10 + i for i in range(n)]
        for chosen in _subsets(n):
            rows = list(active)
            holes = compact_finished(rows, chosen)
            assert (rows, holes) == _naive_compact(active, chosen)
            moved = list(active)
            move_pausing_left(moved, chosen)
            assert moved == _naive_pause(active, chosen)
            assert pause_swap(active, chosen) == (moved[:len(chosen)], moved[len(chosen):])
            assert sorted(moved[:len(chosen)]) == [active[i] for i in sorted(chosen)]
