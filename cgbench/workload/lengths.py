"""Token-length distributions for prompts and outputs.

Every distribution returns integers clipped to ``[d.min, d.max]`` (``d.min >= 1``). Continuous draws
are rounded half-up (``floor(x + 0.5)``) before clipping, so a test can compute the exact mean of the
rounded, clipped law from the continuous CDF.

* ``fixed``: ``value`` (clipped).
* ``uniform``: integers in ``[min, max]``, both ends included.
* ``normal``: ``N(mean, std)``.
* ``lognormal``: ``mean`` is the distribution's mean in tokens and ``sigma`` its log-space std, so
  ``mu = ln(mean) - sigma**2 / 2``.
* ``histogram``: bin ``k`` is chosen with probability ``weights[k] / sum(weights)``, then an integer
  is drawn uniformly inside it. Bins are half-open ``[bins[k], bins[k+1])`` except the last, which is
  closed ``[bins[-2], bins[-1]]`` (numpy's histogram convention).

Draws are sequential from one ``random.Random``, so the first ``k`` of ``n`` samples do not depend
on ``n``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator

from cgbench.config.schema import DistConfig

# exp(700) is finite in float64; anything larger is clipped to d.max anyway.
_MAX_LOG = 700.0


def _round_clip(x: float, lo: int, hi: int) -> int:
    x = min(max(x, float(lo)), float(hi))
    return min(max(math.floor(x + 0.5), lo), hi)


def _histogram(d: DistConfig, rng: random.Random) -> Iterator[int]:
    edges = [int(b) for b in d.bins]
    cum = list(itertools.accumulate(float(w) for w in d.weights))
    total, last = cum[-1], len(cum) - 1
    while True:
        # bisect_right skips zero-weight bins: their cumulative value equals the previous one.
        k = min(bisect.bisect_right(cum, rng.random() * total), last)
        top = edges[k + 1] if k == last else edges[k + 1] - 1
        yield min(max(rng.randint(edges[k], top), d.min), d.max)


def iter_lengths(d: DistConfig, rng: random.Random) -> Iterator[int]:
    """Token lengths drawn from ``d`` one at a time, endlessly: the ``i``-th equals ``sample_lengths``'s
    ``i``-th (a long stream need not hold them all). ``d`` is trusted as validated."""
    lo, hi = d.min, d.max
    if d.dist == "fixed":
        return itertools.repeat(min(max(d.value, lo), hi))
    if d.dist == "uniform":
        return (rng.randint(lo, hi) for _ in itertools.count())
    if d.dist == "normal":
        return (_round_clip(rng.normalvariate(d.mean, d.std), lo, hi) for _ in itertools.count())
    if d.dist == "lognormal":
        mu = math.log(d.mean) - d.sigma**2 / 2
        return (_round_clip(math.exp(min(rng.normalvariate(mu, d.sigma), _MAX_LOG)), lo, hi)
                for _ in itertools.count())
    return _histogram(d, rng)


def sample_lengths(d: DistConfig, n: int, rng: random.Random, key: str = "length") -> list[int]:
    """Draw ``n`` token lengths from ``d`` using ``rng``. ``d`` is trusted as validated
    (``cgbench.config.schema.check_dist``); ``key`` is kept for callers that name the distribution."""
    return list(itertools.islice(iter_lengths(d, rng), n))
