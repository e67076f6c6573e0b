"""The cost model's validation: published measurements next to what the model gives for them.

    python scripts/validation_table.py            # print the per-class summary and the step rows
    python scripts/validation_table.py --write    # also replace them in docs/cost-model.md (and the
                                                  # per-class summary in README.md's cost-model section)

Sources (each row of the data files names its own):

* ``scripts/validation_data.csv``: Vidur's public profiles (github:microsoft/vidur,
  data/profiling/compute/{a100,h100}/<model>/mlp.csv: per-layer QKV, output, MLP up and down GEMM
  times of seven models at TP 1-8; data/profiling/network/{a100,h100}_dgx/all_reduce.csv: NCCL
  all-reduce on one node), rebuilt by ``scripts/validation_extract.py``;
* ``scripts/validation_steps.csv``: decode attention (Vidur), attention efficiency (issue 29,
  FlashAttention-2), published eager-vs-graph step pairs (sgl-project/sglang PR 1401,
  vllm-project/vllm-omni issue 7960, facebookresearch/metaseq PR 270), a measured MoE decode step
  (tenstorrent/tt-inference-server issue 340);
* ``scripts/validation_kernels.csv``: Mamba-2's chunked scan (vllm-project/vllm PR 27299) and state
  update (vllm-project/vllm PR 43083), NCCL all-reduces replayed in CUDA graphs (vllm-project/vllm
  PR 24111).

``fit`` rows chose a preset figure (a tile shape and efficiency, an all-reduce alpha and beta, a host
profile's µs per op, the scan's efficiency and floor); ``check`` rows are held back, and every class
reports them apart. The acceptance bands are test fixtures (tests/backends/test_validation.py).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from cgbench.backends.sim.collectives import Collectives
from cgbench.backends.sim.cost_model import EagerPadding, RooflineCostModel, estimate_attention_pairs, ssd_chunks
from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepWork

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cost-model.md"
README = ROOT / "README.md"
SUMMARY_BEGIN, SUMMARY_END = "<!-- validation-summary:begin -->", "<!-- validation-summary:end -->"
DATA = ROOT / "scripts" / "validation_data.csv"
STEPS = ROOT / "scripts" / "validation_steps.csv"
KERNELS = ROOT / "scripts" / "validation_kernels.csv"
BEGIN, END = "<!-- validation-table:begin -->", "<!-- validation-table:end -->"
LINEAR_GEMMS = ("QKV projection", "output projection", "MLP up", "MLP down")


@functools.cache  # each preset file is read once, however many rows price on it
def _preset(group: str, name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def model(name: str) -> ModelConfig:
    return ModelConfig(**_preset("model", name))


def hardware(name: str, **changes: object) -> HardwareConfig:
    hw = HardwareConfig(**_preset("hardware", name))
    return dataclasses.replace(hw, **changes) if changes else hw


LLAMA3_8B = model("transformer")
# OPT-175B (metaseq): 96 layers, hidden 12288, 96 heads x 128, FFN 49152 (ReLU, 2 matrices), vocab 50272.
OPT_175B = dataclasses.replace(LLAMA3_8B, name="opt175b", pattern_repeat=96, hidden_size=12288,
                               num_attention_heads=96, num_kv_heads=96, ffn_hidden_size=49152, vocab_size=50272,
                               gated_mlp=False)
# Qwen3-1.7B (Qwen's HF config of Qwen/Qwen3-1.7B): 28 layers, hidden 2048, 16 heads / 8 KV heads x 128,
# FFN 6144 (SwiGLU), vocab 151936: the dense control of the Qwen3-30B-A3B rows (the same published sweep).
QWEN3_1_7B = dataclasses.replace(LLAMA3_8B, name="qwen3_1_7b", pattern_repeat=28, hidden_size=2048,
                                 num_attention_heads=16, num_kv_heads=8, ffn_hidden_size=6144, vocab_size=151936)
MODELS = {"llama3_8b": LLAMA3_8B, "opt_175b": OPT_175B, "qwen3_1_7b": QWEN3_1_7B,
          "qwen3_30b_a3b": model("qwen3_30b_a3b")}


@dataclass(frozen=True)
class Row:
    cls: str
    quantity: str
    source: str
    measured: float
    modelled: float
    role: str

    @property
    def error(self) -> float:
        return (self.modelled - self.measured) / self.measured


def linear_ms(r: dict[str, str]) -> float:
    """Per-layer time of the four GEMMs of one Vidur row (its dimensions, its TP degree)."""
    heads, hidden = int(r["heads"]), int(r["hidden"])
    m = dataclasses.replace(LLAMA3_8B, name=r["model"], pattern_repeat=1, hidden_size=hidden,
                            num_attention_heads=heads, num_kv_heads=int(r["kv_heads"]), head_dim=hidden // heads,
                            ffn_hidden_size=int(r["ffn"]), gated_mlp=r["gated"] == "True")
    cost = RooflineCostModel(m, hardware(r["hardware"]), int(r["tp"]))
    tokens = int(r["tokens"])
    total = 0.0
    for kn in cost.kernels_prefill:
        if kn.name in LINEAR_GEMMS:
            total += kn.seconds(tokens, 1, 0, tokens, cost.floors[kn.cls], cost.flops, cost.bandwidth,
                                cost.tiling) / kn.layers
    return total * 1e3


def allreduce_ms(r: dict[str, str]) -> float:
    return Collectives.from_hardware(hardware(r["hardware"]), int(r["tp"])).allreduce(float(r["bytes"])) * 1e3


def decode_step_ms(r: dict[str, str]) -> tuple[float, float]:
    """(graphed, eager) ms of a decode step of ``batch`` requests with ``cached`` tokens each."""
    tp, batch, cached = int(r["tp"]), int(r["batch"]), int(r["cached"])
    hw = hardware(r["hardware"], host_profile=r["host_profile"])
    cost = RooflineCostModel(MODELS[r["model"]], hw, tp,
                             eager_padding=EagerPadding.from_engine(EngineConfig(tp_size=tp)))
    graph = max(batch, tp)
    ctx = batch * (cached + 1)
    eager = cost.step_time(StepWork(batch, 0, batch, ctx, None)) * 1e3
    graphed = cost.step_time(StepWork(batch, 0, batch, ctx, (graph, 0, graph))) * 1e3
    return graphed, eager


def mamba_layer(r: dict[str, str]) -> ModelConfig:
    """One Mamba-2 layer of a kernel row's dimensions (its heads, head dim, groups and state)."""
    return dataclasses.replace(model("hybrid"), name="mamba_kernel", layer_pattern="M", pattern_repeat=1,
                               mamba_num_heads=int(r["heads"]), mamba_head_dim=int(r["head_dim"]),
                               mamba_num_groups=int(r["groups"]), mamba_state_dim=int(r["state"]))


def mamba_kernel_seconds(r: dict[str, str], name: str, prefill: bool) -> float:
    """The cost model's time for the one kernel ``name`` of a Mamba-2 layer: ``sequences`` requests of
    ``tokens`` tokens in all (a prefill of them, or a decode step of one token each)."""
    chunk = int(r["chunk"]) or 128
    cost = RooflineCostModel(mamba_layer(r), hardware(r["hardware"]), int(r["tp"]), ssd_chunk=chunk)
    kernels = cost.kernels_prefill if prefill else cost.kernels_decode
    kn = next(k for k in kernels if k.name == name)
    seqs, tokens = int(r["sequences"]), int(r["tokens"])
    chunks = ssd_chunks(tokens, seqs, chunk) if prefill else 0.0
    return kn.seconds(tokens, seqs, 0 if prefill else tokens, tokens if prefill else 0, cost.floors[kn.cls],
                      cost.flops, cost.bandwidth, cost.tiling, float(seqs), chunks) / kn.layers


def kernel_value(r: dict[str, str]) -> float:
    """A kernel row's modelled value, in its unit (ms for the scan, µs for the rest)."""
    cls = r["class"]
    if cls == "mamba_ssd":
        return mamba_kernel_seconds(r, "SSM chunked scan", prefill=True) * 1e3
    if cls == "ssm_update":
        return mamba_kernel_seconds(r, "SSM update", prefill=False) * 1e6
    if cls == "allreduce_graph":
        return Collectives.from_hardware(hardware(r["hardware"]), int(r["tp"])).allreduce(float(r["bytes"])) * 1e6
    raise ValueError(f"{KERNELS.name}: unknown class {cls!r}")


def step_value(r: dict[str, str]) -> float:
    cls, batch, cached = r["class"], int(r["batch"]), int(r["cached"])
    if cls == "attention_decode":
        cost = RooflineCostModel(LLAMA3_8B, hardware(r["hardware"]))
        w = StepWork(batch, 0, batch, batch * (cached + 1), (batch, 0, batch))
        return cost.breakdown(w)["attention"] / cost.n_attention * 1e3
    if cls == "attention_prefill":  # one chunk of `batch` tokens after `cached` ones: FLOPs / (time x peak)
        hw = hardware(r["hardware"])
        cost = RooflineCostModel(LLAMA3_8B, hw)
        w = StepWork(batch, 1, 0, cached + batch, (batch, 1, 0))
        pairs = estimate_attention_pairs(batch, 1, 0, cached + batch)
        return hw.attention_efficiency * pairs / (pairs + cost.prefill_key_overhead(w))
    graphed, eager = decode_step_ms(r)
    if cls == "ratio":
        return eager / graphed
    return eager if "eager" in r["quantity"] else graphed


def rows() -> Iterator[Row]:
    with DATA.open() as f:
        for r in csv.DictReader(f):
            if r["class"] == "linear":
                what = f"{r['model']} linear layers, {r['tokens']} tokens, TP {r['tp']}, {r['hardware']} (ms)"
                yield Row("linear", what, r["source"], float(r["measured_ms"]), linear_ms(r), r["role"])
            else:
                what = f"all-reduce {int(r['bytes']):,} B, TP {r['tp']}, {r['hardware']} (ms)"
                yield Row("allreduce", what, r["source"], float(r["measured_ms"]), allreduce_ms(r), r["role"])
    with STEPS.open() as f:
        for r in csv.DictReader(f):
            yield Row(r["class"], r["quantity"], r["source"], float(r["measured"]), step_value(r), r["role"])
    with KERNELS.open() as f:
        for r in csv.DictReader(f):
            yield Row(r["class"], r["quantity"], r["source"], float(r["measured"]), kernel_value(r), r["role"])


@dataclass(frozen=True)
class ClassSummary:
    """One class's |error|s: all its rows, the rows a preset figure was fitted on, and the held-back
    rows apart (None where the class has none of them)."""

    cls: str
    count: int
    held_out: int
    median: float
    worst: float
    held_out_median: float | None
    held_out_worst: float | None = None
    fit_median: float | None = None


def _median(errs: list[float]) -> float | None:
    return statistics.median(errs) if errs else None


def summarise(all_rows: list[Row]) -> list[ClassSummary]:
    out = []
    for cls in dict.fromkeys(r.cls for r in all_rows):
        errs = [abs(r.error) for r in all_rows if r.cls == cls]
        held = [abs(r.error) for r in all_rows if r.cls == cls and r.role == "check"]
        fit = [abs(r.error) for r in all_rows if r.cls == cls and r.role == "fit"]
        out.append(ClassSummary(cls, len(errs), len(held), statistics.median(errs), max(errs), _median(held),
                                max(held) if held else None, _median(fit)))
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def summary_table(all_rows: list[Row]) -> str:
    lines = ["| class | rows | fitted on | fitted-on median \\|error\\| | held back | held-back median | "
             "held-back worst | all: median / worst |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summarise(all_rows):
        lines.append(f"| {s.cls} | {s.count} | {s.count - s.held_out} | {_pct(s.fit_median)} | {s.held_out} | "
                     f"{_pct(s.held_out_median)} | {_pct(s.held_out_worst)} | {_pct(s.median)} / {_pct(s.worst)} |")
    return "\n".join(lines)


def detail_table(all_rows: list[Row]) -> str:
    lines = ["| class | quantity | source | measured | model | error | role |", "|---|---|---|---:|---:|---:|---|"]
    for r in all_rows:
        if r.cls in ("linear", "allreduce"):  # hundreds of rows each: their summary line says it
            continue
        fmt = "{:.3f}" if r.measured < 1 else "{:.2f}"
        lines.append(f"| {r.cls} | {r.quantity} | {r.source} | {fmt.format(r.measured)} | {fmt.format(r.modelled)} | "
                     f"{100 * r.error:+.0f}% | {'fit' if r.role == 'fit' else 'held back'} |")
    return "\n".join(lines)


def table() -> str:
    all_rows = list(rows())
    return f"{summary_table(all_rows)}\n\n{detail_table(all_rows)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace the table in {DOC.relative_to(ROOT)}")
    args = parser.parse_args()
    text = table()
    print(text)
    if args.write:
        _replace(DOC, BEGIN, END, text)
        _replace(README, SUMMARY_BEGIN, SUMMARY_END, summary_table(list(rows())))


def _replace(path: Path, begin: str, end: str, text: str) -> None:
    doc = path.read_text()
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


if __name__ == "__main__":
    main()
