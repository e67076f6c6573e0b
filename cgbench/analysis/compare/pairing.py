"""The pairing of two sides: a result file or a sweep folder read into points (``load_side``),
their points matched (by all their overrides, or by the ``pair_by`` keys: ``match_key``), each pair
compared (``compare_paths``) and what the pairs differ in said (config differences, an uncommitted
tree)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cgbench.analysis.compare.records import (
    FAILED,
    MISSING,
    SAME,
    SKIPPED,
    Comparison,
    Point,
    PointResult,
    Rule,
    severity,
)
from cgbench.analysis.compare.rules import NO_SLO, UNEQUAL, compare_docs, plain_config
from cgbench.config.overrides import split_override
from cgbench.config.schema import ConfigError
from cgbench.results.health import flag_codes
from cgbench.results.names import flatten as flatten_names
from cgbench.safeio import describe_missing


def load_side(path: Path) -> tuple[list[Point], bool]:
    """The points of a result file or a sweep directory; (points, is_sweep)."""
    from cgbench.analysis.sweep.run import DONE, INDEX_NAME, load_index
    from cgbench.results.document import load_result

    path = Path(path)
    if path.is_file():
        doc = load_result(path)
        return [Point(path.name, list(doc.get("overrides") or []), path, doc)], False
    if not path.is_dir():
        raise ConfigError(f"{path}: {describe_missing(path)}")
    if (path / INDEX_NAME).is_file():
        index = load_index(path)
        points = []
        for p in index["points"]:
            label = " ".join(p["overrides"]) or p["file"]
            if p.get("status") == DONE:
                points.append(Point(label, list(p["overrides"]), path / p["file"], load_result(path / p["file"])))
            else:
                points.append(Point(label, list(p["overrides"]), path / p["file"], None,
                                    p.get("error") or f"not run (status {p.get('status')})"))
        return points, True
    files = sorted(f for f in path.glob("*.json") if f.name != INDEX_NAME)
    if not files:
        raise ConfigError(f"{path}: no result JSON files and no {INDEX_NAME}")
    points = []
    for f in files:
        doc = load_result(f)
        ovr = list(doc.get("overrides") or [])
        points.append(Point(" ".join(ovr) or f.name, ovr, f, doc))
    return points, True


def _has_seed(points: list[Point]) -> bool:
    return any(split_override(o)[0] == "seed" for p in points for o in p.overrides)


def match_key(point: Point, with_seed: bool, pair_by: tuple[str, ...] = ()) -> tuple:
    """Overrides as an order-free key: all of them, or with ``pair_by`` the values of those keys
    only (None where the point does not set one). The seed is part of it only when either side set
    seeds (``--repeat`` appends ``seed=``): then a run without a seed override matches the repeat with
    its config's seed. When neither side set one, the seed is whatever the config default was on
    each side and is not used to match (a changed default shows up as a config difference instead)."""
    given = [split_override(o) for o in point.overrides if split_override(o)[0] != "seed"]
    if pair_by:
        values = dict(given)
        items = [(k, values.get(k)) for k in pair_by]
    else:
        items = sorted(given)
    if not with_seed:
        return tuple(items)
    seed = None
    if point.doc is not None:
        seed = (point.doc.get("config") or {}).get("seed")
    if seed is None:
        seed = next((v for k, v in map(split_override, point.overrides) if k == "seed"), None)
    return (*items, ("seed", str(seed)))


def _keyed(points: list[Point], with_seed: bool, side: Path, pair_by: tuple[str, ...] = ()) -> dict[tuple, Point]:
    out: dict[tuple, Point] = {}
    for p in points:
        k = match_key(p, with_seed, pair_by)
        if k in out:
            if pair_by:
                shown = " ".join(f"{key}={v}" for key, v in k)
                raise ConfigError(f"--pair-by {','.join(pair_by)}: {side} has two points with {shown} "
                                  f"({out[k].source.name}, {p.source.name}): add the key that tells them apart")
            raise ConfigError(f"{side}: two points with the same overrides: {out[k].source.name}, {p.source.name}")
        out[k] = p
    return out


def parse_pair_by(text: str | None) -> tuple[str, ...]:
    """``model,cg`` -> the override keys; () for None. ConfigError on an empty or repeated name."""
    if text is None:
        return ()
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise ConfigError(f"--pair-by: {text!r}: name override keys, comma-separated (model,cg)")
    if "seed" in keys:
        raise ConfigError("--pair-by seed: the seed pairs points by itself whenever either side sets seeds")
    if len(set(keys)) != len(keys):
        raise ConfigError(f"--pair-by: {text!r} names a key twice")
    return tuple(keys)


def _check_pair_by(pair_by: tuple[str, ...], sides: list[tuple[str, list[Point], Path]]) -> None:
    """Every ``pair_by`` key is set by some point of each side (else a typo, or an axis one side lacks)."""
    from cgbench.errors import did_you_mean

    for name, points, path in sides:
        present = sorted({split_override(o)[0] for p in points for o in p.overrides} - {"seed"})
        for key in pair_by:
            if key not in present:
                raise ConfigError(f"--pair-by {key}: no point of {name} ({path}) sets it"
                                  f"{did_you_mean(key, present)} (its points set: {', '.join(present) or 'nothing'})")


def _shown(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def config_differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``cg.max_graphs 16 -> 8`` for every config key whose value differs (``CONFIG_IGNORED`` aside)."""
    fb, fn = dict(flatten_names(plain_config(base))), dict(flatten_names(plain_config(new)))
    return [f"{k} {_shown(fb.get(k))} -> {_shown(fn.get(k))}" for k in sorted(set(fb) | set(fn))
            if fb.get(k) != fn.get(k)]


DIFFERENCES_SHOWN = 8  # config keys named in the warnings; --format json lists every pair's


def _difference_warnings(comp: Comparison) -> list[str]:
    """One line per differing config key, over the compared pairs: what ``--pair-by`` (or two
    files, which always pair) compares across."""
    from collections import Counter

    pairs = [p for p in comp.points if p.status not in (FAILED, MISSING)]
    counts = Counter(d for p in pairs for d in p.differs)
    if not counts:
        return []
    how = f"paired by {', '.join(comp.pair_by)}: " if comp.pair_by else ""
    lines = [f"{how}the configs differ: {d} ({n} of {len(pairs)} pair{'s' if len(pairs) != 1 else ''})"
             for d, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:DIFFERENCES_SHOWN]]
    if len(counts) > DIFFERENCES_SHOWN:
        lines.append(f"{how}{len(counts) - DIFFERENCES_SHOWN} more config differences (--format json lists "
                     "every pair's)")
    return lines


def short_labels(points: list[Point]) -> dict[int, str]:
    """Each point's overrides cut to the keys whose values differ between points (``model=hybrid
    policy=megatron``), keys shortened to their last part where that stays unambiguous."""
    given = [dict(split_override(o) for o in p.overrides) for p in points]
    keys = list(dict.fromkeys(k for g in given for k in g))
    varying = [k for k in keys if len({g.get(k) for g in given}) > 1] if len(points) > 1 else keys
    tails = [k.rsplit(".", 1)[-1] for k in varying]
    names = {k: (t if tails.count(t) == 1 else k) for k, t in zip(varying, tails, strict=True)}
    out = {}
    for i, (p, g) in enumerate(zip(points, given, strict=True)):
        text = " ".join(f"{names[k]}={g[k]}" for k in varying if k in g)
        out[i] = text or p.label
    return out


def _provenance(docs: list[dict[str, Any]]) -> set[tuple[Any, Any, Any]]:
    return {(d.get("git_sha"), d.get("git_dirty"), d.get("git_diff_hash")) for d in docs}


def uncommitted_warning(base: list[Point], new: list[Point]) -> str | None:
    """A warning when BASE and NEW ran from the same commit but not the same working tree: then any
    difference comes from an uncommitted change (which the commit id alone does not show)."""
    b = _provenance([p.doc for p in base if p.doc is not None])
    n = _provenance([p.doc for p in new if p.doc is not None])
    if len(b) != 1 or len(n) != 1:
        return None
    (bsha, bdirty, bhash), (nsha, ndirty, nhash) = b.pop(), n.pop()
    if bsha is None or bsha != nsha or (bdirty, bhash) == (ndirty, nhash):
        return None
    if bdirty is None or ndirty is None:
        return None  # a result written before git_dirty was recorded: nothing to say

    def state(dirty: bool, h: str | None) -> str:
        return f"uncommitted changes (diff {h})" if dirty else "a clean tree"

    return (f"BASE and NEW ran from the same commit {bsha[:10]} and differ only by uncommitted changes: "
            f"BASE from {state(bdirty, bhash)}, NEW from {state(ndirty, nhash)}")


def compare_paths(base: Path, new: Path, rules: list[Rule], pair_by: tuple[str, ...] = ()) -> Comparison:
    """Load both sides, match their points (by all their overrides, or by the ``pair_by`` keys) and
    compare each pair. ConfigError on bad input."""
    bpts, bsweep = load_side(base)
    npts, nsweep = load_side(new)
    comp = Comparison(Path(base), Path(new), pair_by=list(pair_by))
    if not bsweep and not nsweep:
        if pair_by:
            raise ConfigError("--pair-by: pairs the points of sweep folders; two result files are compared "
                              "as they are (their differing config keys are shown)")
        pairs: list[tuple[Point, Point | None]] = [(bpts[0], npts[0])]
        labels = {0: npts[0].label}
    else:
        if pair_by:
            _check_pair_by(pair_by, [("BASE", bpts, Path(base)), ("NEW", npts, Path(new))])
        with_seed = _has_seed(bpts) or _has_seed(npts)
        bk, nk = _keyed(bpts, with_seed, base, pair_by), _keyed(npts, with_seed, new, pair_by)
        if not any(k in nk for k in bk):
            how = f"the values of {', '.join(pair_by)}" if pair_by else \
                "their overrides; --pair-by KEYS pairs them by the swept axes alone"
            raise ConfigError(f"no common points between {base} and {new} (points are matched by {how})")
        if not nsweep:  # one NEW file against a BASE sweep: compare that point only
            bk = {k: v for k, v in bk.items() if k in nk}
        pairs = [(b, nk.get(k)) for k, b in bk.items()]
        labels = short_labels([b for b, _ in pairs])
        comp.only_new = [nk[k].label for k in nk if k not in bk]
        if comp.only_new:
            comp.notes.append(f"{len(comp.only_new)} points only in new (not compared): "
                              + "; ".join(comp.only_new[:5]) + (" ..." if len(comp.only_new) > 5 else ""))
    for i, (b, n) in enumerate(pairs):
        label = labels[i]
        base_health = flag_codes(b.doc) if b.doc is not None else None
        if n is None:
            comp.points.append(PointResult(label, b.overrides, MISSING, error=f"no point in {new}",
                                           health={"base": base_health, "new": None}))
        elif b.doc is None:
            comp.notes.append(f"{label}: not compared, the base run failed ({b.error})")
        elif n.doc is None:
            comp.points.append(PointResult(label, b.overrides, FAILED, error=n.error or "failed",
                                           health={"base": base_health, "new": None}))
        else:
            deltas = compare_docs(b.doc, n.doc, rules, label)
            status = min((d.status for d in deltas), key=severity, default=SAME)
            comp.points.append(PointResult(label, b.overrides, status, deltas,
                                           health={"base": flag_codes(b.doc), "new": flag_codes(n.doc)},
                                           differs=config_differences(b.doc, n.doc)))
    if not comp.points:  # every pair had a failed base: an "OK" here would compare nothing
        side = "on both sides" if all(n is None or n.doc is None for _, n in pairs) else "in the base"
        raise ConfigError(f"nothing to compare between {base} and {new}: every point failed {side} "
                          f"({len(pairs)} point{'s' if len(pairs) != 1 else ''}; {pairs[0][0].error or 'failed'})")
    if pair_by or not (bsweep or nsweep):  # pairs that may differ on purpose: say how
        comp.warnings += _difference_warnings(comp)
    configs = sorted({d.note for d in comp.deltas if d.metric.startswith("config.")})
    for note in configs:  # said once for the whole comparison, not only per point
        comp.warnings.append(f"{note}: the two sides ran under different rules; their metrics differ by design")
    skipped = sum(d.status == SKIPPED and d.note == UNEQUAL for d in comp.deltas)
    if skipped:
        comp.notes.append(f"{skipped} exact checks skipped: the runs are not both sim with equal configs")
    no_slo = sum(d.status == SKIPPED and d.note == NO_SLO for d in comp.deltas)
    if no_slo:
        comp.notes.append(f"{no_slo} goodput checks skipped: {NO_SLO} in new")
    warning = uncommitted_warning(bpts, npts)
    if warning:
        comp.warnings.append(warning)
    return comp
