"""TorchRunner: batched mixed steps against each request generated alone, padding neutrality, eviction and
re-prefill, slot / block accounting, and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

pytestmark = pytest.mark.slow  # the real torch engine

torch = pytest.importorskip("torch")

from cgbench.backends.torch.runner import StepRow, TorchRunner  # noqa: E402
from cgbench.config.schema import ConfigError, EngineConfig, ModelConfig  # noqa: E402


def tiny(kind: str) -> ModelConfig:
    common = dict(hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16, ffn_hidden_size=128,
                  vocab_size=256)
    if kind == "transformer":
        return ModelConfig(name="tiny-transformer", kind="transformer", layer_pattern="*-", pattern_repeat=2,
                           **common)
    return ModelConfig(name="tiny-hybrid", kind="hybrid", layer_pattern="M-M*-", mamba_num_heads=4,
                       mamba_head_dim=16, mamba_state_dim=16, mamba_num_groups=2, mamba_conv_kernel=4, **common)


KINDS = ["transformer", "hybrid"]


def engine(**over) -> EngineConfig:
    base = dict(max_requests=8, max_tokens=64, max_sequence_length=64, block_size=8)
    return EngineConfig(**{**base, **over})


def make(kind: str, **over) -> TorchRunner:
    return TorchRunner(tiny(kind), engine(**over), seed=0, ssd_chunk=4)


@dataclass
class Req:
    rid: int
    prompt: list[int]
    n: int  # tokens to generate
    chunk: int  # prefill chunk size
    arrival: int  # first step it may run
    fed: int = 0
    out: list[int] = field(default_factory=list)

    def row(self) -> StepRow:
        if self.fed < len(self.prompt):
            return StepRow(self.rid, self.prompt[self.fed:self.fed + self.chunk], self.fed)
        return StepRow(self.rid, [self.out[-1]], len(self.prompt) + len(self.out) - 1)


def requests(r: TorchRunner) -> list[Req]:
    """Five requests: prompts 1..23 tokens, chunks 1..9, staggered so steps mix prefill chunks and decodes, and
    later requests reuse the slots and blocks of finished ones."""
    spec = [(17, 6, 5, 0), (9, 9, 9, 0), (23, 5, 4, 1), (1, 7, 1, 2), (12, 6, 7, 9)]
    return [Req(i, r.prompt_tokens(i, plen), n, chunk, arrival)
            for i, (plen, n, chunk, arrival) in enumerate(spec)]


def drive(reqs: list[Req], forward, release) -> int:
    """A minimal engine loop: every arrived, unfinished request gets its next chunk or its decode each step.
    forward(rows) -> tokens. Returns the number of steps."""
    steps = 0
    while any(len(q.out) < q.n for q in reqs):
        live = [q for q in reqs if q.arrival <= steps and len(q.out) < q.n]
        rows = [q.row() for q in live]
        tokens = forward(rows)
        for q, row, tok in zip(live, rows, tokens, strict=True):
            if q.fed < len(q.prompt):
                q.fed += len(row.token_ids)
                if q.fed < len(q.prompt):
                    continue  # a non-final chunk: its sample is discarded
            q.out.append(tok)
            if len(q.out) == q.n:
                release(q.rid)
        steps += 1
    return steps


@pytest.mark.parametrize("kind", KINDS)
def test_mixed_batches_equal_each_request_alone(kind):
    r = make(kind)
    reqs = requests(r)
    shapes = []

    def forward(rows):
        shapes.append((sum(len(x.token_ids) > 1 for x in rows), sum(len(x.token_ids) == 1 for x in rows)))
        return r.step(rows)

    drive(reqs, forward, r.release)
    assert any(p >= 2 and d >= 1 for p, d in shapes), "the schedule never mixed prefills and decodes"
    for q in reqs:
        assert q.out == r.generate_alone(q.prompt, q.n), q.rid
    assert r.free_blocks == r.num_blocks and not r.active_requests


def _pad(rows: list[StepRow], i: int) -> tuple[int, int, int]:
    """A graph shape at least as large as the batch, varied step by step."""
    t = sum(len(x.token_ids) for x in rows)
    d = sum(len(x.token_ids) == 1 for x in rows)
    p = len(rows) - d
    if p == 0 and i % 2 == 0:
        return (d + 2, 0, d + 2)  # decode-only graph with two padding rows
    if p == 0:
        return (d, 0, d)  # an exact decode-only graph
    return [(t + 5, p + 1, d + 1), (t, p, d), (t + 1, p + d, 0), (t + 9, p, d + 2)][i % 4]


@pytest.mark.parametrize("kind", KINDS)
def test_padded_forward_equals_unpadded(kind):
    """Two runners, same schedule: logits with padding to a graph shape (extra tokens, empty rows, full KV
    bound) match the unpadded step at every step, and the tokens still equal each request alone."""
    plain, padded = make(kind), make(kind)
    reqs = requests(plain)
    counter = iter(range(1000))

    def forward(rows):
        i = next(counter)
        want = plain.logits(rows)
        got = padded.logits(rows, _pad(rows, i))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
        return got.argmax(-1).tolist()

    def release(rid):
        plain.release(rid)
        padded.release(rid)

    drive(reqs, forward, release)
    for q in reqs:
        assert q.out == plain.generate_alone(q.prompt, q.n)


@pytest.mark.parametrize("kind", KINDS)
def test_eviction_then_reprefill_continues_the_same_sequence(kind):
    """Evict after 3 tokens, re-prefill prompt + generated tokens from scratch (in chunks, in another slot that
    held someone else's state), then keep decoding: the same tokens as never evicted."""
    r = make(kind)
    prompt, other = r.prompt_tokens(0, 13), r.prompt_tokens(1, 10)
    want = r.generate_alone(prompt, 8)
    r.step([StepRow(1, other, 0)])  # request 1 takes a slot and leaves state in it
    out = [r.step([StepRow(0, prompt, 0)])[0]]
    for _ in range(2):
        out += r.step([StepRow(0, [out[-1]], len(prompt) + len(out) - 1)])
    r.release(0)
    r.release(1)  # its slot is now on top of the free stack, dirty
    extended = prompt + out
    r.step([StepRow(0, extended[:6], 0)])
    out += r.step([StepRow(0, extended[6:], 6)])
    while len(out) < 8:
        out += r.step([StepRow(0, [out[-1]], len(prompt) + len(out) - 1)])
    assert out == want


@pytest.mark.parametrize("kind", KINDS)
def test_restart_at_zero_without_release_starts_fresh(kind):
    r = make(kind)
    prompt = r.prompt_tokens(4, 9)
    first = r.step([StepRow(4, prompt, 0)])
    r.step([StepRow(4, first, 9)])
    assert r.step([StepRow(4, prompt, 0)]) == first


@pytest.mark.parametrize("kind", KINDS)
def test_idle_padding_batch_touches_no_request(kind):
    """An all-padding step (graph warm-up / capture) leaves every live request's KV and state bit-identical."""
    r = make(kind)
    r.step([StepRow(0, r.prompt_tokens(0, 11), 0), StepRow(1, r.prompt_tokens(1, 5), 0)])
    before = [r.snapshot(rid) for rid in (0, 1)]
    for shape in ((16, 2, 3), (4, 0, 4)):
        r.compute(r.stage_idle(shape).shape)
    for rid, snap in zip((0, 1), before, strict=True):
        after = r.snapshot(rid)
        for key in snap:
            for x, y in zip(snap[key], after[key], strict=True):
                assert torch.equal(x, y), key


def test_blocks_and_slots_are_accounted():
    r = make("hybrid", max_requests=2, kv_blocks=5)
    assert r.free_blocks == 5
    r.step([StepRow(0, list(range(9)), 0)])  # 9 tokens: 2 blocks of 8
    assert r.free_blocks == 3
    r.step([StepRow(0, [1] * 7, 9)])  # 16 tokens: still 2 blocks
    assert r.free_blocks == 3
    r.step([StepRow(0, [1], 16)])  # the 17th token opens a third block
    assert r.free_blocks == 2
    r.step([StepRow(1, [2, 3], 0)])
    with pytest.raises(RuntimeError, match="slot"):
        r.step([StepRow(2, [5], 0)])
    r.release(1)
    with pytest.raises(RuntimeError, match="KV cache exhausted"):
        r.step([StepRow(2, list(range(17)), 0)])
    r.release(0)
    r.release(0)  # unknown ids are ignored
    assert r.free_blocks == 5 and not r.active_requests


@pytest.mark.parametrize("rows,pad_to,match", [
    ([StepRow(0, [1, 2], 3)], None, "start_pos 3 but 0"),
    ([StepRow(0, [1], 0), StepRow(0, [2], 0)], None, "twice"),
    ([StepRow(0, [], 0)], None, "at least one token"),
    ([StepRow(0, [999], 0)], None, "outside the vocabulary"),
    ([StepRow(0, [1] * 65, 0)], None, "max_sequence_length"),
    ([StepRow(0, [1, 2, 3], 0)], (2, 1, 0), "smaller than the batch"),
    ([StepRow(0, [1, 2, 3], 0)], (4, 0, 4), "decode-only"),
    ([StepRow(0, [1], 0)], (65, 1, 0), "engine.max_tokens"),
    ([StepRow(0, [1], 0)], (8, 5, 4), "engine.max_requests"),
])
def test_bad_steps_raise(rows, pad_to, match):
    r = make("transformer")
    with pytest.raises(ValueError, match=match):
        r.forward_padded(rows, pad_to) if pad_to else r.step(rows)
    assert not r.active_requests  # a rejected step allocates nothing


def test_bad_backend_settings_raise_config_errors():
    with pytest.raises(ConfigError, match="backend.dtype"):
        TorchRunner(tiny("transformer"), engine(), seed=0, dtype="int8")
    with pytest.raises(ConfigError, match="backend.device"):
        TorchRunner(tiny("transformer"), engine(), seed=0, device="nonsense")


def test_prompt_tokens_are_deterministic_per_seed_and_id():
    a, b = make("transformer"), TorchRunner(tiny("transformer"), engine(), seed=1)
    assert a.prompt_tokens(3, 40) == a.prompt_tokens(3, 40)
    assert a.prompt_tokens(3, 40) != a.prompt_tokens(4, 40)
    assert a.prompt_tokens(3, 40) != b.prompt_tokens(3, 40)
    assert all(0 <= t < 256 for t in a.prompt_tokens(3, 400))
    assert a.device_name == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_graph_replay_equals_eager(kind):
    """Capture compute() for one padded shape, then replay it for real batches: the same tokens as eager."""
    eager = make(kind)
    graphed = TorchRunner(tiny(kind), engine(), seed=0, device="cuda", ssd_chunk=4)
    shape = graphed.stage_idle((24, 3, 2)).shape
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            graphed.compute(shape)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed.compute(shape)
    reqs = requests(eager)[:3]
    for q in reqs:
        q.arrival = 0

    def forward(rows):
        staged = graphed.stage(rows, (24, 3, 2))
        assert staged.shape == shape
        graph.replay()
        got = graphed.collect(staged)
        assert got == eager.step(rows)
        return got

    def release(rid):
        eager.release(rid)
        graphed.release(rid)

    drive(reqs, forward, release)
