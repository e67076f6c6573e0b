"""Differential test of cgbench's engine against Megatron-LM's own inference code, step by step.

The same requests (prompt lengths, output lengths, prefix-block ids, arrival steps), the same block
hashes and, under speculative decoding, the same accepted-draft counts (cgbench's seeded
``AcceptanceModel`` is the one source both sides draw from) go through

* cgbench: its step-by-step engine (``Engine``), one round and one step per driver step;
* Megatron: its ``DynamicInferenceContext`` / ``KVBlockAllocator`` / ``MambaSlotAllocator`` /
  ``DynamicInferenceEngine`` scheduling / ``update_requests`` functions (``scripts/megatron_diff_ref.py``
  says exactly which, and the two things it stands in for),

and after every step both sides' state is compared: what was admitted (request, chunk span, computed
tokens), the active rows and the paused rows in Megatron's row order with each request's KV block
count, the hidden chunked prefill, the free pool, the cached (evictable) blocks, the waiting queue in
order, which requests finished, were evicted or failed at arrival, the prefix-cache counters (hits,
blocks matched, computed and skipped prefill tokens, coordination waits), the Mamba states held, the
tokens generated, and the outcome (an exception of Megatron's is cgbench's ``engine_assertion``).

The data-parallel coordinator's routing is compared the same way: the rank its own message handlers
choose for each request (``handle_submit_request``, with ``handle_engine_reply`` for completions)
against ``cgbench.engine.router.Router``.

Where Megatron comes from (``megatron_trees``): ``$CGBENCH_MEGATRON_LM``, one or more Megatron-LM
trees (a checkout, or the files of a ref; ``os.pathsep``-separated), or ``$CGBENCH_MEGATRON_GIT``, a
Megatron-LM git directory (a bare mirror will do), from which the refs of ``REFS`` are extracted
once into a cache folder outside the repository (``$CGBENCH_MEGATRON_CACHE``, default
``~/.cache/cgbench``). Nothing of Megatron's is kept in the repository.

Usage:

    python scripts/megatron_diff.py live [--runs N] [--seed S] [--rules 0.19.2|main]
    python scripts/megatron_diff.py record [--runs N] [--seed S]   # writes the golden traces
    python scripts/megatron_diff.py replay                          # cgbench against the golden traces
    python scripts/megatron_diff.py show --rules 0.19.2 --seed S --index I   # one scenario, step by step

The golden traces (``tests/data/megatron_diff/*.json.gz``) are this script's own output: scenarios
and Megatron's per-step state, recorded by ``record``; ``tests/engine/test_megatron_golden.py``
replays them through cgbench on every CI run (no Megatron needed) and demands 0 differences.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GOLDEN_DIR = REPO / "tests" / "data" / "megatron_diff"
# the refs of the two rule sets: megatron-core 0.19.x's release branch (0.19.1 there; the engine
# files are the same as core_v0.19.0's) and Megatron-LM main at d98e8a64
REFS = {"0.19.2": "core_r0.19.0", "main": "d98e8a64"}
SOURCE_TOKENS = 16
STEP_LIMIT = 1500
STALL_STEPS = 40  # a run whose state stops changing for this many steps after the last arrival stalls

# the behaviours the corpus must exercise (tags the reference side sets; docs/prefix-caching.md)
COVERAGE = {
    "coordination_wait_ends_chunked_pass": "a coordination wait ends a chunked-prefill pass with requests behind it",
    "unique_active_blocks": "resume counts the active rows' blocks by unique id (shared blocks among them)",
    "unique_paused_blocks": "evict counts the paused rows' blocks by unique id (shared blocks among them)",
    "evicted_request_cached_prefix": "an evicted request is re-admitted while its prompt's blocks are cached",
    "resume_capped_by_free_pool": "resume is capped by the free pool while cached blocks are evictable",
    "block_registered_twice": "a chunk ending mid-block matched a cached block the next chunk registers again",
    "not_a_forest": "evict_lru_blocks fails its 'not a forest' assertion (Megatron's defect)",
    "speculative_rewind_releases_block": "rejected drafts cross back into the previous block (rewind_kv_cache)",
}


# -- scenarios --------------------------------------------------------------------------------------


def source_ids(rid: int, family: int, diverge: int, prompt: int) -> array:
    """The prompt's source-block ids: those of prompt family ``family`` for its first ``diverge``
    blocks, the request's own after them."""
    from cgbench.workload.prefix_hashes import mix

    n = -(-prompt // SOURCE_TOKENS)
    return array("q", [mix(family + 1, j) if j < diverge else mix(1000 + family, mix(rid + 1, j))
                       for j in range(n)])


def random_scenario(rng: random.Random, rules: str) -> dict:
    """A random scenario under ``rules``: a small engine, a tight KV pool, requests of a few prompt
    families (shared prefixes, repeated prompts, later turns that extend an earlier prompt)."""
    kind = rng.choice(["transformer", "transformer", "hybrid"])
    chunked = rng.random() < 0.6
    block = rng.choice([4, 8, 8, 16, 16, 32])
    msl = rng.choice([64, 96, 128, 192])
    per_request = -(-msl // block)
    spec = rng.choice([0, 0, 0, 0, 0, 1, 2])
    max_requests = rng.choice([4, 8, 8, 16])
    max_tokens = max(rng.choice([16, 32, 64, 128, 256]), max_requests * (spec + 1))
    prefix = rng.random() < 0.85
    sc: dict[str, Any] = {
        "rules": rules, "kind": kind, "chunked": chunked, "block": block, "msl": msl, "spec": spec,
        "max_requests": max_requests, "max_tokens": max_tokens,
        "kv": rng.randint(max(2, per_request // 2 + 1), per_request * rng.choice([1, 2, 3])),
        "paused": rng.choice([0, 0, 1, 2, 4, 8]), "prefix": prefix,
        "eviction": rng.choice(["lru", "lru", "lru", "ref_zero"]) if prefix else "lru",
        "mamba_slots": rng.choice([0, 1, 2, 4, 8]) if kind == "hybrid" and prefix else 0,
        "ssm_chunk": rng.choice([block, block, 2 * block, max(1, block // 2)]),
        "graphs": None, "accept": None, "seed": rng.randint(0, 1 << 30),
    }
    if spec and rng.random() < 0.7:
        weights = [rng.choice([0, 1, 2, 5]) for _ in range(spec + 1)]
        if sum(weights[:-1]) == 0:
            weights[0] = 1
        sc["accept"] = weights
    if rng.random() < 0.2:
        sc["graphs"] = _random_graphs(rng, max_tokens, max_requests, spec, msl)
    if rng.random() < 0.2:  # the corner of Megatron's defect: chunks ending mid-block in a tight pool
        sc.update(chunked=True, prefix=True, eviction="lru", spec=0, accept=None, graphs=None,
                  max_tokens=max(max_requests, rng.choice([16, 24, 32, 48])))
    reqs: list[list[int]] = []
    n = rng.randint(2, 14)
    step = 0
    for rid in range(n):
        if rng.random() < 0.4:
            step += rng.choice([1, 2, 5, 10, 20])
        if reqs and rng.random() < 0.25:  # a later turn: an earlier prompt, its output, and more
            prev = rng.choice(reqs)
            prompt = min(msl, prev[2] + prev[3] + rng.randint(0, 3 * SOURCE_TOKENS))
            family, diverge = prev[4], prev[5]
        else:
            whole_blocks = block * rng.randint(1, max(1, msl // block))
            prompt = rng.choice([rng.randint(1, msl), rng.randint(1, msl), whole_blocks])
            family, diverge = rng.randint(0, 2), rng.choice([0, 1, 2, 4, 1000, 1000])
        reqs.append([rid, step, prompt, rng.randint(1, 40), family, diverge])
    sc["reqs"] = reqs
    return sc


def _random_graphs(rng: random.Random, max_tokens: int, max_requests: int, spec: int, msl: int) -> list[list[int]]:
    """A small captured list in Megatron's stored order (token count descending)."""
    out = set()
    for _ in range(rng.randint(1, 6)):
        p = rng.randint(0, min(4, max_requests))
        d = rng.randint(0 if p else 1, max_requests - p)
        if p == 0:  # a decode-only graph: one step of each of its rows
            t = d * (spec + 1)
        else:
            t = rng.randint(p + d * (spec + 1), max(p + d * (spec + 1), min(max_tokens, p * msl + d * (spec + 1))))
        if t <= max_tokens:
            out.add((t, p, d))
    return [list(g) for g in sorted(out, key=lambda g: (-g[0], -g[1], -g[2]))]


def scenarios(rules: str, seed: int, runs: int) -> Iterator[dict]:
    rng = random.Random(f"{rules}:{seed}")
    for _ in range(runs):
        yield random_scenario(rng, rules)


# -- cgbench's side ---------------------------------------------------------------------------------


class _Backend:
    """Every step takes 1 ms; nothing else of a backend matters to the state compared."""

    pricer = None
    captured = None  # the simulator's answer: every grid shape replays

    def run_step(self, work: Any, decodes: Any) -> float:
        return 0.001

    def release(self, req: Any) -> None:
        return None

    def token_ids(self, req: Any) -> list[int]:
        return []

    def report(self) -> None:
        return None


class _NoArrivals:
    """The driver hands the engine its requests (``Engine.arrive``) at their steps."""

    total = 0

    def pop_due(self, now_s: float) -> list:
        return []

    def next_arrival_s(self) -> None:
        return None

    def on_complete(self, now_s: float) -> None:
        return None

    def exhausted(self) -> bool:
        return True


def bench_config(sc: dict) -> Any:
    """The ``BenchConfig`` a scenario runs under."""
    from cgbench.config.schema import BenchConfig, CGConfig, EngineConfig, ModelConfig, PolicyConfig

    e = replace(EngineConfig(), max_requests=sc["max_requests"], max_tokens=sc["max_tokens"],
                max_sequence_length=sc["msl"], block_size=sc["block"], kv_blocks=sc["kv"],
                paused_blocks=sc["paused"], chunked_prefill=sc["chunked"], num_speculative_tokens=sc["spec"],
                megatron_rules=sc["rules"], prefix_caching=sc["prefix"],
                prefix_caching_mamba_slots=sc["mamba_slots"], prefix_caching_eviction=sc["eviction"],
                ssm_chunk_alignment=sc["ssm_chunk"], oracle=True, check_invariants=True,
                stall_steps=10 * STEP_LIMIT)
    if sc["accept"]:
        e = replace(e, spec_acceptance=replace(e.spec_acceptance, lengths=list(sc["accept"])))
    kind = sc["kind"]
    model = replace(ModelConfig(), kind=kind, name=kind, layer_pattern="M-M*-" if kind == "hybrid" else "*-")
    if sc["graphs"]:
        cg = CGConfig(kind="explicit", graphs=[list(g) for g in sc["graphs"]], all_prefills=True)
    else:
        cg = CGConfig(all_prefills=False)
    return BenchConfig(model=model, cg=cg, policy=PolicyConfig(name="megatron"), engine=e, seed=sc["seed"])


def acceptance_of(sc: dict) -> Any:
    """cgbench's acceptance model of the scenario (None: every draft accepted)."""
    from cgbench.engine.acceptance import acceptance_model

    cfg = bench_config(sc)
    return acceptance_model(cfg.engine, cfg.seed)


class CgbenchRun:
    """One scenario on cgbench's step-by-step engine, a round and a step per driver step."""

    def __init__(self, sc: dict) -> None:
        from cgbench.pipeline import build_engine

        self.sc = sc
        self.engine = build_engine(bench_config(sc), backend=_Backend(), stream=_NoArrivals())
        self.step = 0
        self.failed_at_arrival: list[int] = []

    def arrive(self, rid: int, prompt: int, output: int, ids: Sequence[int]) -> None:
        from cgbench.workload.arrivals import RequestSpec

        eng = self.engine
        queued = len(eng.queue)
        eng.arrive(RequestSpec(rid, eng.state.now_s, prompt, output, array("q", ids)))
        if len(eng.queue) == queued:
            self.failed_at_arrival.append(rid)

    def run_step(self) -> dict:
        eng = self.engine
        before = self._live()
        evictions = {r.id: r.evictions for r in [*self._live_requests(), *eng.queue]}
        result = eng.begin_round()
        admitted = [[a.request.id, a.chunk, a.computed if a.computed >= 0 else a.chunk] for a in eng.ctx.admitted]
        record: dict[str, Any] = {"adm": admitted}
        if not eng.idle and not eng.halted:  # (halted: Megatron's code raised while scheduling)
            eng.advance(result)
        if eng.halted:
            raise CgbenchCrash(eng.state.diagnosis)
        now = self._live()
        queued = {r.id for r in eng.queue}
        evicted = sorted(r.id for r in eng.queue if r.evictions > evictions.get(r.id, r.evictions))
        gone = (before | {a[0] for a in admitted}) - now - queued
        record.update(self._state(sorted(gone), evicted))
        self.step += 1
        return record

    def _live_requests(self) -> list:
        eng = self.engine
        out = list(eng.order) + list(eng.paused)
        if eng.chunked is not None and eng.chunked not in out:
            out.append(eng.chunked)
        return out

    def _live(self) -> set[int]:
        return {r.id for r in self._live_requests()}

    def _state(self, finished: list[int], evicted: list[int]) -> dict:
        eng = self.engine
        ctx = eng.ctx
        rows = [[r.id, r.blocks] for r in eng.order]
        paused = [[r.id, r.blocks] for r in eng.paused]
        hidden = None
        if eng.chunked is not None and all(r is not eng.chunked for r in eng.order):
            hidden = [eng.chunked.id, eng.chunked.blocks]
        out: dict[str, Any] = {"rows": rows, "paused": paused, "chunked": hidden, "free": ctx.free_blocks,
                               "queue": [r.id for r in eng.queue], "fin": finished, "ev": evicted}
        pc = ctx.prefix
        if pc is not None:
            c = pc.counters
            out["cached"] = ctx.cached_blocks()
            out["pc"] = [c.hits, c.blocks_matched, c.prefill_computed_tokens, c.prefill_skipped_tokens,
                         c.coordination_waits]
            if pc.mamba_cache is not None:
                out["mamba"] = pc.mamba_cache.states()
        if ctx.num_speculative_tokens > 0:
            out["gen"] = sorted([r.id, r.generated] for r in list(eng.order) + list(eng.paused))
        return out


class CgbenchCrash(Exception):
    """cgbench's engine stopped with ``engine_assertion``."""


# -- running both -----------------------------------------------------------------------------------


def _drained(rec: dict) -> bool:
    return not rec["queue"] and not rec["rows"] and not rec["paused"] and rec["chunked"] is None


def run_side(sc: dict, side: Any) -> tuple[list[dict], dict]:
    """Drive ``side`` (a ``CgbenchRun`` or the reference's ``MegatronRun``) through the scenario: the
    requests arrive at their steps, one step a driver step, until everything that arrived has ended
    (or ``STEP_LIMIT``). Returns the per-step records and the outcome."""
    reqs = sorted(sc["reqs"], key=lambda r: (r[1], r[0]))
    last_arrival = max(r[1] for r in reqs)
    records: list[dict] = []
    i = 0
    crash = getattr(side, "Crash", CgbenchCrash)
    arrive = getattr(side, "arrive_safely", side.arrive)
    for step in range(STEP_LIMIT):
        failed_before = len(side.failed_at_arrival)
        while i < len(reqs) and reqs[i][1] == step:
            rid, _, prompt, output, family, diverge = reqs[i]
            try:
                arrive(rid, prompt, output, source_ids(rid, family, diverge, prompt))
            except crash as e:
                return records, {"outcome": "engine_assertion", "step": step, "why": str(e)[:300]}
            i += 1
        try:
            rec = side.run_step()
        except crash as e:
            return records, {"outcome": "engine_assertion", "step": step, "why": str(e)[:300]}
        rec["failed"] = sorted(side.failed_at_arrival[failed_before:])
        records.append(rec)
        if step >= last_arrival and _drained(rec):
            return records, {"outcome": "completed", "step": step}
        if step >= last_arrival + STALL_STEPS and all(r == rec for r in records[-STALL_STEPS:]):
            return records, {"outcome": "stalled", "step": step}  # nothing changes any more
    return records, {"outcome": "step_limit", "step": STEP_LIMIT}


def cgbench_records(sc: dict) -> tuple[list[dict], dict]:
    return run_side(sc, CgbenchRun(sc))


def megatron_records(sc: dict, mg: Any) -> tuple[list[dict], dict, list[str]]:
    ref = _ref()
    run = ref.MegatronRun(mg, sc, acceptance_of(sc))
    run.Crash = ref.Crash
    records, outcome = run_side(sc, run)
    tags = set(run.tags)
    if outcome["outcome"] == "engine_assertion" and "not a forest" in outcome.get("why", ""):
        tags.add("not_a_forest")
    if outcome["outcome"] == "engine_assertion" and "TokenOverflowError" in outcome.get("why", ""):
        tags.add("token_overflow_in_add_request")
    return records, outcome, sorted(tags)


def first_difference(a: list[dict], oa: dict, b: list[dict], ob: dict) -> str | None:
    """Where two runs' records first differ (None: they agree step for step and in outcome)."""
    for step, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            return f"step {step}: " + "; ".join(f"{k}: cgbench {x.get(k)} != megatron {y.get(k)}" for k in keys)
    if len(a) != len(b) or oa.get("outcome") != ob.get("outcome"):
        return f"outcome: cgbench {oa} after {len(a)} steps != megatron {ob} after {len(b)} steps"
    return None


# -- data-parallel routing --------------------------------------------------------------------------


def random_routing_case(rng: random.Random) -> dict:
    """Submissions and completions on a few ranks: prompts of a few families (shared prefixes)."""
    ranks = rng.randint(2, 5)
    block = rng.choice([8, 16, 32])
    case: dict[str, Any] = {"ranks": ranks, "block": block, "max_requests": rng.choice([2, 4, 8, 64]),
                            "policy": rng.choice(["load_balanced", "first_prefix_block", "longest_prefix"]),
                            "alpha": rng.choice([0.0, 0.25, 0.5, 0.5, 0.75, 1.0]), "events": []}
    live: list[int] = []
    for rid in range(rng.randint(4, 40)):
        while live and rng.random() < 0.35:
            case["events"].append(["finish", live.pop(rng.randrange(len(live)))])
        prompt = rng.randint(1, 200)
        case["events"].append(["submit", rid, prompt, rng.randint(0, 3), rng.choice([0, 1, 3, 1000])])
        live.append(rid)
    return case


def route_cgbench(case: dict) -> list[int]:
    from cgbench.engine.router import Router
    from cgbench.workload.arrivals import RequestSpec

    policy = {"load_balanced": "least_loaded", "first_prefix_block": "prefix_first_block",
              "longest_prefix": "prefix_longest"}[case["policy"]]
    router = Router(case["ranks"], policy, case["alpha"], case["max_requests"], block_size=case["block"],
                    source_tokens=SOURCE_TOKENS)
    loads = [0] * case["ranks"]
    where: dict[int, int] = {}
    out = []
    for ev in case["events"]:
        if ev[0] == "submit":
            _, rid, prompt, family, diverge = ev
            rank = router.route(RequestSpec(rid, 0.0, prompt, 1, source_ids(rid, family, diverge, prompt)), loads)
            loads[rank] += 1
            where[rid] = rank
            out.append(rank)
        else:
            loads[where.pop(ev[1])] -= 1
    return out


def route_megatron(case: dict, mg: Any) -> list[int]:
    ref = _ref()
    coord = ref.CoordinatorRouting(mg, case["ranks"], case["policy"], case["alpha"], case["max_requests"],
                                   case["block"])
    where: dict[int, int] = {}
    out = []
    for ev in case["events"]:
        if ev[0] == "submit":
            _, rid, prompt, family, diverge = ev
            tokens = ref.prompt_tokens(source_ids(rid, family, diverge, prompt), prompt)
            rank = coord.submit(rid, tokens)
            where[rid] = rank
            out.append(rank)
        else:
            coord.finish(ev[1], where.pop(ev[1]))
    return out


# -- where Megatron comes from ----------------------------------------------------------------------


def _ref() -> Any:
    """``scripts/megatron_diff_ref.py`` (imports torch when a tree is loaded)."""
    name = "cgbench_script_megatron_diff_ref"
    if name in sys.modules:
        return sys.modules[name]
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("megatron_diff_ref.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _tree_rules(tree: Path) -> str:
    text = (tree / "megatron" / "core" / "inference" / "contexts" / "kv_block_allocator.py").read_text()
    return "main" if "def get_allocatable_count" in text else "0.19.2"


def megatron_trees() -> dict[str, Path]:
    """The Megatron-LM trees available, by rule set (empty: none; the live tests then skip)."""
    out: dict[str, Path] = {}
    for p in filter(None, os.environ.get("CGBENCH_MEGATRON_LM", "").split(os.pathsep)):
        tree = Path(p)
        if (tree / "megatron" / "core" / "inference" / "contexts" / "kv_block_allocator.py").is_file():
            out.setdefault(_tree_rules(tree), tree)
    git_dir = os.environ.get("CGBENCH_MEGATRON_GIT")
    if git_dir:
        cache = Path(os.environ.get("CGBENCH_MEGATRON_CACHE", Path.home() / ".cache" / "cgbench"))
        for rules, ref in REFS.items():
            if rules in out:
                continue
            tree = cache / f"megatron-{ref}"
            if not (tree / "megatron" / "core").is_dir():
                tree.mkdir(parents=True, exist_ok=True)
                archive = subprocess.run(["git", "--git-dir", git_dir, "archive", ref, "megatron/core"],
                                         check=True, capture_output=True).stdout
                subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            out[rules] = tree
    return out


def load_megatron(rules: str) -> Any:
    trees = megatron_trees()
    if rules not in trees:
        raise SystemExit(f"error: no Megatron-LM tree for rules {rules} "
                         "(set CGBENCH_MEGATRON_LM or CGBENCH_MEGATRON_GIT)")
    import logging

    logging.disable(logging.WARNING)  # Megatron's starvation warnings of stalled runs
    return _ref().install_megatron(str(trees[rules]))


# -- golden traces ----------------------------------------------------------------------------------


def golden_path(rules: str) -> Path:
    return GOLDEN_DIR / f"prefix-{rules}.json.gz"


def routing_golden_path() -> Path:
    return GOLDEN_DIR / "routing.json.gz"


def write_json_gz(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(data)


def read_json_gz(path: Path) -> Any:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


def record(rules: str, seed: int, runs: int) -> dict:
    mg = load_megatron(rules)
    cases = []
    for sc in scenarios(rules, seed, runs):
        records, outcome, tags = megatron_records(sc, mg)
        cases.append({"scenario": sc, "steps": records, "outcome": outcome, "tags": tags})
    return {"rules": rules, "ref": REFS[rules], "seed": seed, "cases": cases}


def record_routing(seed: int, runs: int) -> dict:
    mg = load_megatron("0.19.2")
    rng = random.Random(f"routing:{seed}")
    cases = []
    for _ in range(runs):
        case = random_routing_case(rng)
        cases.append({"case": case, "ranks": route_megatron(case, mg)})
    return {"ref": REFS["0.19.2"], "seed": seed, "cases": cases}


def replay_routing(doc: dict) -> list[str]:
    out = []
    for k, c in enumerate(doc["cases"]):
        got = route_cgbench(c["case"])
        if got != c["ranks"]:
            first = next(i for i, (a, b) in enumerate(zip(got, c["ranks"], strict=True)) if a != b)
            out.append(f"routing case {k}: request {first}: cgbench rank {got[first]} != megatron {c['ranks'][first]}")
    return out


def replay(doc: dict) -> list[str]:
    """cgbench against a golden document: one line per case that differs."""
    out = []
    for k, case in enumerate(doc["cases"]):
        try:
            records, outcome = cgbench_records(case["scenario"])
        except Exception as e:  # noqa: BLE001 - cgbench failing on a scenario is a difference too
            out.append(f"case {k}: cgbench raised {type(e).__name__}: {e}")
            continue
        diff = first_difference(records, outcome, case["steps"], case["outcome"])
        if diff is not None:
            out.append(f"case {k}: {diff}")
    return out


def live(rules: str, seed: int, runs: int, *, verbose: bool = False) -> tuple[int, list[str], set[str]]:
    """``runs`` random scenarios on both sides; (runs, differences, tags seen)."""
    mg = load_megatron(rules)
    diffs, tags = [], set()
    for k, sc in enumerate(scenarios(rules, seed, runs)):
        mrec, mout, mtags = megatron_records(sc, mg)
        tags.update(mtags)
        try:
            crec, cout = cgbench_records(sc)
        except Exception as e:  # noqa: BLE001 - cgbench failing on a scenario is a difference too
            diffs.append(f"{rules} seed {seed} index {k}: cgbench raised {type(e).__name__}: {e}")
            if verbose:
                print(diffs[-1][:2000])
            continue
        diff = first_difference(crec, cout, mrec, mout)
        if diff is not None:
            diffs.append(f"{rules} seed {seed} index {k}: {diff}")
            if verbose:
                print(diffs[-1][:2000])
    return runs, diffs, tags


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["live", "record", "replay", "show", "routing"])
    ap.add_argument("--rules", choices=list(REFS), action="append")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", type=int, default=0)
    args = ap.parse_args(argv)
    rule_sets = args.rules or list(REFS)
    sys.setrecursionlimit(10000)
    if args.command == "live":
        bad = 0
        for rules in rule_sets:
            n, diffs, tags = live(rules, args.seed, args.runs, verbose=True)
            bad += len(diffs)
            print(f"{rules}: {n} runs, {len(diffs)} differences; behaviours seen: {', '.join(sorted(tags))}")
        return 1 if bad else 0
    if args.command == "record":
        for rules in rule_sets:
            doc = record(rules, args.seed, args.runs)
            write_json_gz(golden_path(rules), doc)
            tags = sorted({t for c in doc["cases"] for t in c["tags"]})
            print(f"{golden_path(rules).relative_to(REPO)}: {len(doc['cases'])} cases; behaviours: {', '.join(tags)}")
        routing = record_routing(args.seed, args.runs)
        write_json_gz(routing_golden_path(), routing)
        print(f"{routing_golden_path().relative_to(REPO)}: {len(routing['cases'])} routing cases")
        return 0
    if args.command == "replay":
        bad = 0
        for rules in rule_sets:
            diffs = replay(read_json_gz(golden_path(rules)))
            bad += len(diffs)
            print(f"{rules}: {len(diffs)} differences", *diffs[:5], sep="\n")
        diffs = replay_routing(read_json_gz(routing_golden_path()))
        bad += len(diffs)
        print(f"routing: {len(diffs)} differences", *diffs[:5], sep="\n")
        return 1 if bad else 0
    if args.command == "routing":
        mg = load_megatron(rule_sets[0])
        rng = random.Random(args.seed)
        bad = 0
        for k in range(args.runs):
            case = random_routing_case(rng)
            if route_cgbench(case) != route_megatron(case, mg):
                bad += 1
                print(f"case {k} differs: {case}")
        print(f"routing: {args.runs} cases, {bad} differences")
        return 1 if bad else 0
    sc = list(scenarios(rule_sets[0], args.seed, args.index + 1))[-1]
    print(json.dumps(sc))
    mg = load_megatron(rule_sets[0])
    mrec, mout, tags = megatron_records(sc, mg)
    crec, cout = cgbench_records(sc)
    for step in range(max(len(mrec), len(crec))):
        a = crec[step] if step < len(crec) else None
        b = mrec[step] if step < len(mrec) else None
        print(f"{step:4d} {'==' if a == b else '!='} cgbench  {a}\n     {'  '}megatron {b}")
    print("cgbench:", cout, "\nmegatron:", mout, tags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
