"""Megatron's ranges for ``--megatron-args`` values (``cgbench.config.megatron_ranges``), checked before
any arithmetic: each refusal is one line naming the flag, never a ZeroDivisionError, an OverflowError
or a cgbench key the user never typed."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.config.megatron_args import translate, with_megatron_args
from cgbench.config.megatron_ranges import RANGES
from cgbench.config.schema import ConfigError
from tests.helpers import one_error_line

DYN = "--inference-dynamic-batching "
runner = CliRunner()


@pytest.mark.parametrize(("line", "flag"), [
    ("--num-layers 0", "--num-layers"),
    ("--kv-channels 0", "--kv-channels"),
    ("--num-attention-heads -8", "--num-attention-heads"),
    ("--tensor-model-parallel-size 0", "--tensor-model-parallel-size"),
    ("--vocab-size 1000 --make-vocab-size-divisible-by 0", "--make-vocab-size-divisible-by"),
    ("--hidden-size 4096 --mamba-head-dim 0 --hybrid-layer-pattern M*", "--mamba-head-dim"),
    ("--hidden-size 99999999999999999999999", "--hidden-size"),
    ("--cuda-graph-impl local --inference-dynamic-batching-num-cuda-graphs 0",
     "--inference-dynamic-batching-num-cuda-graphs"),
    (DYN + "--inference-dynamic-batching-buffer-size-gb 1e300", "--inference-dynamic-batching-buffer-size-gb"),
    (DYN + "--inference-dynamic-batching-buffer-size-gb nan", "--inference-dynamic-batching-buffer-size-gb"),
    (DYN + "--inference-dynamic-batching-paused-buffer-size-gb inf",
     "--inference-dynamic-batching-paused-buffer-size-gb"),
    (DYN + "--inference-dynamic-batching-mamba-memory-ratio 1", "--inference-dynamic-batching-mamba-memory-ratio"),
    (DYN + "--inference-dynamic-batching-mamba-memory-ratio 0", "--inference-dynamic-batching-mamba-memory-ratio"),
    (DYN + "--inference-dynamic-batching-mamba-memory-ratio 1.5", "--inference-dynamic-batching-mamba-memory-ratio"),
    ("--hidden-size 100 --num-attention-heads 3", "--hidden-size 100 is not a multiple of --num-attention-heads"),
])
def test_a_value_outside_megatrons_range_is_refused_naming_its_flag(line, flag):
    with pytest.raises(ConfigError, match="^--megatron-args: " + flag):
        with_megatron_args(line, ["workload.num_requests=4"])


def test_megatrons_special_values_and_inner_values_pass():
    assert "cg.num_cuda_graphs=-1" in translate("--cuda-graph-impl local "
                                                 "--inference-dynamic-batching-num-cuda-graphs -1").overrides
    translate(DYN + "--inference-dynamic-batching-mamba-memory-ratio 0.5 --num-speculative-tokens 0")
    assert all(r.flag.startswith("--") for r in RANGES.values())


@pytest.mark.parametrize("line", ["--num-layers 0", DYN + "--inference-dynamic-batching-buffer-size-gb 1e300",
                                  "--vocab-size 1000 --make-vocab-size-divisible-by 0"])
def test_the_cli_line_blames_the_flag(tmp_path, line):
    one_error_line(runner.invoke(app, ["run", "--megatron-args", line, "--out", str(tmp_path / "x.json")]),
                   line.split()[-2])
    assert not (tmp_path / "x.json").exists()
