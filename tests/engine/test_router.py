"""The coordinator's routing policies (cgbench.engine.router), worked by hand from Megatron 0.19.2's
``DataParallelInferenceCoordinator.get_best_data_parallel_rank``."""

from __future__ import annotations

from array import array

import pytest

from cgbench.engine.router import Router
from cgbench.workload.arrivals import RequestSpec


def _spec(i: int, *ids: int, prompt: int = 0) -> RequestSpec:
    """A request whose prompt is one 16-token block per source id (``prompt`` tokens without ids)."""
    return RequestSpec(i, 0.0, prompt or 16 * max(1, len(ids)), 8, array("q", ids) if ids else None)


def _prefix_router(size: int, policy: str, **kw) -> Router:
    """16-token engine blocks over 16-token source blocks: block j's hash follows the ids up to j."""
    return Router(size, policy, block_size=16, source_tokens=16, **kw)


def test_least_loaded_takes_the_fewest_in_flight_and_the_lowest_index_on_a_tie():
    r = Router(3)
    assert r.route(_spec(0), [2, 1, 1]) == 1
    assert r.route(_spec(1), [0, 0, 0]) == 0
    assert r.route(_spec(2), [5, 4, 3]) == 2


def test_round_robin_ignores_the_loads():
    r = Router(3, "round_robin")
    assert [r.route(_spec(i), [9, 0, 0]) for i in range(5)] == [0, 1, 2, 0, 1]


def test_prefix_longest_score_by_hand():
    # request A: blocks of ids [1, 2, 3] -> nothing known: every score is 0.5 * 0 + 0.5 * 4/4, rank 0
    r = _prefix_router(2, "prefix_longest", alpha=0.5, max_requests=4)
    assert r.route(_spec(0, 1, 2, 3), [0, 0]) == 0
    # request B: ids [1, 2, 9, 9] (n = 4 block hashes); the deepest known hash is block 1's (i = 1), on
    # rank 0: match [2/4, 0]; loads [3, 0]: free [1/4, 4/4]; scores 0.5*0.5 + 0.5*0.25 = 0.375 and
    # 0.5*0 + 0.5*1 = 0.5
    b = _spec(1, 1, 2, 9, 9)
    assert r.request_hashes(b)[:2] == r.request_hashes(_spec(0, 1, 2, 3))[:2]
    assert r.match(r.request_hashes(b)) == ([0.5, 0.0], [1, 0])
    assert r.route(b, [3, 0]) == 1
    # with alpha 0.8 the same request scores 0.8*0.5 + 0.2*0.25 = 0.45 and 0.2*1 = 0.2: rank 0
    r8 = _prefix_router(2, "prefix_longest", alpha=0.8, max_requests=4)
    r8.route(_spec(0, 1, 2, 3), [0, 0])
    assert r8.route(_spec(1, 1, 2, 9, 9), [3, 0]) == 0


def test_prefix_longest_ties_go_to_the_most_recent_owner_then_the_lowest_index():
    r = _prefix_router(3, "prefix_longest", alpha=1.0, max_requests=8)
    assert r.route(_spec(0, 7), [0, 0, 0]) == 0
    assert r.route(_spec(1, 8), [0, 1, 0]) == 0  # nothing matches: all scores 0, lowest index
    r._hashes[r.request_hashes(_spec(0, 7))[0]][2] = 5  # also on rank 2, assigned later (stamp 5 > 1)
    assert r.route(_spec(2, 7), [0, 0, 0]) == 2  # both match 1.0: the more recent assignment wins


def test_prefix_first_block_matches_on_the_first_hash_only():
    r = _prefix_router(2, "prefix_first_block", alpha=0.5, max_requests=4)
    assert r.route(_spec(0, 1, 2, 3), [0, 0]) == 0
    assert r.seen_blocks(0) == 1  # only the first hash is recorded, as Megatron truncates the list
    # the first hash is known on rank 0: match [1, 0]; free [2/4, 4/4]: 0.5 + 0.25 = 0.75 > 0.5
    assert r.route(_spec(1, 1, 5, 6), [2, 0]) == 0
    # a different first hash: no match, the free capacity decides
    assert r.route(_spec(2, 4, 2, 3), [2, 0]) == 1


def test_a_request_without_hashes_routes_least_loaded():
    r = _prefix_router(2, "prefix_longest", alpha=0.9, max_requests=4)
    r.route(_spec(0, 1), [0, 0])
    assert r.route(_spec(1, 1, prompt=15), [1, 0]) == 1  # shorter than a block: no hash
    assert r.route(_spec(2, 1), [1, 0]) == 0  # with its hash it follows it (0.9 + 0.1*3/4 > 0.1)


def test_a_prompt_without_ids_has_hashes_of_its_own_and_matches_nothing():
    """The coordinator hashes every complete block of a prompt; blocks without source ids hold content
    only their request has: they match no rank, and the free capacity decides (here not the load:
    both ranks are past max_requests, free 0, so the lowest index wins where least-loaded takes 1)."""
    r = _prefix_router(2, "prefix_longest", alpha=0.5, max_requests=2)
    assert len(r.request_hashes(_spec(0, prompt=48))) == 3
    assert r.route(_spec(0, prompt=48), [5, 3]) == 0


def test_free_capacity_is_clamped_at_zero():
    r = _prefix_router(2, "prefix_longest", alpha=0.5, max_requests=2)
    r.route(_spec(0, 3), [0, 0])  # rank 0
    # rank 0 over its max_requests (free 0, match 1: 0.5) against rank 1 (free 2/2, match 0: 0.5): tie,
    # then recency: rank 0 holds the hash (stamp 1), rank 1 none
    assert r.route(_spec(1, 3), [5, 0]) == 0


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown routing"):
        Router(2, "fastest")


def test_a_crashed_rank_is_not_routed_to():
    alive = [False, True, True]
    assert Router(3).route(_spec(0), [0, 1, 1], alive) == 1
    rr = Router(3, "round_robin")
    assert [rr.route(_spec(i), [0, 0, 0], alive) for i in range(4)] == [1, 2, 1, 2]
    p = _prefix_router(3, "prefix_longest", alpha=1.0, max_requests=4)
    p.route(_spec(0, 5), [0, 0, 0])  # rank 0 holds hash 5
    assert p.route(_spec(1, 5), [0, 0, 0], alive) == 1  # its match is moot: rank 0 is gone
