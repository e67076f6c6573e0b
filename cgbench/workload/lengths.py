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
on ``n``. They are the draws of ``random.Random``'s own ``normalvariate`` and ``randint``, written out
here step for step (the same calls to ``random()`` / ``getrandbits``, the same float operations) so
that a batch of lengths costs one loop instead of several Python calls per length; a test checks
them against ``random.Random`` itself over many seeds and distributions.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable

from cgbench.config.schema import DistConfig

# exp(700) is finite in float64; anything larger is clipped to d.max anyway.
_MAX_LOG = 700.0
# random.Random.normalvariate's constant (Kinderman and Monahan's ratio of uniforms), computed alike.
_NV_MAGIC = 4 * math.exp(-0.5) / math.sqrt(2.0)

LengthDrawer = Callable[[int], list[int]]
"""``draw(n)``: the next ``n`` lengths of one distribution's sequence, as a list."""


def _round_clip(x: float, lo: int, hi: int) -> int:
    """``floor(x + 0.5)`` clipped to ``[lo, hi]``, ``x`` first clipped to ``[float(lo), float(hi)]``."""
    x = min(max(x, float(lo)), float(hi))
    return min(max(math.floor(x + 0.5), lo), hi)


def _continuous(rng: random.Random, mu: float, sigma: float, lo: int, hi: int, log_space: bool) -> LengthDrawer:
    """Normal draws ``N(mu, sigma)`` (``log_space``: ``exp`` of them, capped at ``_MAX_LOG``), rounded
    and clipped as ``_round_clip`` does."""
    rand, log, exp, floor = rng.random, math.log, math.exp, math.floor
    flo, fhi = float(lo), float(hi)
    at_lo, at_hi = _round_clip(flo, lo, hi), _round_clip(fhi, lo, hi)

    def draw(n: int) -> list[int]:
        out: list[int] = []
        for _ in range(n):
            # random.Random.normalvariate(mu, sigma), operation for operation.
            while True:
                u1 = rand()
                u2 = 1.0 - rand()
                z = _NV_MAGIC * (u1 - 0.5) / u2
                if z * z / 4.0 <= -log(u2):
                    break
            x = mu + z * sigma
            if log_space:
                if _MAX_LOG < x:  # min(x, _MAX_LOG), NaN kept as min keeps it
                    x = _MAX_LOG
                x = exp(x)
            # _round_clip(x, lo, hi) without its four builtin calls (NaN still raises in floor).
            if x <= flo:
                out.append(at_lo)
            elif x >= fhi:
                out.append(at_hi)
            else:
                v = floor(x + 0.5)
                out.append(lo if v < lo else hi if v > hi else v)
        return out

    return draw


def _uniform(rng: random.Random, lo: int, hi: int) -> LengthDrawer:
    """``rng.randint(lo, hi)`` draws: ``lo`` plus the first of ``getrandbits(k)`` below the width."""
    bits = rng.getrandbits
    width = hi - lo + 1
    k = width.bit_length()

    def draw(n: int) -> list[int]:
        out: list[int] = []
        for _ in range(n):
            r = bits(k)
            while r >= width:
                r = bits(k)
            out.append(lo + r)
        return out

    return draw


def _histogram(d: DistConfig, rng: random.Random) -> LengthDrawer:
    edges = [int(b) for b in d.bins]
    cum = list(itertools.accumulate(float(w) for w in d.weights))
    total, last = cum[-1], len(cum) - 1
    lo, hi = d.min, d.max
    rand, bits, bisect_right = rng.random, rng.getrandbits, bisect.bisect_right
    # Per bin: its first integer, the number of integers it holds and their bit length (randint's draw).
    starts = edges[:-1]
    widths = [(edges[k + 1] if k == last else edges[k + 1] - 1) - edges[k] + 1 for k in range(last + 1)]
    nbits = [w.bit_length() for w in widths]

    def draw(n: int) -> list[int]:
        out: list[int] = []
        for _ in range(n):
            # bisect_right skips zero-weight bins: their cumulative value equals the previous one.
            k = bisect_right(cum, rand() * total)
            if k > last:
                k = last
            width, kb = widths[k], nbits[k]
            r = bits(kb)
            while r >= width:
                r = bits(kb)
            v = starts[k] + r
            out.append(lo if v < lo else hi if v > hi else v)
        return out

    return draw


# The built-in distributions' builders, each named by its record (``config/registry/workloads.py``,
# ``builder``): ``(record, rng) -> draw(n)``, the next ``n`` lengths, so consecutive batches are one
# sequence cut in pieces. ``d`` is trusted as validated. ``cgbench.workload.sources`` picks the builder.


def fixed_lengths(d: DistConfig, rng: random.Random) -> LengthDrawer:
    value = min(max(d.value, d.min), d.max)
    return lambda n: [value] * n


def uniform_lengths(d: DistConfig, rng: random.Random) -> LengthDrawer:
    return _uniform(rng, d.min, d.max)


def normal_lengths(d: DistConfig, rng: random.Random) -> LengthDrawer:
    return _continuous(rng, d.mean, d.std, d.min, d.max, False)


def lognormal_lengths(d: DistConfig, rng: random.Random) -> LengthDrawer:
    return _continuous(rng, math.log(d.mean) - d.sigma**2 / 2, d.sigma, d.min, d.max, True)


def histogram_lengths(d: DistConfig, rng: random.Random) -> LengthDrawer:
    return _histogram(d, rng)
