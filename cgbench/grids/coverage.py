"""Exact coverage of a captured-graph grid over every reachable real batch shape.

A real step ``(T, P, D)`` is reachable when ``1 <= T <= max_tokens``, ``P + D <= max_requests`` and
``P + D*(1+spec) <= T <= P*max_sequence_length + D*(1+spec)`` (the validity rule of a step).
Decode-only states (``P == 0``) have ``T = D*(1+spec)``: there are at most ``max_requests`` of them
and each is asked of ``Grid.lookup``. For a mixed / prefill cell ``(P, D)`` the reachable T form an
interval, and a graph serves ``(T, P, D)`` iff its T is ``>= T`` and its P / D satisfy a condition
that does not involve T; so the covered T form the prefix of that interval up to
``Tmax(P, D)`` = the largest T among graphs whose P / D fit. ``Tmax`` for all cells comes from a
2-D suffix maximum (numpy), which makes the count exact in O(max_requests^2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from cgbench.config.limits import check_coverage_size
from cgbench.grids.lookup import Grid
from cgbench.grids.shapes import (
    DECODE_ONLY_OVER_MAX,
    MISS_REASONS,
    NO_GRAPHS,
    NO_MIXED_GRAPHS,
    SHAPE,
    TOKENS_OVER_MAX,
    BatchShape,
)

MAX_HOLES = 10


@dataclass(frozen=True, slots=True)
class Hole:
    """One uncovered real shape, why the matcher misses it, and (when known) the grid's reason."""

    shape: BatchShape
    reason: str
    explanation: str | None = None


@dataclass
class Coverage:
    grid_name: str
    strict: bool
    max_requests: int
    max_tokens: int
    max_sequence_length: int
    num_speculative_tokens: int
    decode_states: int
    decode_covered: int
    mixed_states: int
    mixed_covered: int  # under the grid's own matching (``strict``)
    mixed_covered_strict: int
    mixed_covered_non_strict: int
    misses_by_reason: dict[str, int] = field(default_factory=dict)
    holes: list[Hole] = field(default_factory=list)

    @property
    def states(self) -> int:
        return self.decode_states + self.mixed_states

    @property
    def covered(self) -> int:
        return self.decode_covered + self.mixed_covered

    @property
    def fraction(self) -> float:
        return self.covered / self.states if self.states else 1.0

    @property
    def decode_fraction(self) -> float:
        return self.decode_covered / self.decode_states if self.decode_states else 1.0

    @property
    def mixed_fraction(self) -> float:
        return self.mixed_covered / self.mixed_states if self.mixed_states else 1.0

    @property
    def strict_fraction(self) -> float:
        """All states covered when mixed shapes are matched strictly (hybrid models)."""
        return _frac(self.decode_covered + self.mixed_covered_strict, self.states)

    @property
    def non_strict_fraction(self) -> float:
        return _frac(self.decode_covered + self.mixed_covered_non_strict, self.states)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["holes"] = [{"graph": list(h.shape), "reason": h.reason, "explanation": h.explanation}
                      for h in self.holes]
        d.update(states=self.states, covered=self.covered, fraction=self.fraction,
                 strict_fraction=self.strict_fraction, non_strict_fraction=self.non_strict_fraction)
        return d


def _frac(a: int, b: int) -> float:
    return a / b if b else 1.0


def _suffix_max(a: np.ndarray) -> np.ndarray:
    """``out[i, j] = max(a[i:, j:])``."""
    a = np.maximum.accumulate(a[::-1, :], axis=0)[::-1, :]
    return np.maximum.accumulate(a[:, ::-1], axis=1)[:, ::-1]


def _tmax_tables(grid: Grid, R: int) -> tuple[np.ndarray, np.ndarray]:
    """``(strict, non_strict)``: ``[P, D]`` -> largest graph T that serves ``(*, P, D)`` (0: none).

    Strict needs ``gP >= P and gD >= D``; non-strict ``gP >= P and gP + gD >= P + D``. Counts are
    clipped to R because real counts never exceed it."""
    by_pd = np.zeros((R + 1, R + 1), dtype=np.int64)
    by_ps = np.zeros((R + 1, R + 1), dtype=np.int64)
    for g in grid.graphs:
        T, P, D = g
        if P == 0:
            continue
        i, j, k = min(P, R), min(D, R), min(P + D, R)
        by_pd[i, j] = max(by_pd[i, j], T)
        by_ps[i, k] = max(by_ps[i, k], T)
    strict = _suffix_max(by_pd)
    ns = _suffix_max(by_ps)
    # Re-index the non-strict table from [P, P + D] to [P, D].
    p_idx, d_idx = np.indices((R + 1, R + 1))
    non_strict = np.where(p_idx + d_idx <= R, ns[p_idx, np.minimum(p_idx + d_idx, R)], 0)
    return strict, non_strict


def coverage(grid: Grid, *, max_requests: int, max_tokens: int, max_sequence_length: int,
             num_speculative_tokens: int) -> Coverage:
    """Count exactly which reachable real shapes ``grid`` serves, and why it misses the rest."""
    check_coverage_size(max_requests)  # (R + 1)^2 cells per table: refuse before allocating
    R, q, msl = max_requests, num_speculative_tokens + 1, max_sequence_length
    misses = dict.fromkeys(MISS_REASONS, 0)

    # Decode-only states: one per D.
    decode_states = decode_covered = 0
    decode_holes: list[Hole] = []
    for d in range(1, R + 1):
        if d * q > max_tokens:
            break
        decode_states += 1
        g, reason = grid.lookup(d * q, 0, d)
        if g is not None:
            decode_covered += 1
        else:
            misses[reason] += 1
            if reason not in {h.reason for h in decode_holes}:  # the first miss of each reason
                text = _explain_decode(grid, d, q, reason)
                decode_holes.append(Hole(BatchShape(d * q, 0, d), reason, text))

    # Mixed / prefill states: cells (P >= 1, D >= 0, P + D <= R), T in [lo, hi].
    P, D = np.indices((R + 1, R + 1), dtype=np.int64)
    cell = (P >= 1) & (P + D <= R)
    lo = P + D * q
    hi = np.minimum(max_tokens, P * msl + D * q)
    n = np.where(cell, np.maximum(0, hi - lo + 1), 0)
    mixed_states = int(n.sum())
    t_strict, t_non_strict = _tmax_tables(grid, R)

    def covered_by(tmax: np.ndarray) -> np.ndarray:
        return np.where(cell, np.maximum(0, np.minimum(hi, tmax) - lo + 1), 0)

    cov_strict = covered_by(t_strict)
    cov_non_strict = covered_by(t_non_strict)
    tmax = t_strict if grid.strict else t_non_strict
    cov = cov_strict if grid.strict else cov_non_strict
    mixed_covered = int(cov.sum())

    mixed_T = [g.token_count for g in grid.graphs if g.prefill_req_count > 0]
    shape_miss = np.zeros_like(n)
    over_miss = np.zeros_like(n)
    if not grid.graphs:
        misses[NO_GRAPHS] += mixed_states
    elif not mixed_T:
        misses[NO_MIXED_GRAPHS] += mixed_states
    else:
        top = max(mixed_T)
        start = np.maximum(lo, tmax + 1)  # first uncovered T of each cell
        shape_miss = np.where(cell, np.maximum(0, np.minimum(hi, top) - start + 1), 0)
        over_miss = np.where(cell, np.maximum(0, hi - np.maximum(start, top + 1) + 1), 0)
        misses[SHAPE] += int(shape_miss.sum())
        misses[TOKENS_OVER_MAX] += int(over_miss.sum())

    holes = _mixed_holes(grid, n - cov, shape_miss, over_miss, tmax, lo, R, q, msl)
    holes = (holes + decode_holes[:2])[:MAX_HOLES]
    return Coverage(
        grid_name=grid.name, strict=grid.strict, max_requests=R, max_tokens=max_tokens,
        max_sequence_length=msl, num_speculative_tokens=num_speculative_tokens,
        decode_states=decode_states, decode_covered=decode_covered,
        mixed_states=mixed_states, mixed_covered=mixed_covered,
        mixed_covered_strict=int(cov_strict.sum()), mixed_covered_non_strict=int(cov_non_strict.sum()),
        misses_by_reason={k: v for k, v in misses.items() if v}, holes=holes)


# ---------------------------------------------------------------------------------------------
# Example holes


def _mixed_holes(grid: Grid, missed: np.ndarray, shape_miss: np.ndarray, over_miss: np.ndarray,
                 tmax: np.ndarray, lo: np.ndarray, R: int, q: int, msl: int) -> list[Hole]:
    holes: list[Hole] = []
    if not grid.graphs or not grid.non_decode:
        reason = NO_GRAPHS if not grid.graphs else NO_MIXED_GRAPHS
        cells = np.argwhere(missed > 0)
        if len(cells):
            p, d = (int(x) for x in cells[0])
            text = "the grid is empty" if reason == NO_GRAPHS else "the grid has no prefill/mixed graphs"
            holes.append(Hole(BatchShape(int(lo[p, d]), p, d), reason, text))
        return holes

    # "shape" holes. Candidates: every full-batch cell (D = R - P, the steady state of a busy
    # server), then the cells that miss most; keep a few of each explanation, with varied P.
    full = [(p, R - p) for p in range(1, R + 1)]
    flat = shape_miss.ravel()
    top = [divmod(int(i), R + 1) for i in np.argsort(-flat, kind="stable")[:64]]
    by_kind: dict[str, list[Hole]] = {}
    seen: set[tuple[str, int]] = set()
    for p, d in full + top:
        if shape_miss[p, d] <= 0:
            continue
        T = int(max(lo[p, d], tmax[p, d] + 1))
        kind, text = _explain_shape(grid, T, p, d, R, q, msl)
        group = by_kind.setdefault(kind, [])
        if len(group) >= 3 or (kind, p.bit_length()) in seen:
            continue
        seen.add((kind, p.bit_length()))
        group.append(Hole(BatchShape(T, p, d), SHAPE, text))
    for group in by_kind.values():
        holes += group

    cells = np.argwhere(over_miss > 0)
    if len(cells):
        top = max(g.token_count for g in grid.graphs if g.prefill_req_count > 0)
        p, d = (int(x) for x in cells[0])
        T = int(max(lo[p, d], top + 1))
        holes.append(Hole(BatchShape(T, p, d), TOKENS_OVER_MAX,
                          f"T={T} is above the largest prefill/mixed graph (T={top})"))
    return holes


def _explain_shape(grid: Grid, T: int, P: int, D: int, R: int, q: int, msl: int) -> tuple[str, str]:
    """Why no graph serves ``(T, P, D)`` although one is large enough in T."""
    s = min(g.token_count for g in grid.graphs if g.prefill_req_count > 0 and g.token_count >= T)
    strict = grid.strict
    feasible = None
    for p2 in range(P, R + 1):
        # Largest / smallest decode count a valid graph (s, p2, d2) may have.
        d_hi = min(R - p2, (s - p2) // q)
        d_lo = max(0, -(-(s - p2 * msl) // q))
        need = D if strict else max(0, P + D - p2)
        if max(d_lo, need) <= d_hi:
            feasible = (p2, max(d_lo, need))
            break
    rule = "D" if strict else "P+D"
    if feasible is None:
        return "msl rule", (f"msl rule: the next graph size T={s} has no valid shape with P>={P} and "
                            f"{rule}>={D if strict else P + D} (needs T <= P*{msl} + D*{q}, P+D <= {R})")
    ps = sorted({g.prefill_req_count for g in grid.graphs
                 if g.token_count == s and g.prefill_req_count > 0})
    example = f"({s}, {feasible[0]}, {feasible[1]})"
    return "P-grid gap", (f"P-grid gap: e.g. {example} would be valid and serve it, "
                          f"but at T={s} the grid has P in {ps}")


def _explain_decode(grid: Grid, d: int, q: int, reason: str) -> str:
    decode = [g for g in grid.graphs if g.prefill_req_count == 0]
    if reason == NO_GRAPHS:
        return "the grid is empty"
    if not decode:
        return "the grid has no decode-only graphs"
    if reason == DECODE_ONLY_OVER_MAX:
        top = max(decode)
        return f"D={d} (T={d * q}) is above the largest decode-only graph {list(top)}"
    return f"no decode-only graph with exactly D={d} (padding off)"
