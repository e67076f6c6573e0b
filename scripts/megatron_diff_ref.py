"""The reference side of ``scripts/megatron_diff.py``: Megatron-LM's own inference code, step by step.

Needs torch (a CPU build is enough) and a Megatron-LM source tree (a checkout, or the files of one
ref extracted from a mirror). Nothing of Megatron is copied here: its modules are loaded from that
tree as they are, and driven through their own functions:

* ``DynamicInferenceContext``: ``check_availability``, ``_compute_prefix_match``,
  ``_find_kv_match_count``, ``_find_mamba_match_count``, ``add_request``, ``update_requests`` with
  ``resume_paused_requests`` / ``evict_overflow_paused_requests`` (and main's helpers), the block
  allocator ``KVBlockAllocator`` (prefix caching, LRU and REF_ZERO) and ``MambaSlotAllocator``
  (``compute_and_store_offsets``, ``commit_intermediate_states``, slot eviction);
* ``DynamicInferenceEngine``: ``_add_request`` (the arrival checks), ``schedule_waiting_requests``
  with ``schedule_chunked_prefill`` / ``schedule_non_chunked_prefill`` (coordination waits, the skip,
  the CUDA-graph gate when a graph list is given);
* ``TextGenerationController._dynamic_step_context_bookkeeping`` (which requests finish) and the
  speculative-decoding kernels' CPU versions (``verify_speculative_tokens``,
  ``prepare_next_forward_pass``, ``rewind_kv_cache``);
* ``DynamicInferenceRequestRecord.checkpoint`` (what an evicted request comes back as);
* the data-parallel coordinator's routing (``DataParallelInferenceCoordinator``'s
  ``get_best_data_parallel_rank`` and helpers), bound to a stand-in coordinator.

Each object is made with ``__new__`` and given the attributes those functions read (CPU tensors of
the shapes Megatron allocates), as Megatron's own unit tests do; GPU-only work (the forward, the
Mamba state copies) is not run. This module plays what the GPU would: the sampled tokens, and a
forward's Mamba metadata. Import-time dependencies Megatron's files have on the rest of the package
(parallel state, transformer configs, kernels) are stubbed by ``install_megatron``; the stubs are
never called on the paths driven here.

Hashes: Megatron hashes token ids (SHA-256 chains); cgbench hashes source-block ids
(``cgbench.workload.prefix_hashes``). Here a prompt's token ``t`` *is* the id of its source block
``t // 16`` and generated tokens are negative (content no prompt shares), and Megatron's
``compute_block_hashes_batched`` is replaced by cgbench's hashing of those ids: both sides see the
same hash for the same block. It is the one function replaced; the other substitution is the order
among equal LRU stamps of Mamba slot eviction, which Megatron leaves to ``torch.argsort`` /
``torch.topk`` (not stable: torch's own sort order, not a Megatron rule); here it is made stable
(the lowest block id first), as cgbench does.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections import deque
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SOURCE_TOKENS = 16  # tokens per source block of the scenarios' ids
TERMINATION_ID = -9  # never sampled: requests end by length
REJECTED = -1  # Megatron's marker of a rejected draft in the accepted-token lists
WRONG_DRAFT = -3  # a draft the target model rejects (never generated)


def generated_token(rid: int, position: int) -> int:
    """The token request ``rid`` generates at sequence position ``position``: negative (no prompt
    holds it), its own (no other request generates it), and it says whose it is."""
    return -(2 + (rid << 24) + position)


def token_owner(token: int) -> int:
    return (-token - 2) >> 24

# the files of megatron/core run as they are; every other megatron module is a stub
_REAL = (
    "inference.config", "inference.inference_request", "inference.sampling_params",
    "inference.batch_dimensions_utils", "inference.utils", "inference.headers",
    "inference.contexts.kv_block_allocator", "inference.contexts.mamba_slot_allocator",
    "inference.contexts.dynamic_context", "inference.contexts.attention_context.mamba_metadata",
    "inference.text_generation_controllers.mtp_utils_pytorch",
    "inference.text_generation_controllers.text_generation_controller",
    "inference.engines.dynamic_engine",
    "inference.data_parallel_inference_coordinator.coordinator",
    "inference.data_parallel_inference_coordinator.handlers",
    "inference.data_parallel_inference_coordinator.state",
)
REAL_MODULES = frozenset(f"megatron.core.{m}" for m in _REAL)


class _StubType(type):
    """A stand-in for anything a real module imports from a stubbed one: a class (it can be a base
    class or a type hint), a decorator (called on a function or class it returns it), a decorator
    factory (called otherwise it returns the identity), and every attribute of it is one too."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return lambda f: f


def _stub(name: str) -> type:
    return _StubType(name, (), {})


def _identity_factory(*args: Any, **kwargs: Any) -> Any:
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0]
    return lambda f: f


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            return "0.0.0+stub"
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub(name)
        setattr(self, name, value)
        return value


def _core_utils() -> types.ModuleType:
    """``megatron.core.utils``: the few helpers the driven files call, written here; the rest stubs."""
    m = _StubModule("megatron.core.utils")
    m.divide = lambda a, b: a // b
    m.get_pg_size = lambda group=None: 1
    m.get_pg_rank = lambda group=None: 0
    m.round_up_to_nearest_multiple = lambda x, m_: -(-x // m_) * m_
    m.nvtx_range_push = m.nvtx_range_pop = lambda *a, **k: None
    for name in ("internal_api", "experimental_api", "deprecate_args", "trace_async_exceptions"):
        setattr(m, name, _identity_factory)
    return m


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "megatron" and not fullname.startswith("megatron."):
            return None
        base = os.path.join(self.root, *fullname.split("."))
        if fullname in REAL_MODULES:
            return importlib.util.spec_from_file_location(fullname, base + ".py")
        is_pkg = os.path.isdir(base)
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=is_pkg)
        if is_pkg:
            spec.submodule_search_locations = [base]
        return spec

    def create_module(self, spec: Any) -> types.ModuleType:
        if spec.name == "megatron.core.utils":
            return _core_utils()
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__spec__ is not None and module.__spec__.submodule_search_locations:
            module.__path__ = list(module.__spec__.submodule_search_locations)


@dataclass
class Megatron:
    """One Megatron tree's driven modules (loaded once; they keep working after the import hook is
    gone, so trees of two refs can be loaded one after the other in one process)."""

    root: str
    version: str  # "0.19" or "main": which allocator and rules the tree has
    config: Any
    request: Any
    sampling: Any
    bdu: Any
    context: Any
    allocator: Any
    mamba: Any
    mamba_metadata: Any
    mtp: Any
    controller: Any
    engine: Any
    coordinator: Any
    handlers: Any


_LOADED: dict[str, Megatron] = {}


@contextmanager
def _import_hook(root: str):
    finder = _Finder(root)
    saved = {k: v for k, v in sys.modules.items() if k == "megatron" or k.startswith("megatron.")}
    for k in saved:
        del sys.modules[k]
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k == "megatron" or k.startswith("megatron.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def install_megatron(root: str) -> Megatron:
    """The driven modules of the Megatron-LM tree at ``root`` (a folder holding ``megatron/core``)."""
    root = os.path.abspath(root)
    if root in _LOADED:
        return _LOADED[root]
    marker = os.path.join("megatron", "core", "inference", "contexts", "dynamic_context.py")
    if not os.path.isfile(os.path.join(root, marker)):
        raise FileNotFoundError(f"{root}: not a Megatron-LM tree (no {marker})")
    import importlib
    import warnings

    with _import_hook(root), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Megatron's docstrings' escape sequences
        mods = {name: importlib.import_module(f"megatron.core.{name}") for name in _REAL}
    allocator = mods["inference.contexts.kv_block_allocator"]
    version = "main" if hasattr(allocator.KVBlockAllocator, "get_allocatable_count") else "0.19"
    mg = Megatron(root, version, mods["inference.config"], mods["inference.inference_request"],
                  mods["inference.sampling_params"], mods["inference.batch_dimensions_utils"],
                  mods["inference.contexts.dynamic_context"], allocator,
                  mods["inference.contexts.mamba_slot_allocator"],
                  mods["inference.contexts.attention_context.mamba_metadata"],
                  mods["inference.text_generation_controllers.mtp_utils_pytorch"],
                  mods["inference.text_generation_controllers.text_generation_controller"],
                  mods["inference.engines.dynamic_engine"],
                  mods["inference.data_parallel_inference_coordinator.coordinator"],
                  mods["inference.data_parallel_inference_coordinator.handlers"])
    _patch_hashing(mg)
    _patch_slot_lru_order(mg)
    # NVTX ranges need a CUDA build of torch; they only annotate profiles
    mg.controller.range_push = mg.controller.range_pop = lambda *a, **k: None
    _LOADED[root] = mg
    return mg


# -- the two substitutions (see the module docstring) -------------------------------------------------


def _patch_hashing(mg: Megatron) -> None:
    from cgbench.workload.prefix_hashes import engine_block_hashes, own_block_hashes

    def block_hashes(prompt_tokens: Any, block_size: int) -> list[int]:
        """The hashes cgbench gives the same prompt: its source ids' blocks, then (from the first
        generated token on) blocks of content its own."""
        tokens = prompt_tokens.tolist()
        described = len(tokens)
        for i, t in enumerate(tokens):
            if t < 0:
                described = i
                break
        ids = [tokens[i] for i in range(0, described, SOURCE_TOKENS)]
        hashes = engine_block_hashes(ids, described, SOURCE_TOKENS, block_size)
        if described == len(tokens):
            return hashes
        return own_block_hashes(hashes, token_owner(tokens[described]), len(tokens) // block_size)

    mg.request.compute_block_hashes_batched = block_hashes
    mg.coordinator.compute_block_hashes_batched = block_hashes


class _StableOrderTorch(types.ModuleType):
    """``torch`` as the Mamba slot allocator module sees it: ``argsort`` stable, ``topk`` of the
    smallest values with ties to the lowest index; everything else is torch's."""

    def __init__(self, torch: Any) -> None:
        super().__init__("torch")
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def argsort(self, t: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["stable"] = True
        return self._torch.argsort(t, *args, **kwargs)

    def topk(self, t: Any, k: int, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
        assert not largest, "only the smallest-k form is used"
        order = self._torch.argsort(t, stable=True)[:k]
        return t[order], order


def _patch_slot_lru_order(mg: Megatron) -> None:
    import torch

    mg.mamba.torch = _StableOrderTorch(torch)


# -- one run ---------------------------------------------------------------------------------------


def prompt_tokens(source_ids: Sequence[int], prompt: int) -> list[int]:
    """Token ``t`` of the prompt is the id of its source block ``t // SOURCE_TOKENS``."""
    return [int(source_ids[t // SOURCE_TOKENS]) for t in range(prompt)]


class Crash(Exception):
    """Megatron raised: the run ends as cgbench's ``engine_assertion`` outcome."""


@dataclass
class _Loop:
    """The asyncio loop the engine notifies: nothing to notify here."""

    def create_future(self) -> None:
        return None

    def call_soon_threadsafe(self, *args: Any) -> None:
        return None

    def create_task(self, *args: Any) -> None:
        return None


class MegatronRun:
    """One scenario (``scripts/megatron_diff.py``'s dict) on Megatron's code, a step at a time."""

    def __init__(self, mg: Megatron, sc: dict, acceptance: Any = None) -> None:
        import torch

        self.mg, self.sc, self.torch = mg, sc, torch
        self.acceptance = acceptance  # cgbench's AcceptanceModel (the one seeded source), or None
        self.S = sc["spec"]
        self.bs = sc["block"]
        self.failed_at_arrival: list[int] = []
        self.prompt_of: dict[int, int] = {}  # request id -> its original prompt length
        self.ctx = self._make_context()
        self.controller = self._make_controller()
        self.engine = self._make_engine()
        self.step = 0
        self.tags: set[str] = set()
        self.evicted_ever: dict[int, list[int]] = {}  # request id -> its original hashes
        self._wrap_for_tags()

    # -- construction ----------------------------------------------------------------------------

    def _make_context(self) -> Any:
        torch, mg, sc = self.torch, self.mg, self.sc
        C = mg.context.DynamicInferenceContext
        ctx = C.__new__(C)
        R, T, bs = sc["max_requests"], sc["max_tokens"], self.bs
        ctx.max_requests, ctx.max_tokens, ctx.max_sequence_length = R, T, sc["msl"]
        ctx.block_size_tokens = bs
        ctx.num_speculative_tokens = self.S
        ctx.enable_prefix_caching = sc["prefix"]
        policy = mg.config.PrefixCachingEvictionPolicy
        ctx.prefix_caching_eviction_policy = policy.LRU if sc["eviction"] == "lru" else policy.REF_ZERO
        ctx.is_hybrid_model = sc["kind"] == "hybrid"
        ctx.enable_chunked_prefill = sc["chunked"]
        ctx.is_tensor_state_allocated = True
        ctx.prefix_cache_lru_clock = 0
        ctx.prefix_cache_hits = ctx.prefix_cache_blocks_matched = 0
        ctx.prefix_cache_prefill_computed_tokens = ctx.prefix_cache_prefill_skipped_tokens = 0
        ctx.lifetime_prefill_token_count = 0
        ctx.step_count = 0
        ctx.total_request_count = ctx.paused_request_count = ctx.active_token_count = 0
        ctx.num_prefill_requests = 0
        ctx.chunked_prefill_request_id = -1
        ctx.paused_tokens = ctx.paused_speculative_tokens = None
        ctx._pending_mamba_restores, ctx._pending_mamba_zeros = [], []
        ctx.max_kv_block_count = -(-sc["msl"] // bs) + (1 if self.S > 0 else 0)
        i32 = torch.int32
        for name in ("request_query_lengths", "request_in_prefill_status_tensor", "request_output_lengths",
                     "request_kv_length_offsets", "request_kv_block_counts", "request_last_kv_block_id",
                     "request_last_kv_block_offset"):
            setattr(ctx, name, torch.zeros(R, dtype=i32))
        ctx.request_ids = torch.full((R,), -1, dtype=i32)
        ctx.request_to_kv_block_ids = torch.full((R, ctx.max_kv_block_count), -1, dtype=torch.int)
        for name in ("token_to_input_ids", "token_to_pos_ids", "token_to_block_idx"):
            setattr(ctx, name, torch.zeros(T, dtype=torch.int64))
        for name in ("token_to_local_position_within_kv_block", "token_to_request_idx", "token_to_position_in_request"):
            setattr(ctx, name, torch.zeros(T, dtype=i32))
        ctx.request_metadata_types = mg.request.DynamicInferenceRequest.get_metadata_types()
        ctx.request_metadata = {label: torch.zeros(R, dtype=dt) for label, dt in ctx.request_metadata_types}
        ctx.active_request_metadata = {label: torch.zeros(R, dtype=dt) for label, dt in ctx.request_metadata_types}
        ctx.non_graph_attn_metadata, ctx.graph_attn_metadata = {}, {}
        ctx.active_attn_metadata = None
        # the pool: kv_blocks + paused_blocks usable blocks and the dummy (both rule sets' pool size)
        pool = sc["kv"] + sc["paused"] + 1
        A = mg.allocator.KVBlockAllocator
        if mg.version == "main":
            ctx.batch_invariant_mode = False
            ctx.kv_block_allocator = A(ctx, pool_size=pool, paused_limit=sc["paused"],
                                       enable_prefix_caching=sc["prefix"],
                                       prefix_caching_eviction_policy=ctx.prefix_caching_eviction_policy)
            ctx.dynamo_helper = mg.context.DynamoHelper()
            ctx.kv_block_allocator.add_blocks_deregistered_observer(ctx.dynamo_helper.on_kv_blocks_deregistered)
        else:
            ctx.kv_block_allocator = A(ctx, total_count=pool, paused_count=sc["paused"],
                                       enable_prefix_caching=sc["prefix"],
                                       prefix_caching_eviction_policy=ctx.prefix_caching_eviction_policy)
        ctx.mamba_slot_allocator = None
        if ctx.is_hybrid_model:
            MM = mg.mamba_metadata.MambaMetadata
            meta = MM.__new__(MM)
            meta.max_requests = R
            meta.request_to_mamba_state_idx = torch.full((R,), -1, dtype=i32)
            meta.mamba_state_free_slots = torch.arange(R, dtype=i32)
            meta.reset()
            ctx.mamba_metadata = meta
            ctx.mamba_chunk_size = ctx.ssm_chunk_alignment = sc["ssm_chunk"]
            ctx.num_mamba_layers = 1
            ctx.mamba_conv_states = torch.zeros((1, R, 1))
            ctx.mamba_ssm_states = torch.zeros((1, R, 1))
            if sc["prefix"] and sc["mamba_slots"] > 0:
                ctx.mamba_slot_allocator = self._make_slot_allocator(ctx, sc["mamba_slots"], pool)
                ctx.kv_block_allocator.on_blocks_deregistered = ctx.mamba_slot_allocator.on_kv_blocks_deregistered
        ctx.cuda_graph_batch_dimensions_list = self._graph_list()
        ctx.use_cuda_graphs_for_non_decode_steps = True
        return ctx

    def _make_slot_allocator(self, ctx: Any, slots: int, pool: int) -> Any:
        torch = self.torch
        M = self.mg.mamba.MambaSlotAllocator
        sa = M.__new__(M)
        sa.context, sa.max_slots, sa.num_mamba_layers = ctx, slots, 1
        sa.block_to_slot = torch.full((pool,), -1, dtype=torch.int32)
        sa.slot_to_block = torch.full((slots,), -1, dtype=torch.int32)
        sa.free_slots = torch.arange(slots, dtype=torch.int32)
        sa.free_count = slots
        sa.conv_states = torch.zeros((1, slots, 1))
        sa.ssm_states = torch.zeros((1, slots, 1))
        sa.hash_to_block_id = {}
        R = ctx.max_requests
        k = self.mg.mamba.MAX_INTERMEDIATE_OFFSETS_PER_REQUEST
        sa._intermediate_offsets_cpu = torch.zeros((R, k), dtype=torch.int32)
        sa._intermediate_counts_cpu = torch.zeros(R, dtype=torch.int32)
        sa._intermediate_block_ids_cpu = torch.full((R, k), -1, dtype=torch.int32)
        sa._eos_cache_block_id_cpu = torch.full((R,), -1, dtype=torch.int32)
        sa._has_intermediates = False
        sa.max_intermediate_count = min(-(-ctx.max_tokens // ctx.block_size_tokens), k * R)
        sa.intermediate_ssm_out = torch.zeros((1, max(sa.max_intermediate_count, 1), 1))
        sa.intermediate_conv_out = torch.zeros((1, max(sa.max_intermediate_count, 1), 1))
        return sa

    def _graph_list(self) -> list:
        dims = self.mg.bdu.InferenceBatchDimensions
        return [dims(token_count=t, prefill_req_count=p, decode_req_count=d) for t, p, d in self.sc.get("graphs") or []]

    def _make_controller(self) -> Any:
        torch = self.torch
        TGC = self.mg.controller.TextGenerationController
        c = TGC.__new__(TGC)
        c.inference_wrapped_model = types.SimpleNamespace(inference_context=self.ctx)
        c.num_speculative_tokens = self.S
        c._get_stop_word_finished_ids_callback = None
        R = self.sc["max_requests"]
        c._sampled_tokens_cuda = torch.zeros(R, dtype=torch.int64)
        c._sampled_mtp_tokens_cuda = torch.zeros((max(self.S, 1), R), dtype=torch.int64)
        return c

    def _make_engine(self) -> Any:
        E = self.mg.engine.DynamicInferenceEngine
        e = E.__new__(E)
        e.context, e.controller = self.ctx, self.controller
        e.requests = {}
        e.waiting_request_ids = deque()
        e.enable_chunked_prefill = self.sc["chunked"]
        e.cuda_graph_all_prefills = bool(self.sc.get("graphs"))
        e._cg_admission_warn_after = max(100, self.sc["msl"])
        e._prefix_coordination_waits = 0
        e._generation_epoch = None
        e.materialize_only_last_token_logits = True
        e.num_speculative_tokens = self.S
        e.rank = 1  # no warnings printed by _handle_failed_request
        e._loop = _Loop()
        e._notify_cond_for_new_request = lambda: None
        if not isinstance(getattr(E, "has_admittable_kv_import", None), property):
            e.has_admittable_kv_import = False  # main: a property of its own (False); 0.19.2 has none
        e.failed_request_ids = []
        failed = self.failed_at_arrival

        def handle_failed(request_id: int) -> None:
            # the rest of Megatron's handler replies to the client (its tokenizer, sockets)
            failed.append(request_id)

        e._handle_failed_request = handle_failed
        return e

    # -- instrumentation (coverage tags only; it changes nothing) --------------------------------

    def _wrap_for_tags(self) -> None:
        ctx, tags = self.ctx, self.tags
        alloc = ctx.kv_block_allocator
        C = type(ctx)
        resume, evict = C.resume_paused_requests, C.evict_overflow_paused_requests
        add = C.add_request

        def per_row_sum(lo: int, hi: int) -> int:
            return int(ctx.request_kv_block_counts[lo:hi].sum().item()) if hi > lo else 0

        def evictable() -> int:
            if not ctx.enable_prefix_caching:
                return 0
            return int(alloc.get_evictable_block_count())

        def free_pool() -> int:
            return int(alloc.total_avail if self.mg.version == "0.19" else alloc.pool_avail)

        def wrapped_resume(active_request_count: int, newly: Any) -> Any:
            if ctx.enable_prefix_caching and ctx.paused_request_count > 0:
                if alloc.get_active_used() < per_row_sum(ctx.paused_request_count, ctx.total_request_count):
                    tags.add("unique_active_blocks")
                before = ctx.paused_request_count
                free, cached = free_pool(), evictable()
                out = resume(ctx, active_request_count, newly)
                resumed = before - ctx.paused_request_count
                if ctx.paused_request_count > 0 and resumed == free and cached > 0:
                    tags.add("resume_capped_by_free_pool")
                return out
            return resume(ctx, active_request_count, newly)

        def wrapped_evict(active_request_count: int, next_tokens: Any, new_spec: Any = None) -> Any:
            if ctx.enable_prefix_caching and ctx.paused_request_count > 0:
                if alloc.get_paused_used() < per_row_sum(0, ctx.paused_request_count):
                    tags.add("unique_paused_blocks")
            return evict(ctx, active_request_count, next_tokens, new_spec)

        def wrapped_add(req: Any, prefill_chunk_length: int | None = None) -> None:
            before = (ctx.active_token_count, ctx.prefix_cache_blocks_matched, len(self._registrations))
            if req.request_id in self.evicted_ever and self.evicted_ever[req.request_id]:
                hashes = self.evicted_ever.pop(req.request_id)
                if ctx.enable_prefix_caching and any(h in alloc.kv_hash_to_block_id for h in hashes):
                    tags.add("evicted_request_cached_prefix")
            span = req.remaining_prompt_length if prefill_chunk_length is None else prefill_chunk_length
            add(ctx, req, prefill_chunk_length)
            computed = ctx.active_token_count - before[0]
            self._admitted.append([int(req.request_id), int(span), int(computed)])

        ctx.resume_paused_requests = wrapped_resume
        ctx.evict_overflow_paused_requests = wrapped_evict
        ctx.add_request = wrapped_add
        self._admitted: list[list[int]] = []
        self._registrations: list[int] = []
        if ctx.enable_prefix_caching:
            register = alloc.register_kv_block_hashes

            def wrapped_register(block_ids: list[int], block_hashes: list[int], parent_hashes: Any = None) -> None:
                for b, h in zip(block_ids, block_hashes, strict=True):
                    if int(alloc.block_hashes[b].item()) == h:
                        tags.add("block_registered_twice")
                self._registrations.extend(block_ids)
                register(block_ids, block_hashes, parent_hashes)

            alloc.register_kv_block_hashes = wrapped_register

    # -- the step --------------------------------------------------------------------------------

    def generated(self, rid: int) -> int:
        """Tokens the request generated in all (an evicted request's checkpoint holds the earlier
        ones in its prompt)."""
        req = self.engine.get_request(rid)
        return len(req.prompt_tokens) - self.prompt_of[rid] + len(req.generated_tokens)

    def arrive(self, rid: int, prompt: int, output: int, source_ids: Sequence[int]) -> None:
        torch, mg = self.torch, self.mg
        self.prompt_of[rid] = prompt
        params = mg.sampling.SamplingParams(num_tokens_to_generate=output, termination_id=TERMINATION_ID)
        req = mg.request.DynamicInferenceRequest(
            request_id=rid, prompt_tokens=torch.tensor(prompt_tokens(source_ids, prompt), dtype=torch.int64),
            sampling_params=params, block_size_tokens=self.bs, enable_prefix_caching=self.sc["prefix"])
        self.engine._add_request(req)

    def arrive_safely(self, rid: int, prompt: int, output: int, source_ids: Sequence[int]) -> None:
        try:
            self.arrive(rid, prompt, output, source_ids)
        except Exception as e:  # noqa: BLE001 - any exception of Megatron's code is its crash
            raise Crash(f"{type(e).__name__}: {e}") from e

    def run_step(self) -> dict:
        """One engine step: schedule, the forward's bookkeeping, update_requests, the engine's
        post-processing. Returns the step's record; raises ``Crash`` when Megatron raises."""
        try:
            return self._step()
        except Crash:
            raise
        except Exception as e:  # noqa: BLE001 - any exception of Megatron's code is its crash
            raise Crash(f"{type(e).__name__}: {e}") from e

    def _step(self) -> dict:
        ctx, eng = self.ctx, self.engine
        self._admitted = []
        waits_before = eng._prefix_coordination_waits
        eng.schedule_waiting_requests()
        held = eng._prefix_coordination_waits - waits_before
        if self.sc["chunked"] and held:  # requests behind the held one that the pass never reached
            behind = len(eng.waiting_request_ids) - held - (1 if ctx.chunked_prefill_request_id >= 0 else 0)
            if behind > 0:
                self.tags.add("coordination_wait_ends_chunked_pass")
        record = {"adm": self._admitted}
        active = ctx.total_request_count - ctx.paused_request_count
        finished: list[int] = []
        evicted: list[int] = []
        if not (ctx.active_token_count == 0 and active == 0):
            chunked_id = ctx.chunked_prefill_request_id
            self._commit_mamba_states()
            if self.S > 0:
                accepted_lists = self._speculative_rewind()
            else:
                accepted_lists = None
                self._sample_tokens()
            result = self.controller._dynamic_step_context_bookkeeping()
            # the step's chunked prefill is never finished (post_process_requests skips it)
            finished = sorted(int(i) for i in result["finished_request_ids"].tolist() if int(i) != chunked_id)
            ev = result.get("evict_request_ids")
            evicted = [int(i) for i in ev.tolist()] if ev is not None else []
            self._post_process(result, accepted_lists, chunked_id, evicted)
        ctx.step_count += 1
        ctx.prefix_cache_lru_clock += 1
        self.step += 1
        record.update(self._state(finished, evicted))
        return record

    def _commit_mamba_states(self) -> None:
        """What the forward leaves for ``commit_intermediate_states``: the batch's dimensions and the
        Mamba metadata's per-request intermediate counts (from the allocator's own offsets)."""
        ctx = self.ctx
        sa = ctx.mamba_slot_allocator
        if sa is None:
            return
        P = ctx.num_prefill_requests
        D = ctx.total_request_count - ctx.paused_request_count - P
        ctx.batch_dimensions = self.mg.bdu.InferenceBatchDimensions(
            token_count=ctx.active_token_count, prefill_req_count=P, decode_req_count=D)
        start = ctx.paused_request_count + D
        counts = sa._intermediate_counts_cpu[start:start + P].tolist()
        meta = ctx.mamba_metadata
        meta.intermediate_count = sum(counts)
        meta.per_request_intermediate_counts = counts if sum(counts) > 0 else []
        assert meta.intermediate_count <= sa.max_intermediate_count, (
            f"Mamba intermediate count {meta.intermediate_count} exceeds buffer size {sa.max_intermediate_count}")
        sa.commit_intermediate_states()

    def _row_ids(self, lo: int, hi: int) -> list[int]:
        return [int(i) for i in self.ctx.request_ids[lo:hi].tolist()]

    def _sample_tokens(self) -> None:
        """Each active row samples its next token (what the GPU's sampler would write)."""
        ctx = self.ctx
        lo, hi = ctx.paused_request_count, ctx.total_request_count
        for k, rid in enumerate(self._row_ids(lo, hi)):
            self.controller._sampled_tokens_cuda[k] = generated_token(rid, self._position(rid))

    def _position(self, rid: int) -> int:
        return self.prompt_of[rid] + self.generated(rid)

    def _speculative_rewind(self) -> list[list[int]]:
        """The verify / prepare / rewind kernels' CPU versions on tokens made so that each decode row
        accepts the drafts cgbench's acceptance model draws for it; returns each row's accepted drafts."""
        torch, ctx, mtp, S = self.torch, self.ctx, self.mg.mtp, self.S
        lo, hi = ctx.paused_request_count, ctx.total_request_count
        active = hi - lo
        P = ctx.num_prefill_requests
        D = active - P
        inputs: list[int] = []
        outputs: list[int] = []
        rows = self._row_ids(lo, hi)
        for rid in rows[:D]:
            emitted = self.generated(rid)
            a = S if self.acceptance is None else self.acceptance.draw(rid, emitted)
            pos = self._position(rid)
            # the MTP heads guess the next S tokens, the first a of them right; the target model
            # predicts the tokens at pos .. pos + a (its last one is the step's sampled token)
            drafts = [generated_token(rid, pos + k) for k in range(a)] + [WRONG_DRAFT] * (S - a)
            outputs += [generated_token(rid, pos + k) for k in range(a + 1)] + [WRONG_DRAFT] * (S - a)
            inputs += [generated_token(rid, pos - 1)] + drafts
        for rid in rows[D:]:
            inputs.append(generated_token(rid, -1))
            outputs.append(generated_token(rid, self._position(rid)))
        inp = torch.tensor(inputs, dtype=torch.int64)
        out = torch.tensor(outputs, dtype=torch.int64)
        last, mask, inp = mtp.verify_speculative_tokens(inp, out, D, P, S)
        R = ctx.max_requests
        accepted = torch.full((R, S), -1, dtype=torch.int64)
        counts = torch.zeros(R, dtype=torch.int64)
        mtp.prepare_next_forward_pass(D, out, torch.arange(len(inputs)), last, mask, inp,
                                      self.controller._sampled_tokens_cuda, torch.zeros(R, dtype=torch.int64),
                                      accepted, counts, S)
        blocks, remove = mtp.rewind_kv_cache(
            accepted_counts=counts[:active], prefill_status=ctx.request_in_prefill_status_tensor[lo:hi],
            last_kv_block_offset=ctx.request_last_kv_block_offset[lo:hi],
            kv_length_offsets=ctx.request_kv_length_offsets[lo:hi],
            kv_block_counts=ctx.request_kv_block_counts[lo:hi],
            last_kv_block_id=ctx.request_last_kv_block_id[lo:hi],
            kv_block_ids=ctx.request_to_kv_block_ids[lo:hi], num_speculative_tokens=S,
            block_size_tokens=ctx.block_size_tokens, num_active_requests=active)
        if bool(remove.any()):
            self.tags.add("speculative_rewind_releases_block")
        ctx.kv_block_allocator.release_memory_blocks(blocks[remove])
        return [[t for t in row if t != REJECTED] for row in accepted[:active].tolist()]

    def _post_process(self, result: dict, accepted: list[list[int]] | None, chunked_id: int,
                      evicted: list[int]) -> None:
        """The engine's ``post_process_requests``, for what it does to the requests' state: each
        request that sampled gets its accepted drafts and its token (trimmed to what it may still
        generate), finished requests leave, evicted ones go back to the queue's front (behind a
        chunked prefill) as their checkpoint."""
        eng = self.engine
        ids = result["active_request_ids"].tolist()
        sample = result["sample"].tolist()
        finished = set(int(i) for i in result["finished_request_ids"].tolist())
        for k, rid in enumerate(ids):
            req = eng.get_request(rid)
            tokens = (accepted[k] if accepted is not None else []) + [int(sample[k])]
            if rid == chunked_id:
                continue
            room = req.sampling_params.num_tokens_to_generate - len(req.generated_tokens)
            req.generated_tokens += tokens[:max(room, 0)]
            if rid in finished:
                del eng.requests[rid]
        if evicted:
            eng.waiting_request_ids.extendleft(evicted)
            if self.ctx.chunked_prefill_request_id != -1:
                head = eng.waiting_request_ids[len(evicted)]
                del eng.waiting_request_ids[len(evicted)]
                eng.waiting_request_ids.appendleft(head)
            for rid in evicted:
                self.evicted_ever[rid] = list(eng.get_request(rid).precomputed_block_hashes)
                eng.requests[rid].record.checkpoint()
                eng.get_request(rid).add_event_evict()

    # -- the state compared --------------------------------------------------------------------

    def _state(self, finished: list[int], evicted: list[int]) -> dict:
        ctx, eng, alloc = self.ctx, self.engine, self.ctx.kv_block_allocator
        p, t = ctx.paused_request_count, ctx.total_request_count
        ids = ctx.request_ids.tolist()
        counts = ctx.request_kv_block_counts.tolist()
        chunked = ctx.chunked_prefill_request_id
        rows = [[ids[i], counts[i]] for i in range(p, t)]
        paused = [[ids[i], counts[i]] for i in range(p)]
        hidden = None
        if chunked != -1:
            i = ctx.get_index_of_chunked_prefill_request(safe=False)
            hidden = [chunked, counts[i]] if i >= t else None
        free = int(alloc.total_avail if self.mg.version == "0.19" else alloc.pool_avail)
        out = {"rows": rows, "paused": paused, "chunked": hidden, "free": free,
               "queue": [int(r) for r in eng.waiting_request_ids], "fin": finished, "ev": evicted}
        if ctx.enable_prefix_caching:
            out["cached"] = int(alloc.get_evictable_block_count())
            out["pc"] = [ctx.prefix_cache_hits, ctx.prefix_cache_blocks_matched,
                         ctx.prefix_cache_prefill_computed_tokens, ctx.prefix_cache_prefill_skipped_tokens,
                         eng._prefix_coordination_waits]
            if ctx.mamba_slot_allocator is not None:
                out["mamba"] = len(ctx.mamba_slot_allocator.hash_to_block_id)
        if self.S > 0:
            out["gen"] = sorted([int(r), self.generated(r)] for r in [x[0] for x in rows + paused])
        return out


# -- data-parallel routing -------------------------------------------------------------------------


class CoordinatorRouting:
    """The coordinator's routing as its own message handlers do it: ``handle_submit_request`` (hash
    the prompt, ``get_best_data_parallel_rank``, the pending count, ``_update_rank_hashes``) and
    ``handle_engine_reply`` (a finished request's pending count goes), on a stand-in coordinator
    with ``ranks`` engines and no sockets."""

    def __init__(self, mg: Megatron, ranks: int, policy: str, alpha: float, max_requests: int,
                 block_size: int) -> None:
        import numpy as np

        C = mg.coordinator.DataParallelInferenceCoordinator
        c = C.__new__(C)
        P = mg.config.PrefixCachingCoordinatorPolicy
        c.prefix_caching_coordinator_policy = {"load_balanced": P.LOAD_BALANCED, "first_prefix_block":
                                               P.FIRST_PREFIX_BLOCK, "longest_prefix": P.LONGEST_PREFIX}[policy]
        c.prefix_caching_routing_alpha = alpha
        c.enable_prefix_caching = True
        c.block_size_tokens = block_size
        c.max_requests = max_requests
        identities = [f"rank{r:03d}".encode() for r in range(ranks)]
        c.identities_of_data_parallel_ranks = deque(identities)
        c.identity_to_rank_index = {ident: i for i, ident in enumerate(sorted(identities))}
        c._identities_list = sorted(identities)
        c._pending_counts = np.zeros(ranks, dtype=np.int32)
        c._hash_table = {}
        c._hash_assignment_counter = 0
        c.request_id_to_client_id, c.request_id_to_client_request_id, c.request_id_to_rank = {}, {}, {}
        c.next_request_id = 0
        c.known_clients = {b"client"}
        c.schedule_records = None
        c.tokenizer = None
        c.removed_engine_identities = set()
        c.client_request_to_request_id = {}
        c.router_socket = types.SimpleNamespace(send_multipart=lambda frames: None)
        c.detokenize = lambda finished_request: None
        self.c = c
        self.handlers = mg.handlers
        self.handlers.msgpack = types.SimpleNamespace(packb=lambda obj, use_bin_type=True: b"")
        self.rank_of: dict[int, int] = {}

    def submit(self, client_request_id: int, prompt: list[int]) -> int:
        """Route a request of ``prompt`` tokens; returns the rank index it went to."""
        rid = self.c.next_request_id
        submit = self.handlers.HANDLERS[self.handlers.Headers.SUBMIT_REQUEST]
        submit(self.c, b"client", [None, client_request_id, prompt, {}])
        rank = self.c.identity_to_rank_index[self.c.request_id_to_rank[rid]]
        self.rank_of[client_request_id] = rid
        return rank

    def finish(self, client_request_id: int, rank: int) -> None:
        """The engine of ``rank`` reports the request finished."""
        reply = self.handlers.HANDLERS[self.handlers.Headers.ENGINE_REPLY]
        identity = self.c._identities_list[rank]
        reply(self.c, identity, [None, [{"request_id": self.rank_of.pop(client_request_id)}]])

