"""Every request of a run, in arrival order, at a few dozen bytes per finished request.

A request still in the engine (queued, running, paused) is a live ``Request`` object. Once it
reaches a terminal outcome (completed or failed) the engine *retires* it: its fields are packed
into typed columns (one ``array`` per field) and the ledger lets go of the object. Reading the
ledger gives ``Request`` objects back in arrival order (retired ones rebuilt from their columns),
and the metrics read whole columns at once.

Integer columns start one byte wide and widen (to 2, 4, then 8 bytes) the first time a value does
not fit, whoever writes it (a batch of retired requests, or the merge of several ledgers), so a step
count past 2**31 is stored exactly. The rare fail reasons are kept once each
and referred to by a small code.

Columns hold the retired requests in the order they retired, each with its arrival ``slot``; only
reading in arrival order sorts them.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any, Literal

from cgbench.engine.invariants import LedgerError
from cgbench.engine.request import Outcome, Request

# integer columns: the arrival slot, the outcome code, then every int field of ``Request``
INT_COLUMNS = ("slot", "fate", "id", "prompt_len", "output_len", "arrival_step", "remaining_prompt",
               "finished_chunk", "generated", "kv_tokens", "blocks", "cg_wait_iters", "deferrals",
               "max_cg_wait", "first_admit_step", "first_token_step", "finish_step", "chunks", "evictions",
               "pauses")
FLOAT_COLUMNS = ("arrival_s", "first_admit_s", "first_token_s", "last_token_s", "finish_s")
_SLOT, _FATE = 0, 1
# the Request fields behind the columns (the column names are the field names), for the cold paths
_INT_FIELDS = attrgetter(*INT_COLUMNS[2:])
_FLOAT_FIELDS = attrgetter(*FLOAT_COLUMNS)
_PACK_BATCH = 1024  # retired requests packed together
_WIDTHS: tuple[Literal["b", "h", "i", "q"], ...] = ("b", "h", "i", "q")  # signed 1-, 2-, 4-, 8-byte ints
_LIMITS = (2**7, 2**15, 2**31, 2**63)

# the fate code: UNFINISHED for a live request, COMPLETED, or 1 + the index of a fail reason
UNFINISHED = -1
COMPLETED = 0


class Ledger:
    """The requests of one run (see the module docstring). ``verify``: keep every retired object too,
    and on every read check that none changed after it was packed (``engine.check_invariants``)."""

    def __init__(self, *, verify: bool = False) -> None:
        self._ints: list[array[int]] = [array("b") for _ in INT_COLUMNS]
        self._floats: list[array[float]] = [array("d") for _ in FLOAT_COLUMNS]
        self._retired = 0  # rows in the columns
        self._live: dict[int, Request] = {}  # arrival slot -> live request, ascending slots
        self._slot_of: dict[int, int] = {}  # id() of a live request -> its slot
        self._next_slot = 0
        self._reasons: list[str] = []  # fail reasons; code k >= 1 is reasons[k - 1]
        self._reason_code: dict[str, int] = {}
        self._kept: list[Request] | None = [] if verify else None
        # retired but not yet packed (``pack``): the requests, their slots and fates
        self._pending: list[Request] = []
        self._pending_slots: list[int] = []
        self._pending_fates: list[int] = []

    # -- the engine's side ----------------------------------------------------------------------------

    def arrive(self, req: Request) -> None:
        """``req`` arrived: it is the ledger's next request, live."""
        slot = self._next_slot
        self._next_slot = slot + 1
        self._live[slot] = req
        self._slot_of[id(req)] = slot

    def retire(self, req: Request) -> None:
        """``req`` reached its terminal outcome: pack it and let go of it. Nothing may change it after.
        Packing happens a batch at a time (one list per column, appended in one call), and before
        any read; in verify mode at once, so that a later change is caught."""
        fate = self._fate_of(req)
        slot = self._slot_of.pop(id(req), None)
        if slot is None:
            raise LedgerError(f"request {req.id} retired but not live in the ledger")
        del self._live[slot]
        self._pending.append(req)
        self._pending_slots.append(slot)
        self._pending_fates.append(fate)
        if self._kept is not None:
            self._kept.append(req)
            self.pack()
        elif len(self._pending) >= _PACK_BATCH:
            self.pack()

    def _fate_of(self, req: Request) -> int:
        if req.outcome == Outcome.COMPLETED:
            return COMPLETED
        if req.outcome != Outcome.FAILED:
            raise LedgerError(f"request {req.id} retired while {req.outcome.value}")
        code = self._reason_code.get(req.fail_reason)
        if code is None:
            self._reasons.append(req.fail_reason)
            code = self._reason_code[req.fail_reason] = len(self._reasons)
        return code

    def pack(self) -> None:
        """Pack the retired requests not packed yet, column by column (in INT_COLUMNS order); a column
        whose values outgrow it is widened first (nothing is appended when a value does not fit)."""
        rs = self._pending
        if not rs:
            return
        # written out field by field (in INT_COLUMNS order): attribute reads by name cost a third more here
        ints = (self._pending_slots, self._pending_fates, [r.id for r in rs], [r.prompt_len for r in rs],
                [r.output_len for r in rs], [r.arrival_step for r in rs], [r.remaining_prompt for r in rs],
                [r.finished_chunk for r in rs], [r.generated for r in rs], [r.kv_tokens for r in rs],
                [r.blocks for r in rs], [r.cg_wait_iters for r in rs], [r.deferrals for r in rs],
                [r.max_cg_wait for r in rs], [r.first_admit_step for r in rs], [r.first_token_step for r in rs],
                [r.finish_step for r in rs], [r.chunks for r in rs], [r.evictions for r in rs],
                [r.pauses for r in rs])
        for k, values in enumerate(ints):
            self._ints[k] = _appended(self._ints[k], values, INT_COLUMNS[k])
        n = len(rs)
        floats = ([r.arrival_s for r in rs], [r.first_admit_s for r in rs], [r.first_token_s for r in rs],
                  [r.last_token_s for r in rs], [r.finish_s for r in rs])
        for k, fvalues in enumerate(floats):
            self._floats[k].frombytes(struct.pack(f"{n}d", *fvalues))
        self._retired += len(rs)
        self._pending, self._pending_slots, self._pending_fates = [], [], []

    # -- reading --------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._retired + len(self._pending) + len(self._live)

    def __iter__(self) -> Iterator[Request]:
        """Every request in arrival order (a retired one is a fresh object rebuilt from its row)."""
        self.pack()
        self.verify()
        slots = self._ints[_SLOT]
        rows = sorted(range(self._retired), key=slots.__getitem__)
        live = sorted(self._live.items())
        j = 0
        for row in rows:
            while j < len(live) and live[j][0] < slots[row]:
                yield live[j][1]
                j += 1
            yield self._rebuild(row)
        for _, req in live[j:]:
            yield req

    def __getitem__(self, i: int) -> Request:
        """The ``i``-th request in arrival order (a scan: for tests and small runs)."""
        n = len(self)
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"ledger index {i} out of range ({n} requests)")
        for j, req in enumerate(self):
            if j == k:
                return req
        raise AssertionError("unreachable")

    def _rebuild(self, row: int) -> Request:
        fields: dict[str, Any] = {name: col[row] for name, col in zip(INT_COLUMNS[2:], self._ints[2:], strict=True)}
        fields.update((name, col[row]) for name, col in zip(FLOAT_COLUMNS, self._floats, strict=True))
        fate = self._ints[_FATE][row]
        return Request(**fields, outcome=Outcome.COMPLETED if fate == COMPLETED else Outcome.FAILED,
                       fail_reason=self._reasons[fate - 1] if fate > COMPLETED else "")

    def int_column(self, name: str) -> array[int]:
        """Field ``name`` of every request: the retired ones (in retirement order), then the live ones
        (in arrival order); every column lists the requests in this same order. ``fate`` is
        ``UNFINISHED``, ``COMPLETED`` or a fail reason's code (``fail_reasons``)."""
        self.pack()
        self.verify()
        k = INT_COLUMNS.index(name)
        col = self._ints[k]
        if not self._live:
            return col
        if k == _FATE:
            extra = [UNFINISHED] * len(self._live)
        elif k == _SLOT:
            extra = list(self._live)
        else:
            extra = [getattr(r, name) for r in self._live.values()]
        out = array("q", col)
        out.extend(extra)
        return out

    def float_column(self, name: str) -> array[float]:
        """Like ``int_column``, for a float field."""
        self.pack()
        self.verify()
        col = self._floats[FLOAT_COLUMNS.index(name)]
        if not self._live:
            return col
        out = array("d", col)
        out.extend([getattr(r, name) for r in self._live.values()])
        return out

    @property
    def fail_reasons(self) -> list[str]:
        """The fail reasons met so far; code ``k >= 1`` of the ``fate`` column is ``fail_reasons[k - 1]``."""
        return list(self._reasons)

    def verify(self) -> None:
        """In verify mode: every retired request still equals its packed row, and no live request is
        terminal (each would otherwise have been retired)."""
        if self._kept is None:
            return
        for row, req in enumerate(self._kept):
            packed = self._rebuild(row)
            if _fields(packed) != _fields(req):
                raise LedgerError(f"request {req.id} changed after it was retired: packed {_fields(packed)}, "
                                  f"now {_fields(req)}")
        for req in self._live.values():
            if req.outcome in (Outcome.COMPLETED, Outcome.FAILED):
                raise LedgerError(f"request {req.id} is {req.outcome.value} but was never retired")

    # -- several ledgers as one -----------------------------------------------------------------------

    @classmethod
    def merged(cls, parts: Sequence[Ledger]) -> Ledger:
        """One ledger of every part's requests, ordered by request id (the slot of each is its id); for
        reading (nothing arrives in it)."""
        for p in parts:
            p.pack()
        out = cls(verify=any(p._kept is not None for p in parts))
        reasons: dict[str, int] = {}
        for k in range(len(INT_COLUMNS)):
            col: array[int] = array("b")
            for p in parts:
                if k == _FATE:  # the parts' reason codes differ: map each onto the merged list
                    remap = [COMPLETED]
                    for reason in p._reasons:
                        remap.append(reasons.setdefault(reason, len(reasons) + 1))
                    values: Sequence[int] = [remap[v] for v in p._ints[_FATE]]
                else:  # the slot is the id: its column is filled from the id column
                    values = p._ints[2 if k == _SLOT else k]
                col = _appended(col, values, INT_COLUMNS[k])
            out._ints[k] = col
        for k in range(len(FLOAT_COLUMNS)):
            for p in parts:
                out._floats[k].extend(p._floats[k])
        out._reasons = list(reasons)
        out._reason_code = dict(reasons)
        out._retired = sum(p._retired for p in parts)
        for req in sorted((r for p in parts for r in p._live.values()), key=_request_id):
            out._live[req.id] = req
            out._slot_of[id(req)] = req.id
        if out._kept is not None:
            for p in parts:
                out._kept.extend(p._kept if p._kept is not None else [p._rebuild(i) for i in range(p._retired)])
        return out


def _request_id(r: Request) -> int:
    return r.id


def _appended(col: array[int], values: Sequence[int], name: str) -> array[int]:
    """``col`` with ``values`` appended: the one way values enter an int column (packing a batch,
    merging ledgers). A column that cannot hold one of them is widened first, to the narrowest width
    that holds them all; nothing is appended when a value does not fit 64 bits."""
    # struct packs a batch in one C loop (array.fromlist parses every value as a separate argument)
    try:
        packed = struct.pack(f"{len(values)}{col.typecode}", *values)
    except struct.error:  # a value outgrew the column
        col = _widened(col, min(values), max(values), name)
        packed = struct.pack(f"{len(values)}{col.typecode}", *values)
    col.frombytes(packed)
    return col


def _widened(col: array[int], lo: int, hi: int, name: str) -> array[int]:
    """``col`` in the narrowest signed width that also holds ``lo`` .. ``hi``."""
    w = _WIDTHS.index(col.typecode)
    while not (-_LIMITS[w] <= lo and hi < _LIMITS[w]):
        if w + 1 == len(_WIDTHS):
            raise OverflowError(f"request field {name} = {hi if hi >= _LIMITS[w] else lo} does not fit 64 bits")
        w += 1
    return array(_WIDTHS[w], col)


def _fields(r: Request) -> tuple[Any, ...]:
    """Every field of a request (the retired-request check compares these)."""
    return (*_INT_FIELDS(r), *_FLOAT_FIELDS(r), r.outcome.value, r.fail_reason)
