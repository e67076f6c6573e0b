"""Workload generation: arrival processes, length laws, determinism, streams, traces and presets.

Statistical checks use a fixed seed and a tolerance of 5 standard errors of the estimate, so they
are deterministic and would still pass for almost any seed. Exact means of the rounded, clipped
laws come from their CDFs (an oracle independent of the sampler).
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.config.schema import (
    ArrivalConfig,
    BenchConfig,
    ConfigError,
    DistConfig,
    EngineConfig,
    WorkloadConfig,
    check_dist,
    validate,
)
from cgbench.workload.arrivals import STREAM_BATCH, ArrivalStream, RequestSpec
from cgbench.workload.sources import arrival_times, lengths_drawer, times_drawer
from cgbench.workload.stream import (
    generate_requests,
    make_stream,
    read_trace,
    sample_lengths,
    stream_rng,
    write_trace,
)
from tests.helpers import examples

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "conf" / "workload").glob("*.yaml"))
N = 20_000


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def rounded_clipped_mean(cdf, lo: int, hi: int) -> float:
    """E[clip(floor(X + 0.5), lo, hi)] for a continuous X with CDF ``cdf``."""
    mean = lo * cdf(lo + 0.5) + hi * (1 - cdf(hi - 0.5))
    return mean + sum(k * (cdf(k + 0.5) - cdf(k - 0.5)) for k in range(lo + 1, hi))


def assert_mean_close(samples: list[float], expected: float, k: float = 5.0) -> None:
    se = statistics.stdev(samples) / math.sqrt(len(samples))
    assert abs(statistics.fmean(samples) - expected) <= k * se + 1e-12, (statistics.fmean(samples), expected)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs)


def workload(**kw) -> WorkloadConfig:
    return WorkloadConfig(**kw)


CHAT = DistConfig(dist="lognormal", mean=161, sigma=1.0, min=4, max=1024)


# ---------------------------------------------------------------- arrival processes


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    times = arrival_times(ArrivalConfig(process="poisson", rate=4.0), N + 1, random.Random(1))
    g = gaps(times)
    assert times[0] == 0.0 and all(x >= 0 for x in g)
    assert_mean_close(g, 0.25)
    # CV of an exponential is 1; the standard error of a sample CV here is ~ 1/sqrt(N) ~ 0.007.
    assert abs(cv(g) - 1.0) < 0.05


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_follow_vllm_definition(burstiness):
    rate = 10.0
    times = arrival_times(ArrivalConfig(process="gamma", rate=rate, burstiness=burstiness), N + 1,
                          random.Random(2))
    g = gaps(times)
    assert times[0] == 0.0
    assert_mean_close(g, 1 / rate)
    assert cv(g) == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)


def test_gamma_is_not_rescaled_to_n_over_rate():
    # vLLM's newer code forces the last arrival to N/rate exactly; ours is the plain renewal process.
    times = arrival_times(ArrivalConfig(process="gamma", rate=2.0, burstiness=0.5), 100, random.Random(3))
    assert times[-1] != pytest.approx(100 / 2.0, abs=1e-9)
    assert times[-1] != pytest.approx(99 / 2.0, abs=1e-9)


def test_constant_arrivals_are_exact():
    times = arrival_times(ArrivalConfig(process="constant", rate=8.0), 1000, random.Random(0))
    assert times == [i / 8.0 for i in range(1000)]
    assert times[1] == 0.125 and times[999] == 999 / 8


@pytest.mark.parametrize("process", ["all_at_once", "closed_loop"])
def test_zero_time_processes(process):
    assert arrival_times(ArrivalConfig(process=process, concurrency=2), 5, random.Random(0)) == [0.0] * 5


@pytest.mark.parametrize("process", ["poisson", "gamma", "constant"])
def test_open_loop_processes_need_a_positive_rate(process):
    w = workload(arrival=ArrivalConfig(process=process, rate=0.0))
    with pytest.raises(ConfigError, match="workload.arrival.rate"):
        validate(BenchConfig(workload=w))  # the one validator; the stream trusts it


# ---------------------------------------------------------------- length distributions


def test_fixed_is_constant_and_clipped():
    assert sample_lengths(DistConfig(dist="fixed", value=77), 5, random.Random(0)) == [77] * 5
    assert sample_lengths(DistConfig(dist="fixed", value=500, max=300), 3, random.Random(0)) == [300] * 3


def test_uniform_covers_every_integer_evenly():
    d = DistConfig(dist="uniform", min=10, max=19)
    xs = sample_lengths(d, N, random.Random(4))
    assert set(xs) == set(range(10, 20))
    assert_mean_close(xs, 14.5)
    for v in range(10, 20):  # each count ~ Binomial(N, 0.1): sd ~ 42
        assert abs(xs.count(v) - N / 10) < 5 * math.sqrt(N * 0.1 * 0.9)


def test_normal_matches_rounded_clipped_oracle():
    d = DistConfig(dist="normal", mean=100, std=50, min=60, max=200)
    xs = sample_lengths(d, N, random.Random(5))
    assert min(xs) == 60 and max(xs) == 200
    expected = rounded_clipped_mean(lambda x: _phi((x - 100) / 50), 60, 200)
    assert_mean_close(xs, expected)
    assert expected > 100  # clipping at 60 (0.8 sd) lifts the mean more than clipping at 200 lowers it


def test_normal_with_zero_std_is_the_rounded_mean():
    assert sample_lengths(DistConfig(dist="normal", mean=41.6, std=0), 4, random.Random(0)) == [42] * 4


def test_lognormal_mean_is_the_distribution_mean():
    d = DistConfig(dist="lognormal", mean=300, sigma=0.8, min=1, max=10**6)
    xs = sample_lengths(d, N, random.Random(6))
    assert_mean_close(xs, 300)
    mu = math.log(300) - 0.8**2 / 2
    assert statistics.median(xs) == pytest.approx(math.exp(mu), rel=0.03)


def test_lognormal_clipped_matches_oracle():
    xs = sample_lengths(CHAT, N, random.Random(7))
    mu = math.log(CHAT.mean) - CHAT.sigma**2 / 2

    def cdf(x):
        return _phi((math.log(x) - mu) / CHAT.sigma) if x > 0 else 0.0

    assert max(xs) == CHAT.max and min(xs) >= CHAT.min
    assert_mean_close(xs, rounded_clipped_mean(cdf, CHAT.min, CHAT.max))


def test_histogram_matches_enumerated_pmf():
    # bins [1,4) [4,8) [8,12]: the middle one has weight 0; the last bin is closed.
    d = DistConfig(dist="histogram", bins=[1, 4, 8, 12], weights=[1.0, 0.0, 3.0], min=1, max=100)
    pmf = {v: 0.25 / 3 for v in range(1, 4)} | {v: 0.75 / 5 for v in range(8, 13)}
    xs = sample_lengths(d, N, random.Random(8))
    assert set(xs) == set(pmf)
    for v, p in pmf.items():
        assert abs(xs.count(v) / N - p) < 5 * math.sqrt(p * (1 - p) / N)
    assert_mean_close(xs, sum(v * p for v, p in pmf.items()))


def test_histogram_is_clipped():
    d = DistConfig(dist="histogram", bins=[1, 100, 200], weights=[1.0, 1.0], min=50, max=150)
    xs = sample_lengths(d, 2000, random.Random(9))
    assert min(xs) == 50 and max(xs) == 150
    # everything from [1, 50) collapses to 50: about a quarter of the samples
    assert abs(xs.count(50) / 2000 - 50 / 200) < 0.05


dists = st.one_of(
    st.builds(DistConfig, dist=st.just("fixed"), value=st.integers(1, 5000)),
    st.builds(DistConfig, dist=st.just("uniform")),
    st.builds(DistConfig, dist=st.just("normal"), mean=st.floats(1, 4000), std=st.floats(0, 3000)),
    st.builds(DistConfig, dist=st.just("lognormal"), mean=st.floats(1, 4000), sigma=st.floats(0.01, 4)),
    st.builds(DistConfig, dist=st.just("histogram"), bins=st.just([1, 30, 900, 4000]),
              weights=st.just([0.2, 0.5, 0.3])),
)


@settings(max_examples=examples(60, stretch=False))
@given(d=dists, lo=st.integers(1, 300), span=st.integers(0, 3000), seed=st.integers(0, 2**32))
def test_every_distribution_stays_in_bounds(d, lo, span, seed):
    d = dataclasses.replace(d, min=lo, max=lo + span)
    xs = sample_lengths(d, 50, random.Random(seed))
    assert len(xs) == 50
    assert all(type(x) is int and lo <= x <= lo + span for x in xs)


# ---------------------------------------------------------------- the draws are random.Random's own


def reference_lengths(d: DistConfig, n: int, rng: random.Random) -> list[int]:
    """The length laws written with random.Random's own methods, one call per draw (the oracle the
    batch drawers must equal value for value and random() for random())."""
    lo, hi = d.min, d.max

    def round_clip(x: float) -> int:
        x = min(max(x, float(lo)), float(hi))
        return min(max(math.floor(x + 0.5), lo), hi)

    if d.dist == "fixed":
        return [min(max(d.value, lo), hi)] * n
    if d.dist == "uniform":
        return [rng.randint(lo, hi) for _ in range(n)]
    if d.dist == "normal":
        return [round_clip(rng.normalvariate(d.mean, d.std)) for _ in range(n)]
    if d.dist == "lognormal":
        mu = math.log(d.mean) - d.sigma**2 / 2
        return [round_clip(math.exp(min(rng.normalvariate(mu, d.sigma), 700.0))) for _ in range(n)]
    cum = [sum(d.weights[:k + 1]) for k in range(len(d.weights))]
    out = []
    for _ in range(n):
        u = rng.random() * cum[-1]
        k = min(sum(1 for c in cum if c <= u), len(cum) - 1)  # bisect_right, by counting
        top = d.bins[k + 1] if k == len(cum) - 1 else d.bins[k + 1] - 1
        out.append(min(max(rng.randint(d.bins[k], top), lo), hi))
    return out


def reference_times(a: ArrivalConfig, n: int, rng: random.Random) -> list[float]:
    t, out = 0.0, []
    for i in range(n):
        if i:
            if a.process == "poisson":
                t += rng.expovariate(a.rate)
            elif a.process == "gamma":
                t += rng.gammavariate(a.burstiness, 1.0 / (a.rate * a.burstiness))
        out.append(i / a.rate if a.process == "constant" else t)
    return out


oracle_dists = st.one_of(
    st.builds(DistConfig, dist=st.just("fixed"), value=st.integers(1, 5000)),
    st.builds(DistConfig, dist=st.just("uniform")),
    st.builds(DistConfig, dist=st.just("normal"), mean=st.floats(1, 4000) | st.integers(1, 4000),
              std=st.floats(0, 3000) | st.integers(0, 3000)),
    st.builds(DistConfig, dist=st.just("normal"), mean=st.integers(1, 400).map(lambda k: k + 0.5),
              std=st.just(0.0)),  # every draw a tie: rounded half up
    st.builds(DistConfig, dist=st.just("lognormal"), mean=st.floats(1, 1e6), sigma=st.floats(0.01, 30)),
    st.builds(DistConfig, dist=st.just("histogram"),
              bins=st.lists(st.integers(1, 3000), min_size=2, max_size=7, unique=True).map(sorted),
              weights=st.just([])),
)


@pytest.mark.slow  # an oracle comparison over 400 random draws
@settings(max_examples=examples(400, stretch=False))
@given(d=oracle_dists, lo=st.integers(1, 300), span=st.integers(0, 5000) | st.sampled_from([2**52, 2**60]),
       seed=st.integers(0, 2**64), cuts=st.lists(st.integers(0, 40), max_size=6), wseed=st.integers(0, 99))
def test_length_draws_equal_random_randoms_own(d, lo, span, seed, cuts, wseed):
    """Over many laws, bounds (huge ones included) and seeds, the batch drawers give random.Random's own
    values and leave the generator where it leaves it (so the same number of draws), however the
    sequence is cut into batches."""
    if d.dist == "histogram":
        d = dataclasses.replace(d, weights=[random.Random(wseed + k).choice([0.0, 0.5, 1.0, 3.0])
                                            for k in range(len(d.bins) - 1)])
        if sum(d.weights) == 0:
            d = dataclasses.replace(d, weights=[1.0] * len(d.weights))
    d = dataclasses.replace(d, min=lo, max=lo + span)
    n = sum(cuts) + 17
    mine, theirs = random.Random(seed), random.Random(seed)
    draw = lengths_drawer(d, mine)
    got = [x for k in cuts for x in draw(k)] + draw(17)
    assert got == reference_lengths(d, n, theirs)
    assert all(type(x) is int for x in got)
    assert mine.getstate() == theirs.getstate()


@settings(max_examples=examples(200, stretch=False))
@given(process=st.sampled_from(["poisson", "gamma", "constant", "all_at_once"]),
       rate=st.floats(1e-3, 1e4) | st.integers(1, 100), burstiness=st.floats(0.05, 20),
       seed=st.integers(0, 2**64), cuts=st.lists(st.integers(0, 40), max_size=6))
def test_arrival_draws_equal_random_randoms_own(process, rate, burstiness, seed, cuts):
    a = ArrivalConfig(process=process, rate=rate, burstiness=burstiness)
    n = sum(cuts) + 9
    mine, theirs = random.Random(seed), random.Random(seed)
    draw = times_drawer(a, mine)
    got = [t for k in cuts for t in draw(k)] + draw(9)
    assert got == reference_times(a, n, theirs)  # == on floats: bit for bit (no NaN here)
    assert mine.getstate() == theirs.getstate()


def test_the_normal_draw_uses_random_randoms_constant():
    from cgbench.workload.lengths import _NV_MAGIC

    assert _NV_MAGIC == random.NV_MAGICCONST


def test_invalid_distribution_is_a_config_error():
    with pytest.raises(ConfigError, match="workload.output_len.dist"):
        check_dist(DistConfig(dist="zipf"), "workload.output_len")
    with pytest.raises(ConfigError, match="bins"):
        check_dist(DistConfig(dist="histogram", bins=[1, 2], weights=[1.0, 1.0]), "workload.output_len")


# ---------------------------------------------------------------- seeds and independence


POISSON = ArrivalConfig(process="poisson", rate=5.0)


@pytest.mark.parametrize("arrival", [POISSON, ArrivalConfig(process="gamma", rate=5.0, burstiness=0.3),
                                     ArrivalConfig(process="constant", rate=5.0), ArrivalConfig()])
def test_same_seed_same_requests_different_seed_different(arrival):
    w = workload(num_requests=200, arrival=arrival, prompt_len=CHAT,
                 output_len=DistConfig(dist="uniform", min=1, max=999))
    a, b, c = generate_requests(w, 11), generate_requests(w, 11), generate_requests(w, 12)
    assert a == b
    assert a != c
    assert [r.id for r in a] == list(range(200))
    assert all(x.arrival_s <= y.arrival_s for x, y in zip(a, a[1:], strict=False))


def test_fresh_interpreter_gives_the_same_requests():
    # Guards against seeding through Python's per-process salted hash().
    code = ("from cgbench.workload.stream import generate_requests; from cgbench.config.schema import *; "
            "w = WorkloadConfig(num_requests=5, arrival=ArrivalConfig(process='poisson', rate=2.0), "
            "prompt_len=DistConfig(dist='uniform', min=1, max=10**6)); "
            "print([(r.arrival_s, r.prompt_tokens) for r in generate_requests(w, 3)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    w = workload(num_requests=5, arrival=ArrivalConfig(process="poisson", rate=2.0),
                 prompt_len=DistConfig(dist="uniform", min=1, max=10**6))
    assert out.stdout.strip() == str([(r.arrival_s, r.prompt_tokens) for r in generate_requests(w, 3)])


def test_output_distribution_does_not_change_prompts_or_arrivals():
    base = workload(num_requests=300, arrival=POISSON, prompt_len=CHAT,
                    output_len=DistConfig(dist="fixed", value=10))
    other = dataclasses.replace(base, output_len=DistConfig(dist="normal", mean=300, std=100, min=1, max=900))
    a, b = generate_requests(base, 5), generate_requests(other, 5)
    assert [(r.arrival_s, r.prompt_tokens) for r in a] == [(r.arrival_s, r.prompt_tokens) for r in b]
    assert [r.output_tokens for r in a] != [r.output_tokens for r in b]


def test_arrival_process_does_not_change_lengths():
    base = workload(num_requests=300, arrival=POISSON, prompt_len=CHAT,
                    output_len=DistConfig(dist="uniform", min=1, max=999))
    other = dataclasses.replace(base, arrival=ArrivalConfig(process="gamma", rate=1.0, burstiness=0.2))
    lengths = [[(r.prompt_tokens, r.output_tokens) for r in generate_requests(w, 5)] for w in (base, other)]
    assert lengths[0] == lengths[1]


def test_prompt_and_output_streams_are_independent():
    # Same law for both: with independent streams the two sequences differ and are uncorrelated.
    d = DistConfig(dist="uniform", min=1, max=1000)
    reqs = generate_requests(workload(num_requests=N, prompt_len=d, output_len=d), 0)
    p, o = [r.prompt_tokens for r in reqs], [r.output_tokens for r in reqs]
    assert p != o
    assert abs(statistics.correlation(p, o)) < 5 / math.sqrt(N)


def test_first_k_requests_do_not_depend_on_n():
    w = workload(num_requests=50, arrival=POISSON, prompt_len=CHAT, output_len=CHAT)
    assert generate_requests(w, 9) == generate_requests(dataclasses.replace(w, num_requests=120), 9)[:50]


def test_stream_rng_streams_differ():
    draws = {name: stream_rng(0, name).random() for name in ("arrival", "prompt_len", "output_len")}
    assert len(set(draws.values())) == 3
    assert stream_rng(0, "arrival").random() == draws["arrival"]


# ---------------------------------------------------------------- the stream


def naive_due(specs: list[RequestSpec], returned: set[int], now: float) -> list[RequestSpec]:
    return sorted((s for s in specs if s.arrival_s <= now and s.id not in returned), key=lambda s: s.id)


@settings(max_examples=examples(80, stretch=False))
@given(arrivals=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 7.25]), min_size=0, max_size=25),
       queries=st.lists(st.floats(0, 10), max_size=10))
def test_open_loop_stream_matches_naive_filter(arrivals, queries):
    specs = [RequestSpec(i, t, 1, 1) for i, t in enumerate(sorted(arrivals))]
    stream = ArrivalStream(specs)
    returned: set[int] = set()
    assert stream.total == len(specs)
    for now in sorted(queries) + [math.inf]:
        left = [s.arrival_s for s in specs if s.id not in returned]
        assert stream.next_arrival_s() == (min(left) if left else None)
        stream.on_complete(now)  # no effect on an open loop
        expected = naive_due(specs, returned, now)
        assert stream.pop_due(now) == expected
        returned |= {s.id for s in expected}
        assert stream.exhausted() == (len(returned) == len(specs))
    assert stream.exhausted() and stream.next_arrival_s() is None


def test_closed_loop_worked_example():
    specs = [RequestSpec(i, 0.0, 10 + i, 5) for i in range(5)]
    stream = ArrivalStream(specs, concurrency=2)
    assert stream.total == 5 and stream.concurrency == 2
    assert stream.pop_due(0.0) == specs[:2]
    assert stream.next_arrival_s() is None and not stream.exhausted()
    stream.on_complete(1.5)
    assert stream.next_arrival_s() == 1.5
    assert stream.pop_due(1.4) == []
    assert stream.pop_due(1.5) == [dataclasses.replace(specs[2], arrival_s=1.5)]
    stream.on_complete(2.0)
    stream.on_complete(2.0)
    assert [(s.id, s.arrival_s) for s in stream.pop_due(3.0)] == [(3, 2.0), (4, 2.0)]
    assert stream.exhausted()
    stream.on_complete(4.0)  # nothing left to release
    assert stream.next_arrival_s() is None and stream.pop_due(9.0) == []


def test_closed_loop_keeps_concurrency_requests_in_flight():
    # Drive the stream with a toy engine: request i takes output_tokens * 0.01 s once it arrives.
    w = workload(num_requests=40, arrival=ArrivalConfig(process="closed_loop", concurrency=6),
                 output_len=DistConfig(dist="uniform", min=1, max=50))
    stream = make_stream(w, 1)
    in_flight: dict[int, float] = {}  # id -> finish time
    now, seen = 0.0, []
    while not stream.exhausted() or in_flight:
        for s in stream.pop_due(now):
            assert s.arrival_s == now
            in_flight[s.id] = now + s.output_tokens * 0.01
            seen.append(s.id)
        remaining = stream.total - len(seen)
        assert len(in_flight) == min(6, len(in_flight) + remaining)
        rid = min(in_flight, key=lambda i: (in_flight[i], i))
        now = in_flight.pop(rid)
        stream.on_complete(now)
    assert seen == list(range(40))


def test_closed_loop_concurrency_above_total_releases_everything():
    w = workload(num_requests=3, arrival=ArrivalConfig(process="closed_loop", concurrency=8))
    stream = make_stream(w, 0)
    assert [s.id for s in stream.pop_due(0.0)] == [0, 1, 2] and stream.exhausted()


def test_stream_rejects_duplicate_ids():
    with pytest.raises(ValueError, match="unique"):
        ArrivalStream([RequestSpec(0, 0.0, 1, 1), RequestSpec(0, 1.0, 1, 1)])


# ---------------------------------------------------------------- traces


@pytest.mark.parametrize("ext", ["jsonl", "csv"])
def test_trace_round_trip(tmp_path, ext):
    w = workload(num_requests=300, arrival=ArrivalConfig(process="gamma", rate=3.0, burstiness=0.5),
                 prompt_len=CHAT, output_len=DistConfig(dist="uniform", min=1, max=4000))
    specs = generate_requests(w, 21)
    path = tmp_path / "sub" / f"t.{ext}"
    write_trace(path, specs)
    assert read_trace(path) == specs
    assert read_trace(str(path)) == specs


def test_example_traces_agree():
    jsonl = read_trace(ROOT / "examples" / "traces" / "small.jsonl")
    assert read_trace(ROOT / "examples" / "traces" / "small.csv") == jsonl
    assert 40 <= len(jsonl) <= 60
    assert jsonl[0].arrival_s == 0.0


def test_trace_is_sorted_stably_and_ids_follow_arrival(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 2, "prompt_tokens": 1, "output_tokens": 1}\n'
                    '\n'
                    '{"arrival_s": 1, "prompt_tokens": 2, "output_tokens": 1, "extra": "x"}\n'
                    '{"arrival_s": 2, "prompt_tokens": 3, "output_tokens": 1}\n'
                    '{"arrival_s": 1, "prompt_tokens": 4.0, "output_tokens": "5"}\n')
    got = read_trace(path)
    assert [(s.id, s.arrival_s, s.prompt_tokens) for s in got] == [(0, 1.0, 2), (1, 1.0, 4), (2, 2.0, 1),
                                                                     (3, 2.0, 3)]
    assert got[1].output_tokens == 5


def test_csv_columns_in_any_order_with_bom_and_extras(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\ufeffoutput_tokens, note ,prompt_tokens,arrival_s\n7,hi,30,0.5\n\n9,,31,0.25\n",
                    encoding="utf-8")
    assert read_trace(path) == [RequestSpec(0, 0.25, 31, 9), RequestSpec(1, 0.5, 30, 7)]


def test_trace_replaces_generated_requests(tmp_path, monkeypatch):
    specs = [RequestSpec(i, 0.4 * i, 100 + i, 10 + i) for i in range(7)]
    write_trace(tmp_path / "t.csv", specs)
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the current directory
    w = workload(num_requests=3, trace="t.csv", time_scale=0.5, arrival=POISSON,
                 prompt_len=DistConfig(dist="fixed", value=1))
    got = generate_requests(w, 0)
    assert [(s.arrival_s, s.prompt_tokens, s.output_tokens) for s in got] == \
        [(0.4 * i * 0.5, 100 + i, 10 + i) for i in range(7)]
    stream = make_stream(w, 0)
    assert stream.total == 7 and [s.id for s in stream.pop_due(0.4)] == [0, 1, 2]


def test_trace_with_closed_loop_replays_lengths_at_concurrency(tmp_path):
    specs = [RequestSpec(i, 5.0 * i, 100 + i, 10) for i in range(4)]
    write_trace(tmp_path / "t.jsonl", specs)
    w = workload(trace=str(tmp_path / "t.jsonl"), arrival=ArrivalConfig(process="closed_loop", concurrency=2))
    stream = make_stream(w, 0)
    first = stream.pop_due(0.0)
    assert [(s.id, s.arrival_s, s.prompt_tokens) for s in first] == [(0, 0.0, 100), (1, 0.0, 101)]
    stream.on_complete(0.3)
    assert [(s.id, s.arrival_s) for s in stream.pop_due(0.3)] == [(2, 0.3)]


HEADER = "arrival_s,prompt_tokens,output_tokens\n"
OK = '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n'


@pytest.mark.parametrize("name, text, message", [
    ("bad.jsonl", OK + OK + '{"arrival_s": 1, "prompt_tokens": "abc", "output_tokens": 1}\n',
     "bad.jsonl:3: prompt_tokens: 'abc' is not a positive integer"),
    ("bad.jsonl", OK + '{"arrival_s": 1, "prompt_tokens": 2,\n', "bad.jsonl:2: invalid JSON"),
    ("bad.jsonl", OK + '{"arrival_s": 1, "prompt_tokens": 2}\n', "bad.jsonl:2: output_tokens: missing"),
    ("bad.jsonl", '{"arrival_s": -1, "prompt_tokens": 2, "output_tokens": 3}\n',
     "bad.jsonl:1: arrival_s: -1 is not a non-negative number"),
    ("bad.jsonl", '{"arrival_s": NaN, "prompt_tokens": 2, "output_tokens": 3}\n',
     "bad.jsonl:1: arrival_s: nan"),
    ("bad.jsonl", '{"arrival_s": 0, "prompt_tokens": 2, "output_tokens": 0}\n',
     "bad.jsonl:1: output_tokens: 0 is not a positive integer"),
    ("bad.jsonl", '{"arrival_s": 0, "prompt_tokens": 12.5, "output_tokens": 1}\n',
     "bad.jsonl:1: prompt_tokens: 12.5 is not a positive integer"),
    ("bad.jsonl", '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 1}\n',
     "bad.jsonl:1: prompt_tokens: True is not a positive integer"),
    ("bad.jsonl", "\n" + "[0, 1, 1]\n", "bad.jsonl:2: expected a JSON object"),
    ("bad.jsonl", "", "has no requests"),
    ("bad.jsonl", "\n  \n", "has no requests"),
    ("bad.csv", HEADER, "has no requests"),
    ("bad.csv", "", "has no requests"),
    ("bad.csv", "arrival_s,prompt_tokens\n0,1\n", "bad.csv:1: missing column 'output_tokens'"),
    ("bad.csv", HEADER + "0,1,1\n\nsoon,1,1\n", "bad.csv:4: arrival_s: 'soon' is not a non-negative number"),
    ("bad.csv", HEADER + "0,1,1\n0,1\n", "bad.csv:3: output_tokens: missing value"),
    ("bad.csv", HEADER + "0,-4,1\n", "bad.csv:2: prompt_tokens: '-4' is not a positive integer"),
    ("bad.csv", HEADER + "inf,4,1\n", "bad.csv:2: arrival_s: 'inf'"),
    ("bad.txt", HEADER + "0,1,1\n", "unknown trace format '.txt'"),
])
def test_malformed_traces_name_file_line_and_field(tmp_path, monkeypatch, name, text, message):
    (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        read_trace(name)
    assert message in str(err.value)


def test_missing_trace_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        read_trace(tmp_path / "absent.jsonl")
    w = workload(trace=str(tmp_path / "absent.csv"))
    with pytest.raises(ConfigError, match="workload.trace"):
        make_stream(w, 0)


def test_undecodable_trace(tmp_path):
    (tmp_path / "t.csv").write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(ConfigError, match="cannot read"):
        read_trace(tmp_path / "t.csv")


# ---------------------------------------------------------------- presets


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def load_preset(path: Path) -> WorkloadConfig:
    raw = yaml.safe_load(path.read_text())
    raw.pop("defaults", None)  # a trace preset chooses the engine limits its trace needs
    assert set(raw) <= _fields(WorkloadConfig), path.name
    nested = {"arrival": ArrivalConfig, "prompt_len": DistConfig, "output_len": DistConfig}
    kw = dict(raw)
    for key, cls in nested.items():
        if key in raw:
            assert set(raw[key]) <= _fields(cls), f"{path.name}: {key}"
            kw[key] = cls(**raw[key])
    return WorkloadConfig(**kw)


def drain(stream: ArrivalStream) -> list[RequestSpec]:
    out, now = [], 0.0
    while not stream.exhausted():
        t = stream.next_arrival_s()
        if t is None:  # closed loop waiting for completions
            stream.on_complete(now)
            continue
        now = max(now, t)
        out += stream.pop_due(now)
    return out


def test_all_expected_presets_exist():
    names = {p.stem for p in PRESETS}
    assert {"default", "chat", "rag", "decode_heavy", "bimodal", "burst", "small", "trace"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_loads_and_streams(path, monkeypatch):
    assert path.read_text().startswith("#"), "each preset starts with a comment saying what it models"
    w = load_preset(path)
    assert w.name == path.stem
    validate(BenchConfig(workload=w))
    monkeypatch.chdir(ROOT)
    stream = make_stream(w, 0)
    got = drain(stream)
    assert len(got) == stream.total
    assert sorted(s.id for s in got) == list(range(stream.total))
    if not w.trace:
        assert stream.total == w.num_requests
    # every request fits the max_sequence_length of the engine the preset composes with
    from cgbench.config.compose import load_config

    msl = load_config([f"workload={path.stem}"]).engine.max_sequence_length
    assert all(s.prompt_tokens + s.output_tokens <= msl for s in got)
    if not w.trace:
        for d in (w.prompt_len, w.output_len):
            assert d.max < 10**6, "presets state their length bounds"
        assert w.prompt_len.max + w.output_len.max <= msl


def test_preset_roles():
    p = {path.stem: load_preset(path) for path in PRESETS}
    engine = EngineConfig()
    assert p["default"].arrival.process == "all_at_once"
    assert p["default"].num_requests >= 2 * engine.max_requests
    assert p["decode_heavy"].num_requests >= engine.max_requests
    assert 8 <= p["small"].num_requests <= 16 and p["small"].arrival.process == "all_at_once"
    assert p["chat"].arrival.process == "poisson"
    assert p["burst"].arrival.process == "gamma" and p["burst"].arrival.burstiness < 1
    assert p["bimodal"].prompt_len.dist == "histogram"
    assert p["rag"].prompt_len.mean > 4 * p["chat"].prompt_len.mean
    dh = p["decode_heavy"]
    assert dh.output_len.mean > 4 * (dh.prompt_len.min + dh.prompt_len.max) / 2  # uniform prompt mean
    assert p["trace"].trace == "examples/traces/small.jsonl"


@pytest.mark.slow
def test_chat_scales_to_20k_requests():
    w = dataclasses.replace(load_preset(ROOT / "conf" / "workload" / "chat.yaml"), num_requests=20_000)
    got = drain(make_stream(w, 0))
    assert len(got) == 20_000
    span = got[-1].arrival_s
    assert span == pytest.approx(20_000 / w.arrival.rate, rel=0.05)


def test_workload_modules_do_not_import_torch():
    code = ("import sys, cgbench.workload.stream, cgbench.workload.arrivals, cgbench.workload.lengths, "
            "cgbench.workload.trace; "
            "sys.exit('torch' in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("arrival", [ArrivalConfig(process="poisson", rate=50.0),
                                     ArrivalConfig(process="gamma", rate=50.0, burstiness=0.3),
                                     ArrivalConfig(process="constant", rate=40.0),
                                     ArrivalConfig(process="all_at_once")])
@pytest.mark.parametrize("lengths", [DistConfig(dist="lognormal", mean=100, sigma=1.0, min=4, max=900),
                                     DistConfig(dist="uniform", min=3, max=70),
                                     DistConfig(dist="normal", mean=40, std=9, min=1, max=90),
                                     DistConfig(dist="fixed", value=17),
                                     DistConfig(dist="histogram", bins=[1, 10, 100, 400], weights=[1, 0, 2])])
def test_generated_stream_is_drawn_lazily_with_the_same_requests(arrival, lengths):
    """make_stream draws a generated open-loop workload one request at a time (OrderedStream); it hands
    the engine exactly what ArrivalStream over generate_requests does, at every query time."""
    from cgbench.workload.arrivals import OrderedStream

    w = WorkloadConfig(num_requests=300, arrival=arrival, prompt_len=lengths, output_len=lengths)
    lazy, eager = make_stream(w, 5), ArrivalStream(generate_requests(w, 5))
    assert isinstance(lazy, OrderedStream) and lazy.total == eager.total == 300
    now = 0.0
    while not eager.exhausted():
        assert lazy.next_arrival_s() == eager.next_arrival_s()
        assert lazy.pop_due(now) == eager.pop_due(now)
        now += 0.05
    assert lazy.exhausted() and lazy.next_arrival_s() is None and lazy.pop_due(1e9) == []


def test_ordered_stream_refuses_requests_out_of_order():
    from cgbench.workload.arrivals import OrderedStream

    specs = [RequestSpec(0, 0.0, 1, 1), RequestSpec(1, 2.0, 1, 1), RequestSpec(2, 1.0, 1, 1)]
    with pytest.raises(ValueError, match="request 2 comes out of order"):
        OrderedStream(iter(specs), 3).pop_due(5.0)
    same_id = [RequestSpec(0, 0.0, 1, 1), RequestSpec(0, 2.0, 1, 1)]
    with pytest.raises(ValueError, match="request 0 comes out of order"):
        OrderedStream(iter(same_id), 2).pop_due(5.0)


@pytest.mark.parametrize("where", [STREAM_BATCH - 1, STREAM_BATCH, STREAM_BATCH + 1])
def test_ordered_stream_checks_the_order_across_batches(where):
    from cgbench.workload.arrivals import OrderedStream

    specs = [RequestSpec(i, float(i), 1, 1) for i in range(2 * STREAM_BATCH + 5)]
    specs[where] = RequestSpec(where, where - 1.5, 1, 1)  # earlier than the request before it
    with pytest.raises(ValueError, match=f"request {where} comes out of order"):
        stream = OrderedStream(iter(specs), len(specs))
        while not stream.exhausted():
            stream.pop_due(stream.next_arrival_s())


@pytest.mark.parametrize("arrival", [ArrivalConfig(process="poisson", rate=500.0),
                                     ArrivalConfig(process="constant", rate=300.0),
                                     ArrivalConfig(process="all_at_once")])
@pytest.mark.parametrize("n", [STREAM_BATCH, 2 * STREAM_BATCH + 7])
def test_a_long_generated_stream_crosses_batches_unchanged(arrival, n):
    """Over several batches: the lazy stream equals the list-built one at every query time (one or
    many due at once, a query exactly at an arrival), and the batch size does not change a request."""
    from cgbench.workload.stream import request_batches

    w = WorkloadConfig(num_requests=n, arrival=arrival, prompt_len=CHAT,
                       output_len=DistConfig(dist="uniform", min=1, max=999))
    specs = generate_requests(w, 3)
    for batch in (1, 7, STREAM_BATCH, 10 * n):
        assert [s for b in request_batches(w, 3, batch) for s in b] == specs
    lazy, eager = make_stream(w, 3), ArrivalStream(specs)
    times = sorted({s.arrival_s for s in specs})
    queries = [0.0, *times[5:9], *(t + 1e-4 for t in times[::97]), times[-1], times[-1] + 1.0]
    for now in queries:
        assert lazy.next_arrival_s() == eager.next_arrival_s()
        assert lazy.pop_due(now) == eager.pop_due(now)
        assert lazy.exhausted() == eager.exhausted()
    assert lazy.exhausted() and lazy.next_arrival_s() is None and lazy.pop_due(math.inf) == []
