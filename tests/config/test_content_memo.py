"""``ContentMemo`` keeps a pure function's result by its records' content: equal records (other
objects) find it, records that differ in any field, or in their type, do not; an unpicklable record
is never kept; at most ``kept`` results, the least recently used going first."""

from __future__ import annotations

import dataclasses

from cgbench.config.content_memo import ContentMemo, content_key
from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig


def _counting():
    calls = []

    def build(value):
        def make():
            calls.append(value)
            return [value]  # a fresh object each build: identity tells a kept result from a new one
        return make
    return calls, build


def test_equal_records_find_the_kept_result_other_fields_do_not():
    memo: ContentMemo[list] = ContentMemo(8)
    calls, build = _counting()
    first = memo.get((ModelConfig(), EngineConfig(max_requests=16)), build(1))
    again = memo.get((ModelConfig(), dataclasses.replace(EngineConfig(max_requests=16))), build(2))
    other = memo.get((ModelConfig(), EngineConfig(max_requests=17)), build(3))
    assert again is first and other is not first
    assert calls == [1, 3]


def test_every_field_counts_even_a_signed_zero():
    base = HardwareConfig()
    keys = {content_key(dataclasses.replace(base, **{f.name: v}))
            for f in dataclasses.fields(base) if type(getattr(base, f.name)) is float
            for v in (0.0, -0.0)}
    floats = [f for f in dataclasses.fields(base) if type(getattr(base, f.name)) is float]
    assert floats and len(keys) == 2 * len(floats)


@dataclasses.dataclass
class A:
    x: int = 1


@dataclasses.dataclass
class B:
    x: int = 1


def test_the_type_is_part_of_the_key():
    assert content_key(A()) != content_key(B())
    assert content_key(A()) == content_key(A())


def test_an_unpicklable_record_is_built_every_time():
    memo: ContentMemo[list] = ContentMemo(8)
    calls, build = _counting()
    record = {"f": lambda: None}  # a lambda does not pickle
    assert content_key(record) is None
    memo.get((record,), build(1))
    memo.get((record,), build(2))
    assert calls == [1, 2] and len(memo) == 0


def test_at_most_kept_the_least_recently_used_going_first():
    memo: ContentMemo[list] = ContentMemo(2)
    calls, build = _counting()
    a = memo.get((EngineConfig(max_requests=1),), build("a"))
    memo.get((EngineConfig(max_requests=2),), build("b"))
    assert memo.get((EngineConfig(max_requests=1),), build("a2")) is a  # a is now the most recent
    memo.get((EngineConfig(max_requests=3),), build("c"))  # b goes
    assert len(memo) == 2
    memo.get((EngineConfig(max_requests=2),), build("b2"))
    assert calls == ["a", "b", "c", "b2"]
