"""The last few results of a pure function of config records, kept by the records' content.

A sweep's points mostly share their grid, model, hardware and engine (a seed or a workload axis), and
what is built from those alone (the grid, the memory estimate, the capture estimate, the gating
status) was rebuilt for every point. ``ContentMemo`` keeps the few most
recent results of one such function.

The key is the records' pickle (with their types): equal bytes hold equal fields, so a hit is never
a stale result, and two equal records pickled differently (a list shared within one and not the
other) are only a miss. A pickle is three times faster to make than the JSON of ``config_dict`` the
grid key was. A record that cannot be pickled (a plug-in's section holding an unusual value) is
simply not kept."""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def content_key(*records: Any) -> Hashable | None:
    """A key equal for records of equal types and fields (None when one cannot be pickled)."""
    try:
        data = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an unpicklable record is only not kept
        return None
    return tuple(type(r) for r in records), data


class ContentMemo(Generic[T]):
    """``get(records, build)``: ``build()``'s result, kept for the ``kept`` most recently used records."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._found: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, records: tuple[Any, ...], build: Callable[[], T]) -> T:
        key = content_key(*records)
        if key is None:
            return build()
        found = self._found.get(key)
        if found is not None:
            self._found.move_to_end(key)
            return found
        found = self._found[key] = build()
        while len(self._found) > self.kept:
            self._found.popitem(last=False)
        return found

    def clear(self) -> None:
        self._found.clear()

    def __len__(self) -> int:
        return len(self._found)
