"""The result document's ``deferrals`` record: every request gating deferred at least once, in a
compact table (column names once, then one row per deferred request, by id).

It is what ``cgbench explain`` needs from a default run: which requests waited, for how long, when
they arrived and were first admitted (to say how long they waited in total and to check that the
replayed run is the recorded one). The round itself is not recorded: on the simulator a run is
deterministic, so ``explain`` re-runs the recorded config up to that round (see
``cgbench.analysis.explain_request``). It is a record, not a metric: ``compare`` never reads it.
"""

from __future__ import annotations

from typing import Any

from cgbench.engine.ledger import Ledger

DEFERRAL_COLUMNS = ("id", "arrival_step", "first_admit_step", "finish_step", "deferrals", "max_cg_wait_iters",
                    "evictions")
# the ledger column behind each record column
_LEDGER_COLUMN = {"max_cg_wait_iters": "max_cg_wait"}


def deferral_record(requests: Ledger) -> dict[str, Any]:
    """``{"columns": [...], "rows": [[...], ...]}`` of the requests of ``requests`` with a deferral,
    ordered by id (a few integers per deferred request; nothing per request that never waited)."""
    import numpy as np

    def column(name: str) -> Any:
        col = requests.int_column(_LEDGER_COLUMN.get(name, name))
        return np.frombuffer(col, dtype=np.dtype(col.typecode))

    waited = np.flatnonzero(column("deferrals") > 0)  # the columns share one order
    cols = [column(c)[waited].tolist() for c in DEFERRAL_COLUMNS]
    return {"columns": list(DEFERRAL_COLUMNS), "rows": sorted(list(row) for row in zip(*cols, strict=True))}


def deferral_rows(record: dict[str, Any]) -> dict[int, dict[str, int]]:
    """A ``deferrals`` record read back: request id -> {column: value}."""
    columns = record["columns"]
    return {row[0]: dict(zip(columns, row, strict=True)) for row in record["rows"]}
