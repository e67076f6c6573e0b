"""Megatron-LM's own command-line arguments as cgbench overrides (``cgbench run --megatron-args``).

Every argument of a pasted launch line lands in one class, all printed:

* ``translated``: becomes cgbench overrides (``--hidden-size 4096`` -> ``model.hidden_size=4096``);
* ``no effect``: known to Megatron, changes nothing cgbench models (``--lr``, logging, checkpoints);
* ``not modelled``: known and relevant, but cgbench cannot model it: refused by name, saying what is
  missing (unless the value is the one cgbench assumes, e.g. ``--pipeline-model-parallel-size 1``).

A name Megatron does not have is refused with the closest real one. ``RULES`` is the one table (it is
rendered into cgbench docs megatron-args by scripts/megatron_args_doc.py); Megatron's names are those of
megatron-core 0.19.2, extracted into ``data/megatron_args.txt``. Semantics follow megatron-core
0.19.2's ``megatron/training/arguments.py``, ``training/config/inference_config.py`` and
``core/inference/contexts/dynamic_context.py`` (KV sizing).
"""

from __future__ import annotations

import difflib
import math
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from cgbench.config.megatron_ranges import check_values
from cgbench.config.overrides import override_key
from cgbench.errors import ConfigError

MEGATRON_VERSION = "0.19.2"
NAMES_FILE = Path(__file__).with_name("data") / "megatron_args.txt"
EXAMPLE_NAMES_FILE = NAMES_FILE.with_name("megatron_example_args.txt")
GIB = 1024**3  # Megatron's buffer "GB" are GiB (buffer_size_gb * 1024**3)

TRANSLATED, NO_EFFECT, NOT_MODELLED = "translated", "no effect", "not modelled"


@dataclass(frozen=True)
class Rule:
    """How one Megatron flag (or every flag with a prefix, ``flag`` ending in ``*``) maps.
    ``neutral``: for a not-modelled flag, the values that are what cgbench assumes (accepted)."""

    flag: str
    kind: str
    keys: str  # the cgbench keys it sets (docs)
    note: str
    neutral: tuple[str, ...] = ()
    # the one cgbench setting the flag writes, read backwards by every printer of a launch line
    # (``flag_for``, ``graph_launch_args``): a key (the flag carries its value) or ``key=value`` (a
    # switch, or a flag whose value is always ``value``)
    sets: str = ""
    value: str = ""
    alias_of: str = ""  # an older spelling of that flag: same meaning, never printed


_T, _N, _X = TRANSLATED, NO_EFFECT, NOT_MODELLED

RULES: tuple[Rule, ...] = (
    # model architecture
    Rule("--num-layers", _T, "model.layer_pattern, model.pattern_repeat",
         "no hybrid pattern: '*-' (attention + MLP) repeated N times; with a hybrid pattern Megatron "
         "derives the layer count from the pattern and so does cgbench"),
    Rule("--hybrid-layer-pattern", _T, "model.layer_pattern, model.pattern_repeat=1, model.kind",
         "M Mamba-2, * attention, - MLP, E MoE (with --num-experts); kind hybrid when it has an M. G, "
         "pipe '|' and MTP '/' segments are refused"),
    Rule("--hybrid-override-pattern", _T, "model.layer_pattern, model.pattern_repeat=1, model.kind",
         "deprecated spelling of --hybrid-layer-pattern (same meaning)", alias_of="--hybrid-layer-pattern"),
    Rule("--is-hybrid-model", _T, "model.kind=hybrid", "marks a hybrid model (the pattern sets the layers)"),
    Rule("--hidden-size", _T, "model.hidden_size", ""),
    Rule("--ffn-hidden-size", _T, "model.ffn_hidden_size", "Megatron's default 4 x hidden when absent"),
    Rule("--num-attention-heads", _T, "model.num_attention_heads", ""),
    Rule("--group-query-attention", _T, "model.num_kv_heads",
         "with --num-query-groups; without it KV heads = attention heads"),
    Rule("--num-query-groups", _T, "model.num_kv_heads", "read only with --group-query-attention, as Megatron"),
    Rule("--kv-channels", _T, "model.head_dim", "Megatron's default hidden / heads when absent"),
    Rule("--mamba-state-dim", _T, "model.mamba_state_dim", ""),
    Rule("--mamba-head-dim", _T, "model.mamba_head_dim", ""),
    Rule("--mamba-num-groups", _T, "model.mamba_num_groups", ""),
    Rule("--mamba-num-heads", _T, "model.mamba_num_heads",
         "Megatron's default hidden x 2 / mamba head dim when absent"),
    Rule("--padded-vocab-size", _T, "model.vocab_size", "taken as is"),
    Rule("--vocab-size", _T, "model.vocab_size",
         "padded as Megatron pads it: up to a multiple of --make-vocab-size-divisible-by (128) x TP"),
    Rule("--make-vocab-size-divisible-by", _T, "model.vocab_size", "the padding of --vocab-size"),
    Rule("--swiglu", _T, "model.gated_mlp=true", "gated MLP (3 matrices)"),
    Rule("--squared-relu", _T, "model.gated_mlp=false", "2-matrix MLP"),
    Rule("--bf16", _T, "model.dtype_bytes=2",
         "with model flags and neither --bf16 nor --fp16, Megatron keeps fp32 parameters: dtype_bytes=4"),
    Rule("--fp16", _T, "model.dtype_bytes=2", ""),
    Rule("--max-position-embeddings", _T, "engine.max_sequence_length",
         "caps the context length only with --position-embedding-type learned_absolute, as Megatron"),
    Rule("--position-embedding-type", _T, "engine.max_sequence_length",
         "only learned_absolute changes anything (with --max-position-embeddings); rope / none price alike"),
    # parallelism
    Rule("--tensor-model-parallel-size", _T, "engine.tp_size", "", sets="engine.tp_size"),
    Rule("--expert-model-parallel-size", _T, "engine.ep_size", ""),
    Rule("--inference-moe-token-dispatcher-type", _T, "engine.moe_dispatcher", "nccl | nvls"),
    Rule("--pipeline-model-parallel-size", _X, "", "pipeline parallelism (cgbench models one stage)",
         ("1",)),
    Rule("--context-parallel-size", _X, "", "context parallelism", ("1",)),
    Rule("--expert-tensor-parallel-size", _X, "", "expert tensor parallelism", ("1",)),
    Rule("--sequence-parallel", _X, "", "sequence-parallel collectives (cgbench prices TP all-reduces)"),
    Rule("--inference-shards", _X, "", "disaggregated / sharded inference"),
    # the dynamic inference engine
    Rule("--inference-dynamic-batching", _T, "(the engine keys below)",
         "turns on the KV sizing of --inference-dynamic-batching-buffer-size-gb (default 40 GiB)"),
    Rule("--inference-dynamic-batching-buffer-size-gb", _T, "engine.kv_blocks",
         "GiB per GPU -> blocks: buffer // block bytes (2 x dtype x attention layers x block x KV heads "
         "per rank x head dim), after Megatron's Mamba-state share; minus the dummy block and the paused "
         "blocks. Megatron's default 40 GiB with --inference-dynamic-batching"),
    Rule("--inference-dynamic-batching-paused-buffer-size-gb", _T, "engine.paused_blocks",
         "GiB -> blocks as the buffer"),
    Rule("--inference-dynamic-batching-mamba-memory-ratio", _T, "engine.kv_blocks",
         "the buffer share kept for Mamba states, as Megatron"),
    Rule("--inference-dynamic-batching-block-size", _T, "engine.block_size", "tokens per KV block",
         sets="engine.block_size"),
    Rule("--inference-dynamic-batching-max-requests", _T, "engine.max_requests",
         "absent: Megatron's default, the KV blocks (minus the dummy), capped by Mamba state, rounded "
         "down to TP and 4"),
    Rule("--inference-dynamic-batching-max-tokens", _T, "engine.max_tokens", "Megatron's default 16384",
         sets="engine.max_tokens"),
    Rule("--inference-max-seq-length", _T, "engine.max_sequence_length",
         "Megatron's default 2560; raised to max_requests when smaller, as Megatron"),
    Rule("--enable-chunked-prefill", _T, "engine.chunked_prefill=true", "", sets="engine.chunked_prefill=true"),
    Rule("--num-speculative-tokens", _T, "engine.num_speculative_tokens", ""),
    Rule("--inference-dynamic-batching-unified-memory-level", _X, "",
         "unified (host) memory for the KV buffer", ("0",)),
    Rule("--inference-dynamic-batching-prefix-caching", _T,
         "engine.prefix_caching=true, engine.prefix_caching_eviction",
         "prefix caching (cgbench docs prefix-caching), with Megatron's default eviction policy ref_zero unless "
         "--inference-dynamic-batching-prefix-caching-eviction-policy says lru"),
    Rule("--inference-dynamic-batching-prefix-caching-eviction-policy", _T, "engine.prefix_caching_eviction",
         "ref_zero (Megatron's default: a block is freed when its last holder releases it) | lru (kept cached "
         "until its room is needed); read with --inference-dynamic-batching-prefix-caching"),
    Rule("--no-inference-dynamic-batching-prefix-caching", _N, "", "prefix caching off: the default"),
    Rule("--inference-dynamic-batching-prefix-caching-mamba-gb", _X, "",
         "prefix caching of Mamba states: set engine.prefix_caching_mamba_slots (the durable slots) instead"),
    Rule("--inference-dynamic-batching-async-sched-mode", _T, "engine.async_overlap",
         "legacy | async: async overlaps scheduling with the forward (cgbench docs speculative)"),
    Rule("--mamba-inference-conv-states-dtype", _X, "",
         "a Mamba state dtype other than the model's 2 bytes", ("bf16", "fp16")),
    Rule("--mamba-inference-ssm-states-dtype", _X, "",
         "a Mamba state dtype other than the model's 2 bytes", ("bf16", "fp16")),
    # CUDA graphs
    Rule("--cuda-graph-impl", _T, "cg.num_cuda_graphs",
         "local: Megatron's inference graphs; none, transformer_engine, full_iteration: eager inference "
         "(no inference graph scope), cg.num_cuda_graphs=null. Absent with --inference-dynamic-batching: "
         "none", sets="cg.kind=megatron", value="local"),
    Rule("--enable-cuda-graph", _T, "cg.num_cuda_graphs", "deprecated spelling of --cuda-graph-impl local",
         alias_of="--cuda-graph-impl"),
    Rule("--external-cuda-graph", _T, "cg.num_cuda_graphs=null",
         "deprecated spelling of --cuda-graph-impl transformer_engine (eager inference)", alias_of="--cuda-graph-impl"),
    Rule("--inference-dynamic-batching-num-cuda-graphs", _T, "cg.num_cuda_graphs", "-1 = auto, as Megatron",
         sets="cg.num_cuda_graphs"),
    Rule("--decode-only-cuda-graphs", _T, "cg.non_decode=false", "no prefill / mixed graphs",
         sets="cg.non_decode=false"),
    Rule("--inference-cuda-graph-all-prefills", _T, "cg.all_prefills=true",
         "absent with graphs on: cg.all_prefills=false (Megatron's default; cgbench's is true). Since PR #4870 "
         "it also switches admission gating on", sets="cg.all_prefills=true"),
    Rule("--inference-cuda-graph-max-tokens", _T, "cg.cuda_graph_max_tokens",
         "ignored with --inference-cuda-graph-all-prefills, as Megatron", sets="cg.cuda_graph_max_tokens"),
    Rule("--inference-dynamic-batching-cuda-graph-mixed-prefill-count", _T, "cg.mixed_prefill_count", "",
         sets="cg.mixed_prefill_count"),
    Rule("--inference-dynamic-batching-cuda-graph-sizing-distribution", _T, "cg.distribution",
         "exponential | linear | hybrid (hybrid: PR #6667, not in 0.19.2)", sets="cg.distribution"),
    Rule("--inference-cuda-graph-scope", _X, "", "the graph ownership boundary (layer / block)"),
    Rule("--cuda-graph-modules", _X, "", "partial-layer training graphs"),
    # mixture of experts (cgbench.backends.sim.moe_cost)
    Rule("--num-experts", _T, "model.num_experts, model.layer_pattern",
         "without a hybrid pattern every layer is attention + MoE ('*E' repeated --num-layers times, "
         "--moe-layer-freq 1); with one, its 'E' layers are the MoE layers"),
    Rule("--moe-router-topk", _T, "model.experts_per_token", "Megatron's default 2 when absent"),
    Rule("--moe-ffn-hidden-size", _T, "model.moe_ffn_hidden_size", "Megatron's default --ffn-hidden-size when absent"),
    Rule("--moe-shared-expert-intermediate-size", _T,
         "model.moe_shared_experts=1, model.moe_shared_expert_ffn_hidden_size",
         "one shared-expert FFN of that width (Megatron's is one FFN of the shared experts' total width)"),
    Rule("--moe-layer-freq", _X, "", "MoE on some layers only (write the layers as a hybrid pattern's 'E')",
         ("1",)),
    *(Rule(f, _N, "", note) for f, note in (
        ("--moe-token-dispatcher-type", "the training dispatcher (inference: --inference-moe-token-dispatcher-type)"),
        ("--moe-router-dtype", "the router is priced at the model's dtype"),
        ("--moe-router-score-function", "softmax or sigmoid: one elementwise pass either way"),
        ("--moe-router-topk-scaling-factor", "a scale of the routing weights"),
        ("--moe-router-enable-expert-bias", "load balancing (cgbench prices the expected, uniform load)"),
        ("--moe-router-load-balancing-type", "load balancing (cgbench prices the expected, uniform load)"),
        ("--moe-aux-loss-coeff", "training"), ("--moe-z-loss-coeff", "training"),
        ("--moe-router-bias-update-rate", "training"), ("--moe-grouped-gemm", "cgbench prices a grouped GEMM"),
        ("--moe-permute-fusion", "kernel fusion"), ("--moe-router-fusion", "kernel fusion"),
        ("--moe-shared-expert-overlap", "training overlap"), ("--moe-per-layer-logging", "logging"))),
    Rule("--moe-*", _X, "", "this mixture-of-experts feature"),
    Rule("--multi-latent-attention", _X, "", "multi-latent attention (MLA)"),
    Rule("--kv-lora-rank", _X, "", "multi-latent attention (MLA)"),
    Rule("--q-lora-rank", _X, "", "multi-latent attention (MLA)"),
    Rule("--mtp-num-layers", _X, "", "multi-token prediction layers"),
    Rule("--mtp-hybrid-override-pattern", _X, "", "multi-token prediction layers"),
    Rule("--fp8-*", _X, "", "FP8 GEMMs (cgbench prices 2-byte matrices)"),
    Rule("--fp4-*", _X, "", "FP4 GEMMs (cgbench prices 2-byte matrices)"),
    # examples of the no-effect class (every other Megatron name is in it)
    Rule("--lr", _N, "", "training"),
    Rule("--seq-length", _N, "", "the training sequence length (inference reads --inference-max-seq-length)"),
    Rule("--micro-batch-size", _N, "", "training"),
    Rule("--untie-embeddings-and-output-weights", _N, "", "weight memory only; the output GEMM is priced either way"),
    Rule("--normalization", _N, "", "cgbench prices a norm kernel whatever its kind"),
    Rule("--disable-bias-linear", _N, "", "biases are not priced"),
    Rule("--log-*", _N, "", "logging"),
    Rule("--tensorboard-*", _N, "", "logging"),
    Rule("--wandb-*", _N, "", "logging"),
)

DEFAULT_RULE_NOTE = "training, data, checkpointing, logging or kernels cgbench does not price"
_MODEL_FLAGS = frozenset(r.flag for r in RULES if r.kind == _T and ("model." in r.keys)) - {
    "--bf16", "--fp16", "--max-position-embeddings", "--position-embedding-type"}


@cache
def megatron_names() -> frozenset[str]:
    """Megatron's argument flags, from the committed list (tests/config/test_megatron_args.py compares
    it with an installed megatron-core when there is one; building Megatron's parser needs torch)."""
    return frozenset(n for n in _read_names() if n.startswith("--"))


@cache
def inference_config_fields() -> frozenset[str]:
    return frozenset(n.partition(".")[2] for n in _read_names() if n.startswith("InferenceConfig."))


def _read_names(path: Path = NAMES_FILE) -> list[str]:
    return [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]


@cache
def example_names() -> dict[str, tuple[str, ...]]:
    """The arguments Megatron-LM's own inference scripts add to its parser (``examples/inference/``,
    ``megatron/inference/``'s ``add_inference_args``, the text-generation server) -> the files that add
    them, from the committed list (``scripts/megatron_arg_names.py --examples``)."""
    out = {}
    for line in _read_names(EXAMPLE_NAMES_FILE):
        flag, *files = line.split()
        out[flag] = tuple(files)
    return out


def example_note(flag: str) -> str:
    """Why an argument of Megatron's inference scripts changes nothing here."""
    files = example_names()[flag]
    where = ", ".join(files[:2]) + (" ..." if len(files) > 2 else "")
    return (f"added by Megatron's inference scripts ({where}): sampling, prompts, arrivals or output; no effect "
            "on what cgbench models (its requests come from workload=...)")


def rule_of(flag: str) -> Rule:
    for r in RULES:
        if r.flag == flag or (r.flag.endswith("*") and flag.startswith(r.flag[:-1])):
            return r
    return Rule(flag, _N, "", DEFAULT_RULE_NOTE)


# ---------------------------------------------------------------------------------------------
# Reading a launch line


def launch_tokens(text: str) -> tuple[list[str], list[str]]:
    """(launcher prefix, Megatron arguments): shell words of ``text`` (comments, ``\\`` line
    continuations and quotes as a shell reads them); what precedes the last ``*.py`` word is the
    launcher (``torchrun ... script.py``, or ``... -m package.module``), dropped."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as e:
        raise ConfigError(f"--megatron-args: cannot read the launch line as shell words: {e}") from None
    last_py = max((i for i, w in enumerate(words) if w.endswith(".py")), default=-1)
    module = max((i + 1 for i, w in enumerate(words[:-1]) if w == "-m"), default=-1)
    end = max(last_py, module)
    return words[: end + 1], words[end + 1:]


def parse_flags(words: list[str]) -> list[tuple[str, list[str]]]:
    """``[(flag, values)]`` in order: ``--a=1``, ``--a 1``, ``--a 1 2`` (nargs) and bare switches.
    A word that is not a flag before any flag is refused (env assignments ``X=1`` are skipped)."""
    out: list[tuple[str, list[str]]] = []
    for w in words:
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            out.append((name, [value] if eq else []))
        elif out:
            out[-1][1].append(w)
        elif "=" in w and w.split("=", 1)[0].isidentifier():
            continue  # VAR=value before the command
        else:
            raise ConfigError(f"--megatron-args: {w!r} is not a Megatron argument (arguments start with --)")
    return out


def closest_name(flag: str) -> str | None:
    """The nearest known name: Megatron's, or one its inference scripts add (``--top-k``: ``--top_k``)."""
    hits = difflib.get_close_matches(flag, sorted(megatron_names() | set(example_names())), n=1, cutoff=0.6)
    return hits[0] if hits else None


# ---------------------------------------------------------------------------------------------
# The translation


@dataclass
class Line:
    flag: str
    value: str
    overrides: list[str]
    note: str = ""


@dataclass
class KVSizing:
    """Megatron's KV buffer in GiB, to be converted to blocks once the model is composed."""

    buffer_gb: float
    paused_gb: float | None
    mamba_memory_ratio: float | None
    max_requests_given: bool
    source: str  # the flag text, or "Megatron's default"


@dataclass
class Translation:
    launcher: list[str] = field(default_factory=list)
    translated: list[Line] = field(default_factory=list)
    no_effect: list[tuple[str, str]] = field(default_factory=list)  # (flag, why)
    accepted: list[tuple[str, str]] = field(default_factory=list)  # not modelled, neutral value
    refused: list[tuple[str, str]] = field(default_factory=list)  # (flag, what is missing)
    unknown: list[tuple[str, str | None]] = field(default_factory=list)  # (flag, closest)
    kv: KVSizing | None = None
    dropped: list[str] = field(default_factory=list)  # translated overrides the user's own replaced

    @property
    def overrides(self) -> list[str]:
        """The translated overrides, one a key (a later line wins), less those the user replaced."""
        by_key: dict[str, str] = {}
        for line in self.translated:
            for o in line.overrides:
                by_key[override_key(o)] = o
        return [o for o in by_key.values() if o not in self.dropped]

    def check(self) -> None:
        """Refuse unknown names (with the closest) and relevant flags cgbench does not model."""
        problems = [f"{f} is not a Megatron {MEGATRON_VERSION} argument"
                    + (f" (did you mean {c}?)" if c else "") for f, c in self.unknown]
        problems += [f"{f} is not modelled by cgbench: {why}" for f, why in self.refused]
        if problems:
            raise ConfigError("--megatron-args: " + "; ".join(problems))


def _int(flag: str, values: list[str]) -> int:
    try:
        return int(_one(flag, values))
    except ValueError:
        raise ConfigError(f"--megatron-args: {flag} takes an integer, got {values[0]!r}") from None


def _float(flag: str, values: list[str]) -> float:
    try:
        v = float(_one(flag, values))
    except ValueError:
        raise ConfigError(f"--megatron-args: {flag} takes a number, got {values[0]!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"--megatron-args: {flag} must be a finite number >= 0, got {values[0]!r}")
    return v


def _one(flag: str, values: list[str]) -> str:
    if len(values) != 1:
        raise ConfigError(f"--megatron-args: {flag} takes one value, got {len(values)}")
    return values[0]


def _switch(flag: str, values: list[str]) -> None:
    if values:
        raise ConfigError(f"--megatron-args: {flag} is a switch and takes no value, got {' '.join(values)!r}")


def translate(text: str) -> Translation:
    """Classify and translate a launch line; ``check()`` the result to refuse what cannot run."""
    launcher, words = launch_tokens(text)
    t = Translation(launcher=launcher)
    given: dict[str, list[str]] = {}
    names = megatron_names()
    examples = example_names()
    for flag, values in parse_flags(words):
        if flag not in names and flag in examples:
            t.no_effect.append((flag, example_note(flag)))
            continue
        if flag not in names:
            t.unknown.append((flag, closest_name(flag)))
            continue
        rule = rule_of(flag)
        if rule.kind == _T:
            given[flag] = values
        elif rule.kind == _N:
            t.no_effect.append((flag, rule.note))
        elif rule.neutral and len(values) == 1 and values[0] in rule.neutral:
            t.accepted.append((f"{flag} {values[0]}", f"{rule.note}: {values[0]} is what cgbench assumes"))
        else:
            t.refused.append((flag, rule.note))
    check_values(given)  # Megatron's ranges, before any arithmetic on them
    _translate_model(given, t)
    _translate_engine(given, t)
    _translate_graphs(given, t)
    return t


def _add(t: Translation, flag: str, values: list[str] | None, overrides: list[str], note: str = "") -> None:
    t.translated.append(Line(flag, " ".join(values or []), overrides, note))


def _translate_model(g: dict[str, list[str]], t: Translation) -> None:
    pattern_flag = next((f for f in ("--hybrid-layer-pattern", "--hybrid-override-pattern") if f in g), None)
    if pattern_flag:
        pattern = _one(pattern_flag, g[pattern_flag])
        bad = sorted(set(pattern) - set("M*-E"))
        if bad:
            raise ConfigError(f"--megatron-args: {pattern_flag}: symbols {', '.join(map(repr, bad))} are not "
                              "modelled by cgbench (M Mamba-2, * attention, - MLP, E MoE only; pipeline '|' "
                              "and MTP '/' segments are not)")
        if "E" in pattern and "--num-experts" not in g:
            raise ConfigError(f"--megatron-args: {pattern_flag}: its MoE 'E' layers need --num-experts")
        kind = "hybrid" if "M" in pattern else "transformer"
        note = ""
        if "--num-layers" in g and _int("--num-layers", g["--num-layers"]) != len(pattern):
            note = f"--num-layers {g['--num-layers'][0]} ignored: the pattern has {len(pattern)} layers, as Megatron"
        _add(t, pattern_flag, [pattern],
             [f"model.layer_pattern='{pattern}'", "model.pattern_repeat=1", f"model.kind={kind}"], note)
        if "M" in pattern:
            _add(t, "(Mamba layers)", [], ["model.mamba_conv_kernel=4"], "Megatron's MambaMixer has d_conv=4, no flag")
            defaults = [f"model.{key}={v}" for flag, key, v in (
                ("--mamba-state-dim", "mamba_state_dim", 128), ("--mamba-head-dim", "mamba_head_dim", 64),
                ("--mamba-num-groups", "mamba_num_groups", 8)) if flag not in g]
            if "--mamba-num-heads" not in g and "--hidden-size" in g:
                head = _int("--mamba-head-dim", g["--mamba-head-dim"]) if "--mamba-head-dim" in g else 64
                defaults.append(f"model.mamba_num_heads={_int('--hidden-size', g['--hidden-size']) * 2 // head}")
            if defaults:
                _add(t, "(Mamba flags absent)", [], defaults, "Megatron's defaults (heads: hidden x 2 / head dim)")
        if "--num-layers" in g:
            _add(t, "--num-layers", g["--num-layers"], [], "the pattern sets the layers")
    elif "--num-layers" in g:
        n = _int("--num-layers", g["--num-layers"])
        moe = "--num-experts" in g
        _add(t, "--num-layers", g["--num-layers"],
             [f"model.layer_pattern='{'*E' if moe else '*-'}'", f"model.pattern_repeat={n}", "model.kind=transformer"],
             "each Megatron transformer layer is attention + MoE (--num-experts)" if moe
             else "each Megatron transformer layer is attention + MLP")
    _translate_moe(g, t)
    if "--is-hybrid-model" in g:
        _switch("--is-hybrid-model", g["--is-hybrid-model"])
        _add(t, "--is-hybrid-model", [], ["model.kind=hybrid"])
    simple = (("--hidden-size", "hidden_size"), ("--ffn-hidden-size", "ffn_hidden_size"),
              ("--num-attention-heads", "num_attention_heads"), ("--kv-channels", "head_dim"),
              ("--mamba-state-dim", "mamba_state_dim"), ("--mamba-head-dim", "mamba_head_dim"),
              ("--mamba-num-groups", "mamba_num_groups"), ("--mamba-num-heads", "mamba_num_heads"),
              ("--padded-vocab-size", "vocab_size"))
    for flag, key in simple:
        if flag in g:
            _add(t, flag, g[flag], [f"model.{key}={_int(flag, g[flag])}"])
    hidden = _int("--hidden-size", g["--hidden-size"]) if "--hidden-size" in g else None
    heads = _int("--num-attention-heads", g["--num-attention-heads"]) if "--num-attention-heads" in g else None
    if hidden and heads and "--kv-channels" not in g:
        _add(t, "(--kv-channels absent)", [], [f"model.head_dim={hidden // heads}"], "Megatron: hidden / heads")
    if hidden and "--ffn-hidden-size" not in g:
        _add(t, "(--ffn-hidden-size absent)", [], [f"model.ffn_hidden_size={4 * hidden}"], "Megatron: 4 x hidden")
    if "--group-query-attention" in g:
        _switch("--group-query-attention", g["--group-query-attention"])
        if "--num-query-groups" not in g:
            raise ConfigError("--megatron-args: --group-query-attention needs --num-query-groups")
        n = _int("--num-query-groups", g["--num-query-groups"])
        _add(t, "--group-query-attention --num-query-groups", [str(n)], [f"model.num_kv_heads={n}"])
    else:
        if "--num-query-groups" in g:
            _add(t, "--num-query-groups", g["--num-query-groups"], [],
                 "ignored without --group-query-attention, as Megatron")
        if heads:
            _add(t, "(no --group-query-attention)", [], [f"model.num_kv_heads={heads}"], "KV heads = attention heads")
    if "--vocab-size" in g and "--padded-vocab-size" not in g:
        v = _int("--vocab-size", g["--vocab-size"])
        div = _int("--make-vocab-size-divisible-by", g["--make-vocab-size-divisible-by"]) \
            if "--make-vocab-size-divisible-by" in g else 128
        tp = _int("--tensor-model-parallel-size", g["--tensor-model-parallel-size"]) \
            if "--tensor-model-parallel-size" in g else 1
        unit = div * tp
        padded = -(-v // unit) * unit
        _add(t, "--vocab-size", g["--vocab-size"], [f"model.vocab_size={padded}"],
             f"padded to a multiple of {div} x TP {tp} = {unit}, as Megatron")
    if "--swiglu" in g and "--squared-relu" in g:
        raise ConfigError("--megatron-args: --swiglu and --squared-relu cannot both be given")
    for flag, gated in (("--swiglu", "true"), ("--squared-relu", "false")):
        if flag in g:
            _switch(flag, g[flag])
            _add(t, flag, [], [f"model.gated_mlp={gated}"])
    half = [f for f in ("--bf16", "--fp16") if f in g]
    for f in half:
        _switch(f, g[f])
        _add(t, f, [], ["model.dtype_bytes=2"])
    if not half and any(f in g for f in _MODEL_FLAGS):
        _add(t, "(neither --bf16 nor --fp16)", [], ["model.dtype_bytes=4"], "Megatron keeps fp32 parameters")


def _translate_moe(g: dict[str, list[str]], t: Translation) -> None:
    """``--num-experts`` and the MoE sizes, with Megatron's defaults for the absent ones."""
    if "--num-experts" not in g:
        for flag in ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size"):
            if flag in g:
                _add(t, flag, g[flag], [], "ignored without --num-experts, as Megatron (no MoE layer)")
        return
    _add(t, "--num-experts", g["--num-experts"], [f"model.num_experts={_int('--num-experts', g['--num-experts'])}"])
    topk = _int("--moe-router-topk", g["--moe-router-topk"]) if "--moe-router-topk" in g else 2
    _add(t, "--moe-router-topk" if "--moe-router-topk" in g else "(--moe-router-topk absent)",
         g.get("--moe-router-topk", []), [f"model.experts_per_token={topk}"],
         "" if "--moe-router-topk" in g else "Megatron's default 2")
    if "--moe-ffn-hidden-size" in g:
        ffn = _int("--moe-ffn-hidden-size", g["--moe-ffn-hidden-size"])
        _add(t, "--moe-ffn-hidden-size", g["--moe-ffn-hidden-size"], [f"model.moe_ffn_hidden_size={ffn}"])
    else:
        if "--ffn-hidden-size" in g:
            ffn = _int("--ffn-hidden-size", g["--ffn-hidden-size"])
        elif "--hidden-size" in g:
            ffn = 4 * _int("--hidden-size", g["--hidden-size"])
        else:
            ffn = 0  # no width on the line: the model's own moe_ffn_hidden_size stays
        if ffn:
            _add(t, "(--moe-ffn-hidden-size absent)", [], [f"model.moe_ffn_hidden_size={ffn}"],
                 "Megatron: the --ffn-hidden-size")
    if "--moe-shared-expert-intermediate-size" in g:
        shared = _int("--moe-shared-expert-intermediate-size", g["--moe-shared-expert-intermediate-size"])
        _add(t, "--moe-shared-expert-intermediate-size", g["--moe-shared-expert-intermediate-size"],
             ["model.moe_shared_experts=1", f"model.moe_shared_expert_ffn_hidden_size={shared}"])
    else:
        _add(t, "(no shared expert)", [], ["model.moe_shared_experts=0", "model.moe_shared_expert_ffn_hidden_size=0"])


def _translate_engine(g: dict[str, list[str]], t: Translation) -> None:
    ints = (("--tensor-model-parallel-size", "tp_size"), ("--expert-model-parallel-size", "ep_size"),
            ("--inference-dynamic-batching-block-size", "block_size"),
            ("--inference-dynamic-batching-max-requests", "max_requests"),
            ("--inference-dynamic-batching-max-tokens", "max_tokens"),
            ("--num-speculative-tokens", "num_speculative_tokens"))
    for flag, key in ints:
        if flag in g:
            _add(t, flag, g[flag], [f"engine.{key}={_int(flag, g[flag])}"])
    if "--inference-moe-token-dispatcher-type" in g:
        v = _one("--inference-moe-token-dispatcher-type", g["--inference-moe-token-dispatcher-type"])
        _add(t, "--inference-moe-token-dispatcher-type", [v], [f"engine.moe_dispatcher={v}"])
    if "--inference-dynamic-batching-async-sched-mode" in g:
        flag = "--inference-dynamic-batching-async-sched-mode"
        v = _one(flag, g[flag])
        if v not in ("legacy", "async"):
            raise ConfigError(f"--megatron-args: {flag} takes legacy or async, got {v!r}")
        _add(t, flag, [v], [f"engine.async_overlap={'true' if v == 'async' else 'false'}"])
    if "--enable-chunked-prefill" in g:
        _switch("--enable-chunked-prefill", g["--enable-chunked-prefill"])
        _add(t, "--enable-chunked-prefill", [], ["engine.chunked_prefill=true"])
    policy_flag = "--inference-dynamic-batching-prefix-caching-eviction-policy"
    if "--inference-dynamic-batching-prefix-caching" in g:
        _switch("--inference-dynamic-batching-prefix-caching", g["--inference-dynamic-batching-prefix-caching"])
        policy = _one(policy_flag, g[policy_flag]) if policy_flag in g else "ref_zero"
        if policy not in ("ref_zero", "lru"):
            raise ConfigError(f"--megatron-args: {policy_flag} takes ref_zero or lru, got {policy!r}")
        _add(t, "--inference-dynamic-batching-prefix-caching", [], ["engine.prefix_caching=true"])
        _add(t, policy_flag, g.get(policy_flag, []), [f"engine.prefix_caching_eviction={policy}"],
             "" if policy_flag in g else "Megatron's default")
    elif policy_flag in g:
        t.no_effect.append((policy_flag, "prefix caching is off (no --inference-dynamic-batching-prefix-caching)"))
    seq = _int("--inference-max-seq-length", g["--inference-max-seq-length"]) \
        if "--inference-max-seq-length" in g else None
    note = ""
    pos = _one("--position-embedding-type", g["--position-embedding-type"]) \
        if "--position-embedding-type" in g else None
    if pos == "learned_absolute" and "--max-position-embeddings" in g:
        cap = _int("--max-position-embeddings", g["--max-position-embeddings"])
        seq = min(seq, cap) if seq else cap
        note = f"capped by --max-position-embeddings {cap} (learned_absolute), as Megatron"
    elif "--max-position-embeddings" in g:
        _add(t, "--max-position-embeddings", g["--max-position-embeddings"], [],
             "no effect: only learned_absolute positions cap the context")
    if pos is not None:
        _add(t, "--position-embedding-type", [pos], [], "" if pos == "learned_absolute" else "prices alike")
    if "--inference-dynamic-batching-max-requests" in g:
        r = _int("--inference-dynamic-batching-max-requests", g["--inference-dynamic-batching-max-requests"])
        if (seq if seq is not None else 2560) < r:  # 2560: Megatron's --inference-max-seq-length default
            seq, note = r, f"raised to max_requests {r}, as Megatron"
    if seq is not None:
        _add(t, "--inference-max-seq-length", g.get("--inference-max-seq-length", []),
             [f"engine.max_sequence_length={seq}"], note)
    dyn = [f for f in g if f.startswith("--inference-dynamic-batching")]
    if dyn:
        if "--inference-dynamic-batching" in g:
            _switch("--inference-dynamic-batching", g["--inference-dynamic-batching"])
            _add(t, "--inference-dynamic-batching", [], [], "the dynamic engine cgbench models")
        buf = "--inference-dynamic-batching-buffer-size-gb"
        paused = "--inference-dynamic-batching-paused-buffer-size-gb"
        ratio = "--inference-dynamic-batching-mamba-memory-ratio"
        t.kv = KVSizing(
            buffer_gb=_float(buf, g[buf]) if buf in g else 40.0,
            paused_gb=_float(paused, g[paused]) if paused in g else None,
            mamba_memory_ratio=_float(ratio, g[ratio]) if ratio in g else None,
            max_requests_given="--inference-dynamic-batching-max-requests" in g,
            source=f"{buf} {g[buf][0]}" if buf in g else f"{buf} absent: Megatron's default 40")


def _translate_graphs(g: dict[str, list[str]], t: Translation) -> None:
    impl = None
    if "--cuda-graph-impl" in g:
        impl = _one("--cuda-graph-impl", g["--cuda-graph-impl"])
        if impl not in ("none", "local", "transformer_engine", "full_iteration"):
            raise ConfigError(f"--megatron-args: --cuda-graph-impl {impl!r} is not one of none, local, "
                              "transformer_engine, full_iteration")
    for flag, same in (("--enable-cuda-graph", "local"), ("--external-cuda-graph", "transformer_engine")):
        if flag in g:
            _switch(flag, g[flag])
            if impl is not None:
                raise ConfigError(f"--megatron-args: {flag} cannot be used with --cuda-graph-impl (Megatron)")
            impl = same
    source = "--cuda-graph-impl" if "--cuda-graph-impl" in g else next(
        (f for f in ("--enable-cuda-graph", "--external-cuda-graph") if f in g), None)
    n_flag = "--inference-dynamic-batching-num-cuda-graphs"
    if impl is None and t.kv is None:
        for f in g:
            if f.startswith("--inference-cuda-graph") or "cuda-graph" in f:
                _add(t, f, g[f], [], "no effect: no --cuda-graph-impl local")
        return
    if impl != "local":
        why = "Megatron's default" if impl is None else f"{impl} builds no inference graphs"
        _add(t, source or "(--cuda-graph-impl absent)", [impl or "none"], ["cg.num_cuda_graphs=null"],
             f"eager inference ({why})")
        for f in g:
            if "cuda-graph" in f and f != source:
                _add(t, f, g[f], [], "no effect without inference graphs")
        return
    n = _int(n_flag, g[n_flag]) if n_flag in g else 16
    _add(t, source or "--cuda-graph-impl", ["local"], ["cg.kind=megatron", f"cg.num_cuda_graphs={n}"],
         "" if n_flag in g else "Megatron's default 16 graphs")
    if n_flag in g:
        _add(t, n_flag, g[n_flag], [], f"cg.num_cuda_graphs={n}")
    if "--decode-only-cuda-graphs" in g:
        _switch("--decode-only-cuda-graphs", g["--decode-only-cuda-graphs"])
        _add(t, "--decode-only-cuda-graphs", [], ["cg.non_decode=false"])
    if "--inference-cuda-graph-all-prefills" in g:
        _switch("--inference-cuda-graph-all-prefills", g["--inference-cuda-graph-all-prefills"])
        _add(t, "--inference-cuda-graph-all-prefills", [], ["cg.all_prefills=true"])
    else:
        _add(t, "(no --inference-cuda-graph-all-prefills)", [], ["cg.all_prefills=false"], "Megatron's default")
    cap = "--inference-cuda-graph-max-tokens"
    if cap in g and "--inference-cuda-graph-all-prefills" in g:
        _add(t, cap, g[cap], [], "no effect: ignored with --inference-cuda-graph-all-prefills, as Megatron")
    elif cap in g:
        _add(t, cap, g[cap], [f"cg.cuda_graph_max_tokens={_int(cap, g[cap])}"])
    mixed = "--inference-dynamic-batching-cuda-graph-mixed-prefill-count"
    if mixed in g:
        _add(t, mixed, g[mixed], [f"cg.mixed_prefill_count={_int(mixed, g[mixed])}"])
    dist = "--inference-dynamic-batching-cuda-graph-sizing-distribution"
    if dist in g:
        v = _one(dist, g[dist])
        _add(t, dist, [v], [f"cg.distribution={v}"])


# ---------------------------------------------------------------------------------------------
# KV buffer (GiB) -> blocks, once the model is known


@dataclass(frozen=True)
class KVBlocks:
    kv_blocks: int
    paused_blocks: int
    max_requests: int | None  # Megatron's derived default, when the line does not give it
    block_bytes: int
    state_bytes: int
    explanation: str


def kv_blocks_for(kv: KVSizing, model: Any, engine: Any) -> KVBlocks:
    """Megatron's ``DynamicInferenceContext`` sizing (per GPU), for cgbench's model and engine:
    block bytes = dtype x 2 (K, V) x attention layers x block tokens x KV heads per rank x head dim;
    Mamba state per request = layers x (conv dim per rank x conv kernel + heads per rank x head dim x
    state) x 2 bytes (bf16 states)."""
    tp = engine.tp_size
    layers = model.layer_pattern * model.pattern_repeat
    n_attn, n_mamba = layers.count("*"), layers.count("M")
    if n_attn == 0:
        raise ConfigError("--megatron-args: Megatron's dynamic context needs at least one attention layer")
    kv_heads = model.num_kv_heads // tp if model.num_kv_heads >= tp else 1
    block_bytes = model.dtype_bytes * 2 * n_attn * engine.block_size * kv_heads * model.head_dim
    state = 0
    if n_mamba:
        d_inner = model.mamba_num_heads * model.mamba_head_dim // tp
        conv_dim = d_inner + 2 * (model.mamba_num_groups // tp) * model.mamba_state_dim
        ssm = (model.mamba_num_heads // tp) * model.mamba_head_dim * model.mamba_state_dim
        state = n_mamba * (conv_dim * model.mamba_conv_kernel + ssm) * 2
    buffer = int(kv.buffer_gb * GIB)
    paused = 0 if kv.paused_gb is None else int(kv.paused_gb * GIB)
    mamba_cap: float = math.inf
    how = ""
    if kv.mamba_memory_ratio is not None and n_mamba:
        r = kv.mamba_memory_ratio
        mamba_cap = int((buffer + paused) * r // state)
        buffer, paused = int(buffer * (1 - r)), int(paused * (1 - r))
        blocks, paused_blocks = max(2, buffer // block_bytes), paused // block_bytes
        how = f"Mamba states keep {r:g} of the buffer"
    elif n_mamba and kv.max_requests_given:
        r_given = engine.max_requests
        need = r_given * state
        total = buffer + paused
        if need >= total:
            raise ConfigError(f"--megatron-args: {r_given} requests' Mamba states need {need / GIB:.2f} GiB, "
                              f"more than the {total / GIB:.2f} GiB buffer (Megatron refuses this too)")
        ratio = need / total
        buffer, paused = int(buffer * (1 - ratio)), int(paused * (1 - ratio))
        blocks, paused_blocks = max(2, buffer // block_bytes), paused // block_bytes
        how = f"Mamba states for {r_given} requests ({need / GIB:.3f} GiB) come off first"
    else:
        blocks = max(2, buffer // (block_bytes + state))
        paused_blocks = paused // (block_bytes + state)
        if n_mamba:
            how = "one Mamba state slot per block"
    max_requests = None
    if not kv.max_requests_given:
        r = blocks - 1
        if n_mamba and mamba_cap < r:
            r = int(mamba_cap)
        r = r // tp * tp // 4 * 4
        max_requests = r
    kv_blocks = blocks - 1 - paused_blocks
    if kv_blocks < 1:
        raise ConfigError(f"--megatron-args: the KV buffer holds {blocks} blocks, too few once the dummy block "
                          f"and {paused_blocks} paused blocks are set aside")
    text = (f"{kv.source} GiB -> engine.kv_blocks={kv_blocks}: {block_bytes:,} bytes a block ({model.dtype_bytes} "
            f"B x 2 x {n_attn} attention layers x {engine.block_size} tokens x {kv_heads} KV heads per rank x "
            f"{model.head_dim})" + (f", {state:,} bytes of Mamba state a request; {how}" if n_mamba else "")
            + f"; {blocks} blocks - 1 dummy - {paused_blocks} paused")
    return KVBlocks(kv_blocks, paused_blocks, max_requests, block_bytes, state, text)


def kv_overrides(kv: KVBlocks) -> list[str]:
    out = [f"engine.kv_blocks={kv.kv_blocks}", f"engine.paused_blocks={kv.paused_blocks}"]
    if kv.max_requests is not None:
        out.append(f"engine.max_requests={kv.max_requests}")
    return out


# ---------------------------------------------------------------------------------------------
# Printing


def render(t: Translation, kv: KVBlocks | None = None, user_wins: list[str] = ()) -> str:
    lines = [f"Megatron {MEGATRON_VERSION} arguments -> cgbench overrides:"]
    if t.launcher:
        lines.append(f"  launcher (not read): {' '.join(t.launcher)}")
    for ln in t.translated:
        shown = [o for o in ln.overrides if o not in t.dropped]
        head = f"{ln.flag} {ln.value}".strip()
        body = " ".join(shown) if shown else ("(replaced by yours)" if ln.overrides else "(no override of its own)")
        lines.append(f"  translated   {head} -> {body}" + (f"  [{ln.note}]" if ln.note else ""))
    if kv is not None:
        kept = " ".join(o for o in kv_overrides(kv) if o not in t.dropped)
        lines.append(f"  translated   {kv.explanation} -> {kept}")
        if kv.max_requests is not None:
            lines.append(f"  translated   (no --inference-dynamic-batching-max-requests) -> engine.max_requests="
                         f"{kv.max_requests}  [Megatron: the blocks less the dummy, rounded down to TP and 4]")
    for flag, why in t.accepted:
        lines.append(f"  no effect    {flag}  [{why}]")
    for flag, why in t.no_effect:
        lines.append(f"  no effect    {flag}  [{why}]")
    for o in user_wins:
        lines.append(f"  yours wins   {o} (typed after --megatron-args: replaces the translated "
                     f"{override_key(o)}{'' if '.' in override_key(o) else '.*'})")
    return "\n".join(lines) + "\n"


MAX_LAUNCH_FILE_BYTES = 1024 * 1024  # a launch script's arguments are a few kB


def read_launch_text(value: str) -> str:
    """``@FILE`` reads the launch line from FILE; anything else is the line itself."""
    if not value.startswith("@"):
        return value
    from cgbench.safeio import read_text

    # the bounded reader: a FIFO or /dev/zero is refused, not read forever
    return read_text(Path(value[1:]), "--megatron-args", max_bytes=MAX_LAUNCH_FILE_BYTES)


# ---------------------------------------------------------------------------------------------
# Into a run's overrides


def with_megatron_args(value: str, user_overrides: list[str], *, config_dirs: Any = (),
                       compose_with: list[str] | None = None) -> tuple[list[str], str]:
    """The overrides of a run given ``--megatron-args VALUE`` and the user's own overrides (which win:
    a translated key the user also sets is dropped), and the translation to print. ``compose_with``:
    the overrides the model is composed with for the KV sizing, when ``user_overrides`` are a
    sweep's (with its axes) rather than one point's."""
    from cgbench.config.compose import load_config

    t = translate(read_launch_text(value))
    t.check()
    user_keys = {override_key(o) for o in user_overrides}

    def replaced_by(translated: str) -> str | None:
        """The user's override that replaces a translated one: the same key, or its group's option
        (``cg=dense`` replaces every translated ``cg.*``)."""
        key = override_key(translated)
        return next((o for o in user_overrides if override_key(o) in (key, key.partition(".")[0])), None)

    t.dropped = [o for o in t.overrides if replaced_by(o)]
    base = t.overrides
    kv = None
    if t.kv is not None and not ({"engine", "engine.kv_blocks"} & user_keys):
        cfg = load_config(base + list(user_overrides if compose_with is None else compose_with),
                          config_dirs=config_dirs)
        kv = kv_blocks_for(t.kv, cfg.model, cfg.engine)
        kept = [o for o in kv_overrides(kv) if not replaced_by(o)]
        t.dropped += [o for o in kv_overrides(kv) if o not in kept]
        base = base + kept
    wins = list(dict.fromkeys(w for w in map(replaced_by, t.dropped) if w))
    return base + list(user_overrides), render(t, kv, wins)
