"""The cost model's validation table: published measurements next to what the model gives for them.

    python scripts/validation_table.py            # print the Markdown table
    python scripts/validation_table.py --write    # also replace it in docs/cost-model.md

The same figures are test fixtures (tests/backends/test_time_model.py), with the acceptance bands.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import yaml

from cgbench.backends.sim.cost_model import EagerPadding, RooflineCostModel
from cgbench.config.schema import EngineConfig, HardwareConfig, ModelConfig
from cgbench.engine.contract import StepWork

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cost-model.md"
BEGIN, END = "<!-- validation-table:begin -->", "<!-- validation-table:end -->"
VIDUR = "Vidur public profile"


def model(name: str) -> ModelConfig:
    return ModelConfig(**yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text()))


def hardware(name: str) -> HardwareConfig:
    return HardwareConfig(**yaml.safe_load((ROOT / "conf" / "hardware" / f"{name}.yaml").read_text()))


LLAMA3_8B = model("transformer")
LLAMA2_7B = dataclasses.replace(LLAMA3_8B, num_kv_heads=32, ffn_hidden_size=11008, vocab_size=32000)
# OPT-175B (metaseq): 96 layers, hidden 12288, 96 heads x 128, FFN 49152 (ReLU, 2 matrices), vocab 50272.
OPT_175B = dataclasses.replace(LLAMA3_8B, name="opt175b", pattern_repeat=96, hidden_size=12288,
                               num_attention_heads=96, num_kv_heads=96, ffn_hidden_size=49152, vocab_size=50272,
                               gated_mlp=False)
A100, H100 = hardware("a100"), hardware("h100")


def linear_ms(m: ModelConfig, hw: HardwareConfig, tokens: int) -> float:
    w = StepWork(1, 0, 1, 1, (1, 0, 1)) if tokens == 1 else StepWork(tokens, 1, 0, tokens, (tokens, 1, 0))
    parts = RooflineCostModel(m, hw).breakdown(w)
    return (parts["projections"] + parts["mlp"]) * 1e3


def attention_ms(batch: int) -> float:
    w = StepWork(batch, 0, batch, batch * 609, (batch, 0, batch))
    return RooflineCostModel(LLAMA3_8B, A100).breakdown(w)["attention"] / 32 * 1e3


def decode_ms(m: ModelConfig, hw: HardwareConfig, tp: int, batch: int, cached: int) -> tuple[float, float]:
    cost = RooflineCostModel(m, hw, tp, eager_padding=EagerPadding.from_engine(EngineConfig(tp_size=tp)))
    graph = max(batch, tp)
    ctx = batch * (cached + 1)
    eager = cost.step_time(StepWork(batch, 0, batch, ctx, None)) * 1e3
    graphed = cost.step_time(StepWork(batch, 0, batch, ctx, (graph, 0, graph))) * 1e3
    return graphed, eager


FIT, CHECK = "fit", "check"


def rows() -> list[tuple[str, ...]]:
    """(quantity, source, measured, model, error, role): ``fit`` rows set a preset figure (an efficiency,
    a floor, host_op_us), so they agree by construction; ``check`` rows are out of sample."""
    out = []
    fits = iter([FIT, FIT, FIT, CHECK, FIT, FIT, CHECK, FIT, CHECK, CHECK, CHECK])

    def add(what: str, source: str, measured: float, modelled: float, fmt: str = "{:.2f}") -> None:
        err = 100 * (modelled - measured) / measured
        out.append((what, source, fmt.format(measured), fmt.format(modelled), f"{err:+.0f}%", next(fits)))

    add("Llama-3-8B linear layers, decode batch 1, A100 (ms)", f"{VIDUR} (A100, mlp.csv)", 9.7,
        linear_ms(LLAMA3_8B, A100, 1))
    add("Llama-3-8B linear layers, 2k-token prefill, A100 (ms)", f"{VIDUR} (A100, mlp.csv)", 141.8,
        linear_ms(LLAMA3_8B, A100, 2048), "{:.1f}")
    for tokens, ms in ((1, 5.60), (64, 5.86), (2048, 40.5)):
        add(f"Llama-2-7B-shaped linear layers, {tokens} token{'s' if tokens > 1 else ''}, H100 (ms)",
            f"{VIDUR} (H100)", ms, linear_ms(LLAMA2_7B, H100, tokens))
    for batch, ms in ((12, 0.038), (64, 0.113)):
        add(f"decode attention per layer, batch {batch}, ~608 cached tokens, A100 (ms)",
            f"{VIDUR} (A100 attention)", ms, attention_ms(batch), "{:.3f}")
    g, e = decode_ms(LLAMA3_8B, A100, 1, 1, 1000)
    add("eager / graphed decode, 7B-class, batch 1, A100/A800 (x)", "vllm-omni issue 7960 (22-23 vs ~13 ms)",
        1.75, e / g)
    g, e = decode_ms(OPT_175B, A100, 8, 1, 1000)
    add("175B (OPT-shaped) graphed decode per token, 8 x A100 (ms)", "metaseq PR 270", 66.0, g, "{:.1f}")
    add("175B (OPT-shaped) eager decode per token, 8 x A100 (ms)", "metaseq PR 270", 95.0, e, "{:.1f}")
    add("175B eager / graphed, 8 x A100 (x)", "metaseq PR 270 (95 vs 66 ms)", 95 / 66, e / g)
    return out


def table() -> str:
    lines = ["| quantity | source | measured | model | error | role |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace the table in {DOC.relative_to(ROOT)}")
    args = parser.parse_args()
    text = table()
    print(text)
    if args.write:
        doc = DOC.read_text()
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
