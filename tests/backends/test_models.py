"""The two tiny models: cached / chunked execution against the dense whole-sequence forward, state equality
across chunkings, seeded weights, and greedy outputs that actually vary."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # the real torch engine

torch = pytest.importorskip("torch")

from cgbench.backends.torch.models import build_model  # noqa: E402
from cgbench.backends.torch.models.conv import conv_dense, conv_varlen  # noqa: E402
from cgbench.backends.torch.models.step import StepInputs  # noqa: E402
from cgbench.backends.torch.runner import StepRow, TorchRunner  # noqa: E402
from cgbench.config.schema import ConfigError, EngineConfig, ModelConfig  # noqa: E402


def tiny(kind: str, **over) -> ModelConfig:
    common = dict(hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16, ffn_hidden_size=128,
                  vocab_size=256)
    if kind == "transformer":
        cfg = ModelConfig(name="tiny-transformer", kind="transformer", layer_pattern="*-", pattern_repeat=2,
                          **common)
    else:
        cfg = ModelConfig(name="tiny-hybrid", kind="hybrid", layer_pattern="M-M*-", pattern_repeat=1,
                          mamba_num_heads=4, mamba_head_dim=16, mamba_state_dim=16, mamba_num_groups=2,
                          mamba_conv_kernel=4, **common)
    for key, value in over.items():
        setattr(cfg, key, value)
    return cfg


ENGINE = EngineConfig(max_requests=4, max_tokens=64, max_sequence_length=64, block_size=8)
KINDS = ["transformer", "hybrid"]
TOL = {"float32": dict(rtol=2e-4, atol=2e-4), "float64": dict(rtol=1e-9, atol=1e-9)}


def runner(kind: str, dtype: str = "float32", **kw) -> TorchRunner:
    return TorchRunner(tiny(kind), ENGINE, seed=0, dtype=dtype, ssd_chunk=4, **kw)


def _prefill(r: TorchRunner, rid: int, prompt: list[int], cuts: list[int]) -> torch.Tensor:
    """Prefill in chunks ending at each cut (and at the end); the logits after the last chunk."""
    logits, lo = None, 0
    for hi in [*cuts, len(prompt)]:
        logits = r.logits([StepRow(rid, prompt[lo:hi], lo)])[0]
        lo = hi
    return logits


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_chunked_prefill_equals_one_chunk(kind, dtype):
    """Same next-token logits and the same cached state (KV, conv, SSM) whatever the chunking; chunk ends fall
    inside and on KV-block and SSD-chunk boundaries, and one chunk is a single token."""
    r = runner(kind, dtype)
    prompt = r.prompt_tokens(0, 29)
    whole = _prefill(r, 0, prompt, [])
    split = _prefill(r, 1, prompt, [3, 4, 8, 13, 24])
    torch.testing.assert_close(split, whole, **TOL[dtype])
    assert int(split.argmax()) == int(whole.argmax())
    a, b = r.snapshot(0), r.snapshot(1)
    assert set(a) == {"k", "v", "conv", "ssm"}
    assert len(a["ssm"]) == tiny(kind).layers.count("M") and len(a["k"]) == tiny(kind).layers.count("*")
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            torch.testing.assert_close(y, x, **TOL[dtype])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_decode_after_prefill_equals_the_full_sequence(kind, dtype):
    """Prefill n-1 tokens then decode the n-th: its logits equal the dense forward of all n tokens (no cache,
    no paging) at every step of a short decode."""
    r = runner(kind, dtype)
    seq = r.prompt_tokens(3, 24)
    _prefill(r, 0, seq[:17], [6])
    for n in range(17, 24):
        decoded = r.logits([StepRow(0, [seq[n]], n)])[0]
        with torch.no_grad():
            dense = r.model.forward_dense(torch.tensor(seq[:n + 1]))[-1]
        torch.testing.assert_close(decoded, dense, **TOL[dtype])


@pytest.mark.parametrize("kind", KINDS)
def test_dense_forward_is_causal(kind):
    """Appending tokens never changes the logits of earlier positions."""
    model = build_model(tiny(kind), seed=1, dtype=torch.float64)
    ids = torch.randint(0, 256, (20,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full, prefix = model.forward_dense(ids), model.forward_dense(ids[:11])
    torch.testing.assert_close(full[:11], prefix, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tie", [False, True])
def test_greedy_decoding_varies(kind, tie):
    """48 greedy tokens from each of 3 prompts are not one token repeated: many distinct ids, and the most
    frequent one is well under half of them."""
    r = runner(kind, tie_embeddings=tie)
    for rid in range(3):
        out = r.generate_alone(r.prompt_tokens(rid, 8), 48)
        most = max(out.count(t) for t in set(out))
        assert len(set(out)) >= 12 and most <= 12, out


def test_weights_follow_the_seed():
    cfg = tiny("hybrid")
    a, b, c = (build_model(cfg, seed=s) for s in (5, 5, 6))
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    differs = [not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True)]
    assert sum(differs) >= len(differs) // 2


def test_weights_do_not_depend_on_dtype():
    a = build_model(tiny("transformer"), seed=2)
    b = build_model(tiny("transformer"), seed=2, dtype=torch.float64)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa.double(), pb)


def test_layer_pattern_builds_the_right_blocks():
    model = build_model(tiny("hybrid", layer_pattern="M*-", pattern_repeat=2), seed=0)
    kinds = [type(b.mixer).__name__ for b in model.blocks]
    assert kinds == ["Mamba2Mixer", "Attention", "MLP"] * 2
    assert (model.num_mamba_layers, model.num_attention_layers) == (2, 2)


@pytest.mark.parametrize("over,key", [
    (dict(layer_pattern="M*x"), "model.layer_pattern"),
    (dict(num_kv_heads=3), "model.num_kv_heads"),
    (dict(mamba_num_groups=3), "model.mamba_num_groups"),
    (dict(mamba_conv_kernel=1), "model.mamba_conv_kernel"),
])
def test_bad_model_configs_name_the_key(over, key):
    with pytest.raises(ConfigError, match=key):
        build_model(tiny("hybrid", **over), seed=0)


def test_conv_varlen_resumes_rows_from_their_state():
    """Two rows, each fed in two steps through the packed conv with its carried state, equal one dense conv."""
    gen = torch.Generator().manual_seed(0)
    channels, kernel = 5, 4
    weight = torch.randn(channels, kernel, generator=gen, dtype=torch.float64)
    bias = torch.randn(channels, generator=gen, dtype=torch.float64)
    seqs = [torch.randn(n, channels, generator=gen, dtype=torch.float64) for n in (9, 4)]
    state = torch.zeros(3, kernel - 1, channels, dtype=torch.float64)  # slots 0, 1 and a trash slot
    cuts = [(0, 2, 9), (0, 1, 4)]  # row r: tokens [0, cut) in step 1, [cut, end) in step 2
    outs = [[], []]
    for step_no in range(2):
        parts = [seqs[r][cuts[r][step_no]:cuts[r][step_no + 1]] for r in range(2)]
        lens = [p.shape[0] for p in parts]
        xbc = torch.cat(parts + [torch.zeros(2, channels, dtype=torch.float64)])  # 2 padding tokens
        step = StepInputs(
            input_ids=torch.zeros(sum(lens) + 2, dtype=torch.int64), positions=torch.zeros(0),
            slot_mapping=torch.zeros(0), token_row=torch.tensor([0] * lens[0] + [1] * lens[1] + [2, 2]),
            query_start=torch.tensor([0, lens[0], sum(lens)]), query_len=torch.tensor(lens + [0]),
            context_len=torch.tensor([cuts[0][step_no], cuts[1][step_no], 0]), state_slot=torch.tensor([0, 1, 2]),
            block_tables=torch.zeros(3, 1), last_token=torch.zeros(2), num_rows=2, kv_blocks=1,
            decode_only=False)
        out, new_state = conv_varlen(xbc, state, step, weight, bias)
        state[:2] = new_state
        outs[0].append(out[:lens[0]])
        outs[1].append(out[lens[0]:sum(lens)])
    for r in range(2):
        torch.testing.assert_close(torch.cat(outs[r]), conv_dense(seqs[r], weight, bias))
        torch.testing.assert_close(state[r], seqs[r][-(kernel - 1):])
