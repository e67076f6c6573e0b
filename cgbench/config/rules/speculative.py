"""``engine.spec_acceptance``: the draft acceptance model of speculative decoding."""

from __future__ import annotations

import math
from typing import Any

from cgbench.config.rules.base import require as _require


def check_spec_acceptance(e: Any) -> None:
    sa, spec, key = e.spec_acceptance, e.num_speculative_tokens, "engine.spec_acceptance"
    _require(not (sa.per_position and sa.lengths), key, "set per_position or lengths, not both")
    _require(spec > 0 or not (sa.per_position or sa.lengths), key,
             "an acceptance model needs engine.num_speculative_tokens > 0")
    if sa.per_position:
        _require(len(sa.per_position) == spec, f"{key}.per_position",
                 f"needs one probability per draft position ({spec}), got {len(sa.per_position)}")
        for i, p in enumerate(sa.per_position):
            _require(0.0 <= p <= 1.0, f"{key}.per_position[{i}]", f"must be in [0, 1], got {p}")
    if sa.lengths:
        _require(len(sa.lengths) == spec + 1, f"{key}.lengths",
                 f"needs one weight per accepted length 0..{spec} ({spec + 1}), got {len(sa.lengths)}")
        for i, w in enumerate(sa.lengths):
            _require(w >= 0.0, f"{key}.lengths[{i}]", f"must be >= 0, got {w}")
        _require(sum(sa.lengths) > 0, f"{key}.lengths", "needs a positive total weight")
        # weights near the float maximum sum to inf: every weight / inf is 0, read as every draft accepted
        _require(math.isfinite(sum(sa.lengths)), f"{key}.lengths",
                 f"weights sum to {sum(sa.lengths)}, not a finite number: give relative weights (e.g. counts)")
