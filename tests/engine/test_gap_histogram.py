"""The inter-token-gap histogram (``GapHistogram``): records appended to typed arrays and folded with
numpy into sorted distinct gaps must give exactly the histogram a dict keyed by gap accumulates,
whatever the order of the records and wherever the folds fall, and merging ranks must add them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cgbench.engine.stats import GapHistogram
from tests.helpers import examples

# few distinct values, so that records repeat gaps across folds; values that differ in the last bit
BASE = [0.0125, 0.0125000000000001, 0.02, 1e-9, 0.0, 3.5, 0.1 + 0.2, 0.3]
GAPS = st.one_of(st.sampled_from(BASE), st.floats(0.0, 2.0, allow_nan=False))
RECORDS = st.lists(st.tuples(GAPS, st.integers(1, 10**6)), max_size=200)


def _dict_histogram(records: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The oracle: the dict the engine used to keep, read in ascending gap order."""
    d: dict[float, int] = {}
    for gap, tokens in records:
        d[gap] = d.get(gap, 0) + tokens
    return sorted(d.items())


@settings(max_examples=examples(300), deadline=None)
@given(RECORDS, st.integers(1, 50))
def test_folded_records_are_the_dict_histogram(records, buffered):
    h = GapHistogram(buffered)
    for i, (gap, tokens) in enumerate(records):
        h.add(gap, tokens)
        if i % 7 == 3:
            h.arrays()  # a read between records folds early too
    expected = _dict_histogram(records)
    assert h.items() == expected
    assert len(h) == len(expected)
    values, counts = h.arrays()
    assert values.dtype.name == "float64" and counts.dtype.name == "int64"
    assert [v.hex() for v in values.tolist()] == [g.hex() for g, _ in expected]  # bit for bit


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(RECORDS, min_size=1, max_size=4), st.integers(1, 20))
def test_merged_ranks_are_the_histogram_of_all_their_records(parts, buffered):
    merged = GapHistogram(buffered)
    for records in parts:
        rank = GapHistogram(buffered)
        rank.add_each([g for g, _ in records[:1]], 1)
        for gap, tokens in records[1:]:
            rank.add(gap, tokens)
        merged.merge(rank)
    everything = [(g, 1) for records in parts for g, _ in records[:1]]
    everything += [r for records in parts for r in records[1:]]
    assert merged.items() == _dict_histogram(everything)
    assert merged == GapHistogram.of(dict(_dict_histogram(everything)))


def test_an_empty_histogram_reads_as_no_gaps():
    h = GapHistogram()
    values, counts = h.arrays()
    assert len(values) == len(counts) == len(h) == 0 and h.items() == []
