"""Runs a real small model for the ``torch`` backend: one forward per engine step over mixed prefill chunks and
decodes, with a paged KV cache, a Mamba state slot per request, and static step buffers.

A step has three phases, so that a CUDA-graph runner can capture the middle one:

* ``stage(rows, pad_to)`` (host): checks the rows, allocates KV blocks / state slots, and copies the batch into
  fixed-size buffers (sized by ``engine.max_tokens`` / ``engine.max_requests``), padded to a shape ``(T, P, D)``.
  Padding is neutral: padding tokens write to the trash KV block, padding rows to the trash state slot.
* ``compute(shape)`` (device only, no host sync, every shape fixed by ``shape``): the model forward; writes the
  last-token logits and greedy tokens of each row into static output buffers.
* ``collect(staged)`` (host): reads the tokens back in the caller's row order.

``step`` runs the three eagerly with no padding; ``forward_padded`` pads to a graph shape first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cgbench.backends.torch.models import CausalLM, ModelCache, StepInputs, build_model
from cgbench.backends.torch.models.lm import DEFAULT_SSD_CHUNK
from cgbench.config.schema import ConfigError, EngineConfig, ModelConfig

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


@dataclass(slots=True)
class StepRow:
    request_id: int
    token_ids: list[int]  # the tokens fed this step: a prefill chunk, or [last_token] for a decode
    start_pos: int  # position of token_ids[0] in the sequence (= tokens already in the KV / SSM state)


@dataclass(frozen=True, slots=True)
class StepShape:
    """The static part of a staged step: what a CUDA graph bakes in."""

    tokens: int  # T, including padding tokens
    rows: int  # R = P + D, including empty padding rows
    kv_blocks: int  # logical KV blocks attention reads per row
    decode_only: bool  # P == 0: one token per row, token i is row i, one-step SSM update


@dataclass(frozen=True, slots=True)
class StagedStep:
    shape: StepShape
    order: tuple[int, ...]  # padded row index of each caller row, in the caller's order


@dataclass(slots=True)
class _Sequence:
    slot: int
    blocks: list[int]
    length: int  # tokens in the KV cache / SSM state


@dataclass(slots=True)
class StepBuffers:
    """Fixed-address step inputs and outputs; ``inputs(shape)`` takes leading slices, so a captured graph reads
    the same memory that ``stage`` writes."""

    input_ids: torch.Tensor  # (max_tokens,)
    positions: torch.Tensor  # (max_tokens,)
    slot_mapping: torch.Tensor  # (max_tokens,)
    token_row: torch.Tensor  # (max_tokens,)
    query_start: torch.Tensor  # (max_rows + 1,)
    query_len: torch.Tensor  # (max_rows + 1,)
    context_len: torch.Tensor  # (max_rows + 1,)
    state_slot: torch.Tensor  # (max_rows + 1,)
    block_tables: torch.Tensor  # (max_rows + 1, max_blocks)
    last_token: torch.Tensor  # (max_rows,)
    logits: torch.Tensor  # (max_rows, vocab)
    next_tokens: torch.Tensor  # (max_rows,)

    @staticmethod
    def allocate(max_tokens: int, max_rows: int, max_blocks: int, vocab: int, device: torch.device,
                 dtype: torch.dtype) -> StepBuffers:
        def ints(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int64, device=device)

        return StepBuffers(
            input_ids=ints(max_tokens), positions=ints(max_tokens), slot_mapping=ints(max_tokens),
            token_row=ints(max_tokens), query_start=ints(max_rows + 1), query_len=ints(max_rows + 1),
            context_len=ints(max_rows + 1), state_slot=ints(max_rows + 1),
            block_tables=ints(max_rows + 1, max_blocks), last_token=ints(max_rows),
            logits=torch.zeros(max_rows, vocab, dtype=dtype, device=device), next_tokens=ints(max_rows))

    def inputs(self, shape: StepShape) -> StepInputs:
        t, r = shape.tokens, shape.rows
        return StepInputs(
            input_ids=self.input_ids[:t], positions=self.positions[:t], slot_mapping=self.slot_mapping[:t],
            token_row=self.token_row[:t], query_start=self.query_start[:r + 1], query_len=self.query_len[:r + 1],
            context_len=self.context_len[:r + 1], state_slot=self.state_slot[:r + 1],
            block_tables=self.block_tables[:r + 1], last_token=self.last_token[:r], num_rows=r,
            kv_blocks=shape.kv_blocks, decode_only=shape.decode_only)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"backend.device: {device!r} requested but torch sees no CUDA device")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ConfigError(f"backend.device: {device!r} is not a torch device ({err})") from None


class TorchRunner:
    def __init__(self, model: ModelConfig, engine: EngineConfig, *, seed: int, device: str = "cpu",
                 dtype: str = "float32", tie_embeddings: bool = False, ssd_chunk: int = DEFAULT_SSD_CHUNK):
        if dtype not in DTYPES:
            raise ConfigError(f"backend.dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
        self.device = resolve_device(device)
        self.dtype = DTYPES[dtype]
        self.model_config, self.engine, self.seed = model, engine, seed
        self.model: CausalLM = build_model(model, seed=seed, device=self.device, dtype=self.dtype,
                                           tie_embeddings=tie_embeddings, ssd_chunk=ssd_chunk)
        self.block_size = engine.block_size
        self.num_blocks = engine.resolved_kv_blocks()
        self.max_blocks = -(-engine.max_sequence_length // engine.block_size)  # per request
        self.max_rows, self.max_tokens = engine.max_requests, engine.max_tokens
        self.trash_block, self.trash_slot = self.num_blocks, self.max_rows
        self.cache: ModelCache = self.model.allocate_cache(
            num_blocks=self.num_blocks + 1, block_size=self.block_size, num_slots=self.max_rows + 1,
            device=self.device, dtype=self.dtype)
        self.buffers = StepBuffers.allocate(self.max_tokens, self.max_rows, self.max_blocks, model.vocab_size,
                                            self.device, self.dtype)
        self._seqs: dict[int, _Sequence] = {}
        self._free_blocks = list(range(self.num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first
        self._free_slots = list(range(self.max_rows - 1, -1, -1))

    # ----------------------------------------------------------------------------------------------- public

    @property
    def device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return self.device.type

    @property
    def free_blocks(self) -> int:
        return len(self._free_blocks)

    @property
    def active_requests(self) -> list[int]:
        return sorted(self._seqs)

    def step(self, rows: list[StepRow]) -> list[int]:
        """One forward over all rows, unpadded and eager; the greedy next token after each row's last token."""
        if not rows:
            return []
        staged = self.stage(rows)
        self.compute(staged.shape)
        return self.collect(staged)

    def forward_padded(self, rows: list[StepRow], pad_to: tuple[int, int, int]) -> list[int]:
        """The same step padded to a graph shape (T, P, D), reading the KV cache to its static bound: exactly
        what a CUDA graph of that shape captures."""
        staged = self.stage(rows, pad_to)
        self.compute(staged.shape)
        return self.collect(staged)

    def logits(self, rows: list[StepRow], pad_to: tuple[int, int, int] | None = None) -> torch.Tensor:
        """Like ``step`` (or ``forward_padded``), but returns the last-token logits (rows, vocab), caller order."""
        staged = self.stage(rows, pad_to)
        self.compute(staged.shape)
        return self.buffers.logits[list(staged.order)].clone()

    def release(self, request_id: int) -> None:
        """Frees the request's KV blocks and Mamba slot; unknown ids are ignored."""
        seq = self._seqs.pop(request_id, None)
        if seq is not None:
            self._free_blocks.extend(reversed(seq.blocks))
            self._free_slots.append(seq.slot)

    def prompt_tokens(self, request_id: int, length: int) -> list[int]:
        """Deterministic random prompt ids from (seed, request_id)."""
        gen = torch.Generator().manual_seed((self.seed * 0x9E3779B97F4A7C15 + request_id + 1) % (1 << 63))
        return torch.randint(0, self.model_config.vocab_size, (length,), generator=gen).tolist()

    def generate_alone(self, prompt: list[int], n: int) -> list[int]:
        """Oracle: n greedy tokens for the prompt alone, recomputing the whole sequence densely for each token
        (no cache, no paging, no batching). Shares only the weights with ``step``."""
        self._check_tokens(prompt, "prompt")
        ids = torch.tensor(prompt, dtype=torch.int64, device=self.device)
        out: list[int] = []
        with torch.no_grad():
            for _ in range(n):
                token = self.model.forward_dense(ids)[-1].argmax()
                out.append(int(token))
                ids = torch.cat([ids, token.view(1)])
        return out

    def snapshot(self, request_id: int) -> dict[str, list[torch.Tensor]]:
        """Copies of a request's cached state: per attention layer its keys / values (length, kv_heads, head_dim),
        per Mamba layer its conv state (K-1, conv_dim) and SSM state (heads, head_dim, state_dim)."""
        seq = self._seqs[request_id]
        pos = torch.arange(seq.length)
        blocks = torch.tensor(seq.blocks, dtype=torch.int64)[pos // self.block_size]
        slots = (blocks * self.block_size + pos % self.block_size).to(self.device)

        def gather(cache: torch.Tensor) -> torch.Tensor:
            return cache.view(-1, *cache.shape[2:])[slots].clone()

        return {"k": [gather(k) for k in self.cache.k], "v": [gather(v) for v in self.cache.v],
                "conv": [c[seq.slot].clone() for c in self.cache.conv],
                "ssm": [s[seq.slot].clone() for s in self.cache.ssm]}

    # ------------------------------------------------------------------------------------ the three phases

    def stage(self, rows: list[StepRow], pad_to: tuple[int, int, int] | None = None) -> StagedStep:
        """Checks and allocates for the rows, then fills the static buffers. pad_to=None: no padding, KV read to
        the longest row; otherwise the graph shape (T, P, D) and the static KV bound."""
        self._check_rows(rows)
        # One-token rows (decodes) first, as Megatron lays out a batch; prefill chunks after them.
        layout = sorted(range(len(rows)), key=lambda i: len(rows[i].token_ids) > 1)
        ordered = [rows[i] for i in layout]
        shape = self._shape(ordered, pad_to)
        self._allocate(ordered)
        self._fill(ordered, shape)
        order = [0] * len(rows)
        for padded_index, i in enumerate(layout):
            order[i] = padded_index
        return StagedStep(shape, tuple(order))

    def stage_idle(self, pad_to: tuple[int, int, int]) -> StagedStep:
        """An all-padding batch of a graph shape: every write goes to the trash block / slot, so compute can run
        (warm-up, capture) without touching any request."""
        return self.stage([], pad_to)

    def compute(self, shape: StepShape) -> None:
        """Device-only forward of the staged step; no host sync. Results land in ``buffers.logits`` and
        ``buffers.next_tokens`` (first ``shape.rows`` rows)."""
        with torch.no_grad():
            logits = self.model(self.buffers.inputs(shape), self.cache)  # (R, vocab)
            self.buffers.logits[:shape.rows].copy_(logits)
            self.buffers.next_tokens[:shape.rows].copy_(logits.argmax(dim=-1))

    def collect(self, staged: StagedStep) -> list[int]:
        tokens = self.buffers.next_tokens[:staged.shape.rows].tolist()
        return [tokens[i] for i in staged.order]

    # ------------------------------------------------------------------------------------------- helpers

    def _check_tokens(self, tokens: list[int], what: str) -> None:
        vocab = self.model_config.vocab_size
        if not tokens:
            raise ValueError(f"{what}: needs at least one token")
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"{what}: token ids {bad[:5]} outside the vocabulary [0, {vocab})")

    def _check_rows(self, rows: list[StepRow]) -> None:
        seen: set[int] = set()
        for row in rows:
            rid = row.request_id
            if rid in seen:
                raise ValueError(f"request {rid} appears twice in one step")
            seen.add(rid)
            self._check_tokens(row.token_ids, f"request {rid}")
            cached = self._seqs[rid].length if rid in self._seqs else 0
            if row.start_pos != 0 and row.start_pos != cached:
                raise ValueError(f"request {rid}: start_pos {row.start_pos} but {cached} tokens are cached")
            end = row.start_pos + len(row.token_ids)
            if end > self.engine.max_sequence_length:
                raise ValueError(f"request {rid}: {end} tokens exceed engine.max_sequence_length "
                                 f"({self.engine.max_sequence_length})")

    def _shape(self, rows: list[StepRow], pad_to: tuple[int, int, int] | None) -> StepShape:
        ntok = sum(len(r.token_ids) for r in rows)
        if ntok > self.max_tokens or len(rows) > self.max_rows:
            raise ValueError(f"the step has {ntok} tokens in {len(rows)} rows; the engine holds at most "
                             f"engine.max_tokens ({self.max_tokens}) in engine.max_requests ({self.max_rows})")
        if pad_to is None:
            longest = max((r.start_pos + len(r.token_ids) for r in rows), default=1)
            return StepShape(ntok, len(rows), -(-longest // self.block_size), ntok == len(rows))
        tokens, prefills, decodes = pad_to
        nrows = prefills + decodes
        if min(pad_to) < 0 or tokens > self.max_tokens or nrows > self.max_rows or tokens < 1:
            raise ValueError(f"pad_to {pad_to}: needs 1 <= T <= engine.max_tokens ({self.max_tokens}), "
                             f"P, D >= 0 and P + D <= engine.max_requests ({self.max_rows})")
        if tokens < ntok or nrows < len(rows):
            raise ValueError(f"pad_to {pad_to} is smaller than the batch ({ntok} tokens, {len(rows)} rows)")
        decode_only = prefills == 0
        if decode_only and (tokens != decodes or ntok != len(rows)):
            raise ValueError(f"pad_to {pad_to}: a decode-only shape needs T == D and one token per row")
        return StepShape(tokens, nrows, self.max_blocks, decode_only)

    def _allocate(self, rows: list[StepRow]) -> None:
        restarts = [r.request_id for r in rows if r.start_pos == 0 and r.request_id in self._seqs]
        freed_blocks = sum(len(self._seqs[rid].blocks) for rid in restarts)
        new_slots = sum(1 for r in rows if r.start_pos == 0) - len(restarts)
        need_blocks = 0
        for r in rows:
            have = 0 if r.start_pos == 0 else len(self._seqs[r.request_id].blocks)
            need_blocks += max(0, -(-(r.start_pos + len(r.token_ids)) // self.block_size) - have)
        if new_slots > len(self._free_slots):
            raise RuntimeError(f"no free Mamba state slot: {len(self._seqs)} requests hold all "
                               f"engine.max_requests ({self.max_rows}) slots")
        if need_blocks > len(self._free_blocks) + freed_blocks:
            raise RuntimeError(f"KV cache exhausted: the step needs {need_blocks} new blocks, "
                               f"{len(self._free_blocks) + freed_blocks} free of {self.num_blocks}")
        for rid in restarts:
            self.release(rid)
        for r in rows:
            seq = self._seqs.get(r.request_id)
            if seq is None:
                seq = self._seqs[r.request_id] = _Sequence(self._free_slots.pop(), [], 0)
            end = r.start_pos + len(r.token_ids)
            while len(seq.blocks) * self.block_size < end:
                seq.blocks.append(self._free_blocks.pop())
            seq.length = end

    def _fill(self, rows: list[StepRow], shape: StepShape) -> None:
        bs, ntok_pad, nrows_pad = self.block_size, shape.tokens, shape.rows
        ids, positions, slots, token_row = [], [], [], []
        starts, lengths, context, state_slot, last = [], [], [], [], []
        tables = []
        for i, r in enumerate(rows):
            seq = self._seqs[r.request_id]
            starts.append(len(ids))
            lengths.append(len(r.token_ids))
            context.append(r.start_pos)
            state_slot.append(seq.slot)
            tables.append(seq.blocks + [self.trash_block] * (self.max_blocks - len(seq.blocks)))
            for j, tok in enumerate(r.token_ids):
                pos = r.start_pos + j
                ids.append(tok)
                positions.append(pos)
                slots.append(seq.blocks[pos // bs] * bs + pos % bs)
                token_row.append(i)
            last.append(len(ids) - 1)
        real = len(ids)
        pad_tokens, pad_rows = ntok_pad - real, nrows_pad - len(rows)
        ids += [0] * pad_tokens
        positions += [0] * pad_tokens
        slots += [-1] * pad_tokens
        token_row += [nrows_pad] * pad_tokens
        starts += [real] * (pad_rows + 1)  # padding rows and the dummy row start after the real tokens
        lengths += [0] * (pad_rows + 1)
        context += [0] * (pad_rows + 1)
        state_slot += [self.trash_slot] * (pad_rows + 1)
        tables += [[self.trash_block] * self.max_blocks] * (pad_rows + 1)
        last += [-1] * pad_rows

        b = self.buffers
        for buf, values in ((b.input_ids, ids), (b.positions, positions), (b.slot_mapping, slots),
                            (b.token_row, token_row), (b.query_start, starts), (b.query_len, lengths),
                            (b.context_len, context), (b.state_slot, state_slot), (b.last_token, last),
                            (b.block_tables, tables)):
            if values:
                buf[:len(values)].copy_(torch.tensor(values, dtype=torch.int64))
