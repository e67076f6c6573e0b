"""The load an open-loop workload offers and what the engine served of it: the result's ``load``
block (the ``overload`` health flag reads it; docs/metrics.md).

Offered load exists only where the arrivals do not depend on the engine: a generated process at a
rate (``poisson``, ``gamma``, ``constant``, a plug-in's) or a trace replayed at its times. Its
request rate is the arrivals' mean gap inverted, ``(n - 1) / span`` over the span from the first
arrival to the last, and its output rate that request rate times the mean output tokens the
requests ask for (failed requests included: they were offered). A closed loop offers exactly what
the engine serves (a request arrives when one completes), and ``all_at_once`` an unbounded rate
(every request at t = 0, a span of 0): neither has an offered load, so neither gets the block.

What the engine served is measured over the time it had work offered: the output tokens emitted
from the first arrival to the last token. The two measures of a backlog are the ``drain`` (the last
token's time after the last arrival) and the ``backlog`` (how long the last arrivals, a tenth of
them, waited to be admitted: the median): a queue that grew during the run makes the last arrivals
wait, whatever the requests' own lengths, while a healthy run admits them within a few steps.
"""

from __future__ import annotations

import math
from typing import Any

from cgbench.engine.ledger import COMPLETED, UNFINISHED, Ledger

BACKLOG_TAIL = 0.1  # the share of the arrivals, the last ones, whose admission wait is the backlog


def load_metrics(requests: Ledger, makespan_s: float) -> dict[str, Any] | None:
    """The ``load`` block of an open-loop run, or None when its arrivals span no time (fewer than two
    requests, or every one at the same instant)."""
    import numpy as np

    def column(name: str) -> Any:
        if name in ("arrival_s", "first_admit_s"):
            return np.frombuffer(requests.float_column(name), dtype=np.float64)
        col = requests.int_column(name)
        return np.frombuffer(col, dtype=np.dtype(col.typecode)).astype(np.int64)

    arrival = column("arrival_s")
    n = len(arrival)
    if n < 2:
        return None
    first, last = float(arrival.min()), float(arrival.max())
    span = last - first
    if not span > 0:
        return None
    offered_req_s = (n - 1) / span
    offered_tok_s = offered_req_s * int(column("output_len").sum()) / n
    busy = makespan_s - first
    served_tok_s = int(column("generated").sum()) / busy if busy > 0 else 0.0
    return {
        "arrival_span_s": round(span, 6),
        "offered_req_s": round(offered_req_s, 6),
        "offered_output_tok_s": round(offered_tok_s, 3),
        "served_output_tok_s": round(served_tok_s, 3),
        "served_fraction": round(served_tok_s / offered_tok_s, 6) if offered_tok_s > 0 else 0.0,
        "drain_s": round(max(0.0, makespan_s - last), 6),
        "backlog_s": round(_backlog(arrival, column("first_admit_step"), column("first_admit_s"), column("fate"),
                                    column("slot"), makespan_s), 6),
    }


def _backlog(arrival: Any, admit_step: Any, admit_s: Any, fate: Any, slot: Any, makespan_s: float) -> float:
    """The median admission wait of the last ``BACKLOG_TAIL`` of the arrivals (at least one): a request
    never admitted waits until the run ended, unless it failed (refused on arrival: it never queued)."""
    import numpy as np

    order = np.argsort(slot, kind="stable")  # the ledger's arrival order
    tail = order[len(order) - max(1, math.ceil(BACKLOG_TAIL * len(order))):]
    admitted = admit_step[tail] >= 0
    waiting = ~admitted & ((fate[tail] == UNFINISHED) | (fate[tail] == COMPLETED))
    waits = np.concatenate([(admit_s[tail] - arrival[tail])[admitted], makespan_s - arrival[tail][waiting]])
    if not len(waits):
        return 0.0
    waits.sort()
    return float(waits[math.ceil(0.5 * len(waits)) - 1])  # nearest rank, as every cgbench percentile
