"""The bad-input corpus: every command line cgbench must refuse, and the files they point at.

Each case is a command line and the words its one error line must hold. `test_bad_input_corpus.py`
runs every case through the real CLI and holds it to the rule for bad user input: exit 2, one line
``error: ...`` holding every needle, no traceback, no file left behind, within a time bound (an
alarm) and a memory bound (peak RSS growth in process, or an address-space limit on a child).

``{name}`` in a line is the path of the bad file ``name`` (``bad_files``); paths never contain
spaces. The sections after "special files" are the hostile part: end to end, run by ``make test-all``."""

from __future__ import annotations

import gzip
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cgbench.analysis.sweep.folder import INDEX_KIND, INDEX_NAME
from cgbench.backends.sim.calibrated import CALIBRATION_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
SMALL = "workload.num_requests=8"
STATE = ROOT / "tests" / "states" / "11_2_round1.json"
SEVENTY_B = ("model=transformer model.hidden_size=8192 model.pattern_repeat=80 model.ffn_hidden_size=28672 "
             "model.num_attention_heads=64")
TIME_LIMIT_S = 60  # a generous bound: every case takes about a second; a hang takes forever
RSS_GROWTH_LIMIT_KB = 300 * 1024
CHILD_ADDRESS_SPACE = 3 * 2**30  # numpy and Hydra alone reserve ~1 GiB of address space
IS_ROOT = os.geteuid() == 0
LONG_NAME = "n" * 300
DEEP = 100_000


PLUGIN_FILES = {  # a folder each, holding this plugins.yaml (make_bad_files)
    "plugins_list": "[policies]\n",
    "plugins_family": "policy:\n  mine: {_target_: my_module.POLICY}\n",
    "plugins_entries": "grids: [pow2]\n",
    "plugins_name": "policies:\n  2fast: {_target_: my_module.POLICY}\n",
    "plugins_node": "workloads:\n  ramp: my_module.ARRIVAL\n",
    "plugins_colon": "policies:\n  mine: {_target_: 'my_module:POLICY'}\n",
    "plugins_builtin": "policies:\n  megatron: {_target_: my_module.POLICY}\n",
    "plugins_noimport": "policies:\n  mine: {_target_: cgbench_no_such_module.POLICY}\n",
    "plugins_misnamed": "policies:\n  mine: {_target_: cgbench.config.registry.policies.PolicySpec, name: other}\n",
    "plugins_factory": "grids:\n  mine: {_target_: cgbench.config.registry.grids.GridKind, nme: mine}\n",
    "plugins_twice_a": "grids:\n  mine: {_target_: my_module.GRID}\n",
    "plugins_twice_b": "grids:\n  mine: {_target_: my_module.GRID}\n",
    "plugins_alias": "policies:\n  a: &a {_target_: my_module.POLICY}\n  b: *a\n",
    # issue 44: foreign code at the plug-in boundary (tests.hostile_plugins), a deep plugins.yaml
    "plugins_exit_import": "policies:\n  mine: {_target_: tests.hostile_plugins.exits_on_import.POLICY}\n",
    "plugins_exit_build": "policies:\n  exiting: {_target_: tests.hostile_plugins.EXITING}\n",
    "plugins_custom": "policies:\n  custom: {_target_: tests.hostile_plugins.CUSTOM}\n",
    "plugins_strings": "workloads:\n  strings: {_target_: tests.hostile_plugins.STRINGS}\n",
    "plugins_endless": "workloads:\n  endless: {_target_: tests.hostile_plugins.ENDLESS}\n",
    "plugins_endless_grid": "grids:\n  endless_grid: {_target_: tests.hostile_plugins.ENDLESS_GRID}\n",
    "plugins_deep": "policies: " + "[" * 20_000 + "]" * 20_000 + "\n",
}


@dataclass(frozen=True)
class Case:
    line: str
    needles: tuple[str, ...]
    slow: bool = False  # the hostile part: marked e2e (make test-all only)
    child: bool = False  # run in a child process under an address-space limit, not in process


def _section(*rows: tuple, slow: bool = False, child: bool = False) -> list[Case]:
    return [Case(line, needles if isinstance(needles, tuple) else (needles,), slow, child)
            for line, needles in rows]


CASES: list[Case] = [
    # -- unknown keys and groups, with and without '+', with the closest known key
    *_section(
        ("run engine.max_tokkens=5", ("engine.max_tokkens: unknown key", "did you mean engine.max_tokens")),
        ("run +engine.max_tokkens=5", ("engine.max_tokkens: unknown key", "did you mean engine.max_tokens")),
        ("run +workload.num_request=5", ("workload.num_request", "did you mean workload.num_requests")),
        ("run +brand_new=1", ("brand_new: unknown key",)),
        ("run model/x=y", ("model/x", "not a config group")),
        ("grid +cg.num_cuda_graph=4", ("cg.num_cuda_graph", "did you mean cg.num_cuda_graphs")),
        ("sweep +engine.max_tokkens=1,2 --dry-run", ("engine.max_tokkens", "did you mean engine.max_tokens")),
        ("run model=gpt5", "model/gpt5"),
        ("run model=my70b", "model/my70b"),
        ("run cg=nope", "cg/nope"),
        ("run policy=greedy", "policy: 'greedy' is not one of budget, cover, defer, megatron"),
        ("run workload=nope", "workload/nope"),
        ("run hardware=tpu", "hardware/tpu"),
        ("run nonsense_key=1", "nonsense_key"),
    ),
    # -- wrong types
    *_section(
        ("run cg.num_cuda_graphs=abc", "cg.num_cuda_graphs"),
        ("run engine.chunked_prefill=maybe", "chunked_prefill"),
        ("run engine.max_requests=1.5", "max_requests"),
        ("run seed=abc", "seed"),
        ("run workload.arrival.rate=fast", "rate"),
    ),
    # -- bad values
    *_section(
        ("run cg.kind=nope", "cg.kind"),
        ("run policy.name=greedy", "policy.name"),
        ("run model.kind=rnn", "model.kind"),
        ("run engine.max_tokens=-1", "engine.max_tokens"),
        ("run engine.max_requests=0", "engine.max_requests"),
        ("run engine.block_size=0", "engine.block_size"),
        ("run engine.max_sequence_length=0", "engine.max_sequence_length"),
        ("run engine.kv_blocks=-3", "engine.kv_blocks"),
        ("run engine.max_tokens=100", "engine.max_tokens"),  # < max_requests (256)
        ("run engine.max_requests=6 engine.tp_size=4", "engine.max_requests"),  # must be a tp multiple
        ("run engine.num_speculative_tokens=-1", "num_speculative_tokens"),
        ("run engine.megatron_rules=0.20", ("engine.megatron_rules", "0.19.2, main")),
        ("run engine.batch_invariant=true", ("engine.batch_invariant", "engine.megatron_rules=main")),
        ("run model=transformer engine.megatron_rules=main engine.handoff_pinning=true",
         ("engine.handoff_pinning", "hybrid")),
        ("run engine.megatron_rules=main engine.batch_invariant=true engine.num_speculative_tokens=1",
         ("engine.batch_invariant", "num_speculative_tokens=0")),
        ("run engine.spec_acceptance.per_position=[0.8]", ("engine.spec_acceptance", "num_speculative_tokens > 0")),
        ("run engine.num_speculative_tokens=2 engine.spec_acceptance.per_position=[0.8]",
         ("engine.spec_acceptance.per_position", "one probability per draft position (2)")),
        ("run engine.num_speculative_tokens=1 engine.spec_acceptance.per_position=[1.5]",
         "engine.spec_acceptance.per_position[0]"),
        ("run engine.num_speculative_tokens=1 engine.spec_acceptance.lengths=[1,2,3]",
         ("engine.spec_acceptance.lengths", "0..1")),
        ("run engine.num_speculative_tokens=1 engine.spec_acceptance.lengths=[0,0]",
         ("engine.spec_acceptance.lengths", "positive total")),
        ("run engine.num_speculative_tokens=1 engine.spec_acceptance.lengths=[1,-1]",
         "engine.spec_acceptance.lengths[1]"),
        ("run engine.num_speculative_tokens=1 engine.spec_acceptance.per_position=[0.5] "
         "engine.spec_acceptance.lengths=[1,1]", ("engine.spec_acceptance", "not both")),
        ("run cg.num_cuda_graphs=-2", "cg.num_cuda_graphs"),
        ("run cg.distribution=cubic", "cg.distribution"),
        ("run cg=explicit cg.graphs=[[64,1]]", "cg.graphs[0]"),
        ("run cg=explicit cg.graphs=[[5000,1,0]]", "cg.graphs[0]"),  # T > P*msl + D: invalid shape
        ("run policy=pad_guard policy.pad_guard.max_ratio=0.5", "max_ratio"),
        ("run policy=wait_timeout policy.wait_timeout.iters=-1", "wait_timeout.iters"),
        ("run workload.num_requests=0", "workload.num_requests"),
        ("run workload.arrival.process=poisson workload.arrival.rate=0", "workload.arrival.rate"),
        ("run workload.arrival.process=closed_loop", "concurrency"),
        ("run workload.prompt_len.dist=zipf", "prompt_len.dist"),
        ("run workload.prompt_len.min=10 workload.prompt_len.max=5", "prompt_len.max"),
        ("run workload.time_scale=0", "time_scale"),
        ("run backend.name=jax", "backend.name"),
        ("run backend.cost_model=calibrated", "backend.calibration"),
        ("run backend.cost_model=calibrated backend.calibration=/nonexistent/table.json", "table.json"),
        ("run hardware.peak_flops=0", "peak_flops"),
        ("run hardware.host_profile=tgi", ("hardware.host_profile", "megatron, vllm, sglang, measured")),
        ("run hardware.host_profile=measured", ("hardware.host_profile", "hardware.host_calibration")),
        ("run hardware.allreduce_algorithm=nvls", "hardware.allreduce_algorithm"),
        ("run hardware.scan_efficiency=1.5", ("hardware.scan_efficiency", "<= 1")),
        ("run model.padded_slot_cost=half", ("model.padded_slot_cost", "full, shared or a fraction")),
        ("run model.padded_slot_cost=1.5", "model.padded_slot_cost"),
        ("run slo.ttft_ms=-5", "slo.ttft_ms"),
        ("run slo.tpot_ms=0", ("slo.tpot_ms", "> 0")),
        ("run slo.ttft=500", ("slo.ttft", "did you mean slo.ttft_ms")),
        ("run slo.itl_ms=20", "slo.itl_ms"),
        ("run engine.prefix_caching=maybe", "prefix_caching"),
        ("run engine.prefix_caching_mamba_slots=4", ("engine.prefix_caching_mamba_slots", "prefix_caching=true")),
        ("run engine.prefix_caching=true engine.prefix_caching_mamba_slots=-1", "prefix_caching_mamba_slots"),
        ("run engine.prefix_caching=true engine.ep_size=2", ("engine.prefix_caching", "ep_size=1")),
        ("run workload.prefix.session_turns=0", "workload.prefix.session_turns"),
        ("run engine.prefix_gate=computed", ("engine.prefix_gate", "prefix_caching=true")),
        ("run engine.prefix_caching_eviction=ref_zero", ("engine.prefix_caching_eviction", "prefix_caching=true")),
        ("run engine.prefix_caching=true engine.prefix_caching_eviction=fifo", "engine.prefix_caching_eviction"),
        ("run model=hybrid engine.prefix_caching=true engine.megatron_rules=main engine.batch_invariant=true",
         ("engine.prefix_caching", "batch-invariant")),
        ("run model=hybrid engine.prefix_caching=true engine.megatron_rules=main engine.handoff_pinning=true",
         ("engine.prefix_caching", "handoff_pinning")),
        ("run engine.prefix_caching=true engine.prefix_gate=half", "engine.prefix_gate"),
        ("run workload.prefix.system_prompts=2", "workload.prefix.system_prompt_tokens"),
        ("run workload=mooncake_conv workload.prefix.session_turns=2", ("workload.prefix", "hash_ids")),
        ("run engine.prefix_caching=true engine.dp_size=2", ("engine.prefix_caching", "dp_size=1")),
        # data parallelism (docs/data-parallel.md)
        ("run engine.dp_size=0", "engine.dp_size"),
        ("run engine.dp_size=2 engine.dp_routing=fastest", "engine.dp_routing"),
        ("run engine.dp_size=2 engine.dp_routing=prefix_longest", ("engine.dp_routing", "prefix-block hashes")),
        ("run model=hybrid engine.dp_size=3 engine.ep_size=2", ("engine.dp_size", "multiple of engine.ep_size")),
        ("run engine.dp_routing=round_robin", ("engine.dp_routing", "engine.dp_size=1")),
    ),
    # -- model rules that used to live only in the torch model: every backend now
    *_section(
        ("run model.head_dim=127", ("model.head_dim", "even")),
        ("run model.mamba_num_groups=3", ("model.mamba_num_groups", "must divide model.mamba_num_heads")),
        ("run model.mamba_conv_kernel=1", ("model.mamba_conv_kernel", ">= 2")),
        ("run backend.dtype=int8", ("backend.dtype", "float32")),
        ("run backend=torch engine.num_speculative_tokens=1", ("engine.num_speculative_tokens", "draft model")),
    ),
    # -- MoE layers ('E')
    *_section(
        ("run model=qwen3_30b_a3b model.experts_per_token=200", ("model.experts_per_token", "<= model.num_experts")),
        ("run model=qwen3_30b_a3b engine.ep_size=3", ("engine.ep_size", "must divide model.num_experts (128)")),
        ("run model=nemotron3_nano model.moe_shared_expert_ffn_hidden_size=0",
         "model.moe_shared_expert_ffn_hidden_size"),
        ("run model=hybrid model.num_experts=8", ("model.num_experts", "without an 'E' (MoE) layer")),
        ("run model=hybrid model.layer_pattern=M*X", ("model.layer_pattern", "'E'")),
    ),
    # -- keys the chosen options never read
    *_section(
        ("run cg=megatron cg.graphs=[[64,0,64]]", ("cg.graphs", "cg.kind=megatron", "cg=explicit")),
        ("grid cg=dense cg.graphs=[[64,0,64]]", ("cg.graphs", "cg=explicit")),
        ("run cg=vllm cg.num_cuda_graphs=8", ("cg.num_cuda_graphs", "cg.kind=vllm")),
        ("run cg.capture_sizes=[1,2]", ("cg.capture_sizes", "vllm")),
        ("run cg=vllm cg.padding=false", ("cg.padding", "sglang or trtllm")),
        ("run cg.cuda_graph_max_tokens=256", ("cg.cuda_graph_max_tokens", "all_prefills=true")),
        ("run workload=trace workload.num_requests=10", ("workload.num_requests", "trace is the workload")),
        ("run workload=trace workload.prompt_len.dist=fixed", ("workload.prompt_len", "trace")),
        ("run workload.time_scale=2", ("workload.time_scale", "no workload.trace")),
        ("run workload.arrival.rate=5", ("workload.arrival.rate", "all_at_once")),
        ("run workload=chat workload.arrival.burstiness=2", ("workload.arrival.burstiness", "gamma")),
        ("run workload.arrival.concurrency=4", ("workload.arrival.concurrency", "closed_loop")),
        ("run workload.prompt_len.sigma=1.5", ("workload.prompt_len.sigma", "dist=uniform")),
        ("run policy=budget policy.pad_guard.max_ratio=3", ("policy.pad_guard", "policy=pad_guard")),
        ("run policy.wait_timeout.iters=5", ("policy.wait_timeout", "policy=megatron")),
        ("run backend.calibration=table.json", ("backend.calibration", "cost_model=calibrated")),
        ("run backend=torch hardware.peak_flops=1e15", ("hardware.peak_flops", "backend=torch")),
        ("run backend=torch hardware.host_profile=vllm", ("hardware.host_profile", "backend=torch")),
        ("run backend=torch model.padded_slot_cost=full", ("model.padded_slot_cost", "backend=torch")),
        ("run backend.host_memory_gb=64", ("backend.host_memory_gb", "backend=torch")),
    ),
    # -- deletions, Hydra's settings and sweeps on run
    *_section(
        ("run ~slo", ("~slo", "removing a key is not supported")),
        ("run ~engine.max_tokens", ("~engine.max_tokens", "removing a key")),
        ("run hydra/launcher=joblib", ("hydra/launcher=joblib", "cgbench sweep --jobs N")),
        ("run hydra.run.dir=/tmp/x", ("hydra.run.dir", "not used by cgbench")),
        ("run model=transformer,hybrid", ("model=transformer,hybrid", "cgbench sweep model=transformer,hybrid")),
        ("run sweep=ci", ("sweep: only cgbench sweep reads the sweep group", "cgbench sweep sweep=ci")),
        ("grid sweep.jobs=2", ("sweep.jobs: only cgbench sweep reads the sweep group",)),
        ("run -m model=hybrid", ("--multirun", "for several use: cgbench sweep", "model=hybrid")),
    ),
    # -- guards, with the numbers
    *_section(
        (f"run {SEVENTY_B}", ("hardware.memory_gb", "139.0 GB of weights", "h100's 80 GB", "--allow-oversize")),
        ("run model=transformer engine.kv_blocks=20000", ("hardware.memory_gb", "GB of KV cache", "80 GB")),
        ("run backend=torch model=hybrid backend.device=cpu", ("backend.host_memory_gb", "7.56 B parameters",
                                                               "8 GB limit")),
    ),
    # -- options
    *_section(
        ("run --format yaml", ("--format", "table, markdown, json, csv")),
        ("run --cfg everything", ("--cfg", "job, all")),
        ("run --config-dir /nonexistent/confdir", ("--config-dir", "/nonexistent/confdir", "no such folder")),
        ("grid --format xml", "--format"),
        ("grid --format yaml", "--format"),
        (f"schedule {STATE} --format yaml", "--format"),
    ),
    # -- a config folder's plugins.yaml: its shape, its names, its targets
    *_section(
        ("run --config-dir {plugins_list}", ("plugins_list/plugins.yaml", "must be a mapping of plug-in families")),
        ("run --config-dir {plugins_family}", ("'policy' is not a plug-in family", "did you mean policies")),
        ("run --config-dir {plugins_entries}", ("plugins.yaml: grids: must map each plug-in's name",)),
        ("run --config-dir {plugins_name}", ("'2fast' is not a valid plug-in name",)),
        ("run --config-dir {plugins_node}", ("workloads.ramp: must be a mapping with _target_",)),
        ("run --config-dir {plugins_colon}", ("'my_module:POLICY' is not a dotted path", "not a colon")),
        ("run --config-dir {plugins_builtin}", ("plug-in 'megatron' (plugins.yaml in", "a built-in name",
                                                "could never take effect")),
        ("run policy=mine --config-dir {plugins_noimport}", ("plug-in 'mine' (plugins.yaml in",
                                                             "_target_ cgbench_no_such_module.POLICY", "failed to load",
                                                             "No module named 'cgbench_no_such_module'")),
        ("run policy=mine --config-dir {plugins_misnamed}", ("plug-in 'mine'", "the entry's name is 'other'",
                                                             "not the name plugins.yaml declares 'mine'")),
        ("run cg=mine --config-dir {plugins_factory}", ("plug-in 'mine'", "failed to load: TypeError", "nme")),
        ("run --config-dir {plugins_twice_a} --config-dir {plugins_twice_b}",
         ("plug-in 'mine' is declared twice", "plugins_twice_a", "plugins_twice_b")),
        ("run --config-dir {plugins_alias}", ("plugins.yaml:3", "alias")),
        ("schedule " + str(STATE) + " --policy mine --config-dir {plugins_noimport}",
         ("plug-in 'mine'", "failed to load")),
        ("sweep policy=mine,megatron --config-dir {plugins_misnamed} --dry-run", ("the entry's name is 'other'",)),
        ("run policy=mine --config-dir {plugins_exit_import}", ("plug-in 'mine'", "failed to load: SystemExit: 5")),
        ("run policy=exiting --config-dir {plugins_exit_build}", ("plug-in 'exiting'", "build failed: SystemExit: 3")),
        ("run policy=custom --config-dir {plugins_custom}", ("plug-in 'custom'", "build failed: Custom")),
        ("run workload.arrival.process=strings workload.arrival.rate=5 --config-dir {plugins_strings}",
         ("plug-in 'strings'", "arrival times must be numbers")),
        ("run workload.arrival.process=endless workload.arrival.rate=5 --config-dir {plugins_endless}",
         ("plug-in 'endless'", "drew more than")),
        ("run cg=endless_grid --config-dir {plugins_endless_grid}", ("plug-in 'endless_grid'", "graph limit")),
        ("run --config-dir {plugins_deep}", ("plugins_deep/plugins.yaml:1", "nested more than 64 levels deep")),
    ),
    # -- issue 44: --megatron-args values outside Megatron's ranges, each naming its flag
    *_section(
        ("run --megatron-args '--num-layers 0'", "--num-layers must be an integer >= 1"),
        ("run --megatron-args '--kv-channels -1'", "--kv-channels must be"),
        ("run --megatron-args '--tensor-model-parallel-size 0'", "--tensor-model-parallel-size must be"),
        ("run --megatron-args '--vocab-size 10 --make-vocab-size-divisible-by 0'", "--make-vocab-size-divisible-by"),
        ("run --megatron-args '--inference-dynamic-batching --inference-dynamic-batching-buffer-size-gb 1e300'",
         "--inference-dynamic-batching-buffer-size-gb must be"),
        ("run --megatron-args '--inference-dynamic-batching --inference-dynamic-batching-mamba-memory-ratio 1'",
         "--inference-dynamic-batching-mamba-memory-ratio must be strictly between 0 and 1"),
        ("run --megatron-args '--inference-dynamic-batching --inference-dynamic-batching-mamba-memory-ratio nan'",
         "--inference-dynamic-batching-mamba-memory-ratio"),
    ),
    # -- issue 44: compressed and deep inputs bounded in time, defaults cycles
    *_section(
        ("run workload.trace={blank_gz}", ("blank.jsonl.gz", "requests need about", "limit")),
        ("run workload=deep --config-dir {tree_deep}", ("deep.yaml:1", "nested more than 64 levels deep")),
        ("run model=loop --config-dir {tree_cycle}", ("a defaults list includes itself", "model/loop.yaml")),
        ("sweep seed=1,01 --dry-run", "seed: the sweep values '1' and '01' are the same value"),
        ("run workload.trace=/tmp/é.jsonl", "quote it: workload.trace='/tmp/é.jsonl'"),
    ),
    # -- traces
    *_section(
        ("run workload=trace workload.trace=/nonexistent/trace.jsonl", "trace.jsonl"),
        ("run workload=trace workload.trace={empty_trace}", "empty.jsonl"),
        ("run workload=trace workload.trace={bad_json_trace}", "bad.jsonl:2"),
        ("run workload=trace workload.trace={bad_value_trace}", "prompt_tokens"),
        ("run workload=trace workload.trace={negative_trace}", "neg.csv:3"),
        ("run workload=trace workload.trace={missing_col_trace}", "output_tokens"),
    ),
    # -- output paths
    *_section(
        ("run " + SMALL + " --out {a_file}/r.json", "a_file"),
        ("run " + SMALL + " --out {empty_dir}", "empty_dir"),
    ),
    # -- sweeps
    *_section(
        ("sweep seed=1,2 seed=3 --dry-run", "seed"),
        ("sweep seed=interval(0,1) --dry-run", "interval"),
        ("sweep model=transformer,gpt5 --dry-run", "gpt5"),
        ("sweep engine.max_tokens=16384,-1 --dry-run", "engine.max_tokens"),
        ("sweep sweep=nope --dry-run", "sweep/nope"),
    ),
    # -- compare and plot
    *_section(
        ("compare /nonexistent/a.json /nonexistent/b.json", "a.json"),
        ("compare {not_json} {not_json}", "not.json"),
        ("compare {wrong_schema} {wrong_schema}", "wrong.json"),
        ("compare {old_schema} {old_schema}", "schema_version"),
        ("compare {empty_dir} {empty_dir}", "empty_dir"),
        ("plot /nonexistent/sweep", "sweep"),
        ("plot {not_json}", "not.json"),
        ("plot {wrong_schema}", "wrong.json"),
    ),
    # -- grid and schedule
    *_section(
        ("grid cg.kind=nope", "cg.kind"),
        ("schedule /nonexistent/state.json", "state.json"),
        ("schedule {not_json}", "not.json"),
        ("schedule {bad_state}", "batch.decode"),
    ),
    # -- explain and export
    *_section(
        ("explain /nonexistent/run.json -r 1", "run.json"),
        ("explain {not_json} -r 1", "not.json"),
        ("explain {wrong_schema} -r 1", "wrong.json"),
        ("explain {not_json}", "--request N"),
        ("explain {not_json} -r 1 --format yaml", "--format"),
        ("export /nonexistent/run.json -o exported", "no such file"),
        ("export {not_json} -o exported", "not.json"),
        ("export {wrong_schema} -o exported", "wrong.json"),
        ("run " + SMALL + " --export {not_json}", "not a directory"),
        ("sweep model=hybrid " + SMALL + " --export {not_json}", "not a directory"),
    ),
    # -- Megatron step logs (docs/megatron-logs.md)
    *_section(
        ("explain --megatron-log /nonexistent/run.log", ("--megatron-log", "no such file")),
        ("explain --megatron-log {empty_log}", ("no step line", "an empty file")),
        ("explain --megatron-log {not_json}", ("no step line", "--inference-logging-step-interval")),
        ("explain --megatron-log {malformed_log}", ("do not parse", "line 2")),
        ("explain --megatron-log {empty_dir}", "a regular file"),
        ("explain --megatron-log {fifo_json}", "FIFO"),
        ("explain --megatron-log {malformed_log} --format yaml", "--format"),
        ("explain --megatron-log {malformed_log} --what-if cg=dense", "--what-if: needs the config"),
        ("explain --megatron-log {malformed_log} -O model=nope", "model/nope"),
        ("calibrate --megatron-log {malformed_log}", "name the model"),
        ("calibrate --megatron-log {malformed_log} model=hybrid", "do not parse"),
        ("calibrate --megatron-log {malformed_log} --host model=tiny_transformer", "give one of them"),
        ("calibrate --megatron-log {malformed_log} model=hybrid -o {malformed_log}", "this command's input"),
        ("calibrate --rank 0", ("--rank", "--megatron-log LOG")),
        ("calibrate --megatron-log {malformed_log} model=hybrid --repeat 3", ("--repeat", "drop it")),
        ("run --cfg job --emit-megatron-log x.log", ("--emit-megatron-log", "--cfg")),
        ("run " + SMALL + " engine.num_speculative_tokens=1 --emit-megatron-log x.log", "speculative decoding"),
        ("explain --megatron-log {malformed_log} --rank 0 --format json", ("--rank", "every rank")),
        ("run model=tiny_transformer engine=small workload=small backend=torch --emit-megatron-log x.log",
         ("--emit-megatron-log", "backend=sim")),
        ("run " + SMALL + " --emit-megatron-log {empty_dir}", "is a directory"),
        ("run " + SMALL + " hardware.host_calibration={bad_log_calibration}",
         ("fitted.hardware.bandwidth_efficiency", "(0, 1]")),
    ),
    # -- report
    *_section(
        ("report /nonexistent/run.json -o report.html", "no such file"),
        ("report {not_json} -o report.html", "not.json"),
        ("report {wrong_schema} -o report.html", "wrong.json"),
        ("report {old_schema} -o report.html", "schema_version"),
        ("report {empty_dir} -o report.html", "not a sweep directory"),
        ("report {wrong_schema} -o {wrong_schema}", "input"),
        ("report {wrong_schema} -o {empty_dir}", "directory"),
    ),
    # -- special files as output
    *_section(
        ("run " + SMALL + " --out {fifo_json}", "FIFO"),
        ("run " + SMALL + " --out {chardev}", "character device"),
        ("run " + SMALL + " --out {dev_link}", "character device"),
        ("run " + SMALL + " --out {sock}", "socket"),
        ("run " + SMALL + " --out {fifo_link}", "FIFO"),
        ("run " + SMALL + " --out {blockdev}", "block device" if IS_ROOT else "FIFO"),
        ("run " + SMALL + " --out {dir_json}", "directory"),
        slow=True),
    # -- special files as input (compare and plot decide file-or-folder themselves and call a FIFO
    # "no such file or directory")
    *_section(
        ("run workload=trace workload.trace={fifo_jsonl}", "FIFO"),
        ("run workload=trace workload.trace={fifo_csv}", "FIFO"),
        ("run workload=trace workload.trace={dir_jsonl}", "is a directory"),
        ("run workload=trace workload.trace={zero_csv}", "character device"),
        ("run workload=trace workload.trace={blockdev}", "block device" if IS_ROOT else "FIFO"),
        ("run workload=trace workload.trace={big_jsonl}", "byte limit"),
        ("compare {fifo_json} {fifo_json}", "pipe.json"),
        ("compare {zero_json} {zero_json}", "zero.json"),
        ("compare {sock} {sock}", "s.json"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {fifo_yaml}", "FIFO"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {zero_json}", "character device"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {dir_json}", "is a directory"),
        ("schedule {fifo_json}", "FIFO"),
        ("schedule {zero_json}", "character device"),
        ("plot {fifo_json}", "pipe.json"),
        ("run backend.cost_model=calibrated backend.calibration={fifo_json}", "FIFO"),
        ("run backend.cost_model=calibrated backend.calibration={chardev}", "character device"),
        slow=True),
    # -- hangs: arrivals that never come
    *_section(
        ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=inf", "workload.time_scale"),
        ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=nan", "workload.time_scale"),
        ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=1e300", "workload.time_scale"),
        ("run workload=trace workload.trace={late_trace_jsonl}", "arrival_s"),
        ("run workload=trace workload.trace={inf_trace_jsonl}", "arrival_s"),
        ("run workload.arrival.process=poisson workload.arrival.rate=1e-300", "workload.arrival.rate"),
        ("sweep seed=range(0,10,0) --dry-run", "step"),
        ("sweep seed=range(0,1000000) --dry-run", "10,000"),
        slow=True),
    # -- memory: sizes refused before anything is built
    *_section(
        ("run workload.num_requests=10000000", "workload.num_requests"),
        ("run model.pattern_repeat=100000000", "model.pattern_repeat"),
        ("run cg=sglang cg.piecewise_max_tokens=10000000000000", "cg.piecewise_max_tokens"),
        ("grid cg=sglang cg.padding=false engine.max_requests=100000000 engine.max_tokens=100000000", "graphs"),
        ("grid engine.max_requests=100000 engine.max_tokens=100000", "engine.max_requests"),
        ("run cg=megatron cg.sizes_per_octave=1000000", "cg.sizes_per_octave"),
        ("schedule {big_grid_state_json}", "cg.max_capture_size"),
        ("run cg=sglang cg.padding=false cg.max_capture_size=1000000000", "cg.max_capture_size"),
        slow=True),
    # -- non-finite numbers
    *_section(
        ("run hardware.peak_flops=inf", "hardware.peak_flops"),
        ("run hardware.peak_flops=nan", "hardware.peak_flops"),
        ("run hardware.hbm_bandwidth=1e-300", "hardware.hbm_bandwidth"),
        ("run hardware.peak_flops=1e300", "hardware.peak_flops"),
        ("run workload.arrival.process=poisson workload.arrival.rate=inf", "workload.arrival.rate"),
        ("run workload.prompt_len.dist=lognormal workload.prompt_len.mean=100 workload.prompt_len.sigma=inf",
         "workload.prompt_len.sigma"),
        ("run policy=pad_guard policy.pad_guard.max_ratio=inf", "policy.pad_guard.max_ratio"),
        ("run cg.gpu_memory_gb=-inf", "cg.gpu_memory_gb"),
        ("compare {nan_result_json} {nan_result_json}", "metrics.x: nan is not a finite number"),
        ("compare {inf_result_json} {inf_result_json}", "metrics.x: inf is not a finite number"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {inf_rules_yaml}", "abs_tol"),
        ("run backend.cost_model=calibrated backend.calibration={inf_calib_json}", "tp_size: inf"),
        slow=True),
    # -- markup in paths is printed verbatim
    *_section(
        ("compare {markup}/m[/]a.json {markup}/m[/]a.json", "m[/]a.json"),
        ("compare {markup}/[bold]a[/bold].json {markup}/[bold]a[/bold].json", "[bold]a[/bold].json"),
        ("run workload=trace \"workload.trace='{markup}/m[/].jsonl'\"", "m[/].jsonl"),
        ("run workload=trace \"workload.trace='{markup}/[red]t[/red].csv'\"", "[red]t[/red].csv"),
        ("run " + SMALL + " --out {markup}/m[/]r.json", "m[/]r.json"),
        slow=True),
    # -- path escapes and impossible names
    *_section(
        ("run model.name=../../../escaped", "model.name"),
        ("run sweep.name=..", "sweep.name"),
        ("run workload.name=a/b", "workload.name"),
        ("run hardware.name=.hidden", "hardware.name"),
        ("run model.name=" + LONG_NAME, "model.name"),
        ("run " + SMALL + " --out {a_file}_dir/" + LONG_NAME + ".json", "file name too long"),
        slow=True),
    # -- integers beyond 64 bits
    *_section(
        ("run seed=99999999999999999999999", "seed"),
        ("run engine.max_requests=99999999999999999999", "engine.max_requests"),
        ("run cg=explicit cg.graphs=[[99999999999999999999,1,0]]", "cg.graphs[0][0]"),
        ("run workload=trace workload.trace={int_trace_jsonl}", "64 bits"),
        ("run workload=trace workload.trace={int65_trace_jsonl}", "64 bits"),
        ("run workload=trace workload.trace={int_trace_csv}", "prompt_tokens"),
        ("compare {int_result_json} {int_result_json}", "64 bits"),
        ("compare {int65_result_json} {int65_result_json}", "64 bits"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {int_rules_yaml}", "int_rules.yaml"),
        ("run backend.cost_model=calibrated backend.calibration={int_calib_json}", "64 bits"),
        ("schedule {int_state_json}", "64 bits"),
        slow=True),
    # -- deep nesting
    *_section(
        ("compare {deep_result_json} {deep_result_json}", "nested"),
        ("plot {deep_result_json}", "nested"),
        ("schedule {deep_state_json}", "nested"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {deep_rules_yaml}", "nested"),
        ("run workload=trace workload.trace={deep_trace_jsonl}", "deep_trace.jsonl:1"),
        ("run backend.cost_model=calibrated backend.calibration={deep_calib_json}", "nested"),
        slow=True),
    # -- oversized CSV cells and lines
    *_section(
        ("run workload=trace workload.trace={wide_trace_csv}", "wide_trace.csv:2"),
        ("run workload=trace workload.trace={long_line_jsonl}", "long_line.jsonl:1"),
        slow=True),
    # -- YAML surprises in a rules file
    *_section(
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {dup_rules_yaml}", "duplicate key"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {bomb_rules_yaml}", "rules"),
        slow=True),
    # -- malformed result documents
    *_section(
        ("compare {ovr_str_json} {ovr_str_json}", "'overrides'"),
        ("compare {ovr_int_json} {ovr_int_json}", "'overrides[0]'"),
        ("compare {config_list_json} {config_list_json}", "'config'"),
        ("compare {env_int_json} {env_int_json}", "'environment'"),
        ("compare {metrics_empty_json} {metrics_empty_json}", "'metrics' is empty"),
        ("compare {config_model_str_json} {config_model_str_json}", "'config.model'"),
        ("plot {steps_str_json}", "'steps'"),
        ("plot {steps_bad_json}", "'steps[0]'"),
        ("plot {usage_ints_json}", "'graph_usage[0]'"),
        ("compare {env_backend_list_json} {env_backend_list_json}", "'environment.backend'"),
        slow=True),
    # -- issue 32, outputs onto the command's own inputs: refused before any work, the input untouched
    *_section(
        ("run workload=trace workload.trace={ok_trace_jsonl} --out {ok_trace_jsonl}",
         ("cannot write --out", "this command's input", "workload.trace")),
        ("run workload=trace workload.trace={ok_trace_jsonl} --out {trace_link_json}", "this command's input"),
        ("run workload=trace workload.trace={ok_trace_jsonl} --out {trace_hardlink_json}", "this command's input"),
        ("run backend.cost_model=calibrated backend.calibration={ok_calib_json} --out {ok_calib_json}",
         ("this command's input", "backend.calibration")),
        ("compare {res_a_json} {res_b_json} --markdown {res_a_json}", ("--markdown", "this command's input", "BASE")),
        ("compare {res_a_json} {res_b_json} --markdown {res_b_json}", ("--markdown", "this command's input", "NEW")),
        ("compare {failed_sweep} {failed_sweep} --markdown {failed_sweep}/sweep.json",
         ("--markdown", "this command's input")),
        ("advise workload=trace workload.trace={advise_in}/advise.json --budget-graphs 4 --out {advise_in}",
         ("advise.json", "this command's input", "workload.trace")),
        ("advise workload=trace workload.trace={advise_in}/recommended_graphs.json --budget-graphs 4 "
         "--out {advise_in}", ("recommended_graphs.json", "this command's input")),
        ("sweep seed=1,2 workload=trace workload.trace={sweep_in}/summary.csv --out {sweep_in}",
         ("summary.csv", "this command's input", "workload.trace")),
        slow=True),
    # -- issue 32, stale or false results
    *_section(
        ("compare {failed_sweep} {failed_sweep}", ("nothing to compare", "every point failed on both sides", "boom")),
        ("plot {failed_sweep}", ("nothing to plot in", "every point failed (1 point; boom)")),
        ("advise " + SMALL + " seed=9223372036854775807 --budget-graphs 4", ("seed=9223372036854775808", "64 bits")),
        ("advise " + SMALL + " --check-seed 99999999999999999999 --budget-graphs 4", ("--check-seed", "64 bits")),
        ("advise " + SMALL + " --budget-graphs 9223372036854775808", ("--budget-graphs", "64-bit integers")),
        slow=True),
    # -- issue 32, a user config tree Hydra would hang on, blow up on, or traceback on
    *_section(
        ("run workload=ff --config-dir {tree_fifo}", ("ff.yaml", "FIFO")),
        ("run workload=zero --config-dir {tree_zero}", ("zero.yaml", "character device")),
        ("run workload=d --config-dir {tree_dir}", ("d.yaml", "is a directory")),
        ("run workload=gone --config-dir {tree_dangling}", ("gone.yaml", "dangling link")),
        ("run workload=bomb --config-dir {tree_bomb}", ("bomb.yaml:2", "alias")),
        ("run workload=self --config-dir {tree_self}", ("self.yaml:2", "alias")),
        ("run workload=latin --config-dir {tree_latin1}", ("latin.yaml", "not a UTF-8")),
        ("run workload=big --config-dir {tree_big}", ("big.yaml", "byte limit")),
        ("run --megatron-args @{fifo_csv}", ("--megatron-args", "FIFO")),
        ("run --megatron-args @{latin_args}", ("--megatron-args", "latin_args.txt", "not a UTF-8")),
        ("grid workload=bomb --config-dir {tree_bomb}", ("bomb.yaml:2", "alias")),  # a file it reads: refused
        ("sweep seed=1,2 --config-dir {tree_fifo} --dry-run", ("ff.yaml", "FIFO")),
        slow=True),
    # -- issue 32, tracebacks: sizes, overflows and names checked before anything is built
    *_section(
        ("grid cg=vllm cg.capture_sizes=[9223372036854775807]", ("cg.capture_sizes[0]", "limit")),
        ("grid engine.max_tokens=9223372036854775807", ("engine.max_tokens", "limit")),
        ("run cg=vllm cg.piecewise_sizes=[4611686018427387904]", "cg.piecewise_sizes[0]"),
        ("schedule {repeat_state_json}", ("model.pattern_repeat", "10,000-layer limit")),
        ("run backend.cost_model=calibrated backend.calibration={mean_calib_json}", ("graphed[0].ms", "at most")),
        ("run backend.cost_model=calibrated backend.calibration={huge_calib_json}", ("graphed[0].ms", "1e+308")),
        ("run backend.cost_model=calibrated backend.calibration={ctx_calib_json}", "graphed[0].ctx"),
        ("compare {int_ovr_sweep} {int_ovr_sweep}", "points[0].overrides[0] must be a string"),
        ("run " + SMALL + " --out {empty_dir}/" + LONG_NAME + ".json", "file name too long"),
        ("compare {res_a_json} {res_b_json} --markdown {empty_dir}/" + LONG_NAME + ".md", "file name too long"),
        ("compare {res_a_json} {empty_dir}/" + LONG_NAME + ".json", "file name too long"),
        ("plot {res_a_json} --out {empty_dir}/" + LONG_NAME, "file name too long"),
        ("advise " + SMALL + " --budget-graphs 4 --out {empty_dir}/" + LONG_NAME, "file name too long"),
        slow=True),
    # -- issue 32, wrong exits; and what earlier rounds fixed, held here
    *_section(
        ("plot {params_str_sweep}", "points[0].params must be an object"),
        ("run workload=trace workload.trace={bad_json_trace} --out {empty_dir}/new/r.json", "bad.jsonl:2"),
        ("sweep seed=1,2 --jobs 0", ("--jobs", "0 is not in the range x>=1")),
        ("compare {res_a_json} {res_b_json} --format xml", ("--format", "'xml'")),
        ("sweep seed=1,2 hydra.output_subdir=x --dry-run", ("hydra.output_subdir", "not used by cgbench")),
        ("sweep --launcher basic seed=1,2 --dry-run", ("--launcher basic", "executors")),
        ("run " + SMALL + " --out {markup}/[b]r[/b].json --format yaml", "--format"),
        slow=True),
    # -- issue 44 classes 5 and 9: limits and non-finite arithmetic before the work
    *_section(
        ("run engine.ep_size=2000000000", ("engine.ep_size: 2,000,000,000 ranks", "1,024-rank limit")),
        ("run " + SMALL + " hardware.scan_efficiency=1e-300", ("hardware.scan_efficiency", "simulated range")),
        ("run " + SMALL + " engine.num_speculative_tokens=2 engine.spec_acceptance.lengths=[1e308,1e308,1]",
         "weights sum to inf"),
        slow=True),
    # -- real limits, real signals: a child process under an address-space limit
    *_section(
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules /dev/zero", "character device"),
        ("compare {ok_trace_jsonl} {ok_trace_jsonl} --rules {fifo_yaml}", "FIFO"),
        ("run workload=trace workload.trace={fifo_jsonl}", "FIFO"),
        ("run " + SMALL + " --out /proc/self/fd/1", "not a regular file"),
        ("run workload.num_requests=10000000", "workload.num_requests"),
        ("grid cg=sglang cg.padding=false engine.max_requests=100000000 engine.max_tokens=100000000", "graphs"),
        ("run workload=trace workload.trace={ok_trace_jsonl} workload.time_scale=inf", "workload.time_scale"),
        ("compare {deep_result_json} {deep_result_json}", "nested"),
        ("run workload=bomb --config-dir {tree_bomb}", ("bomb.yaml:2", "alias")),
        ("run workload=zero --config-dir {tree_zero}", ("zero.yaml", "character device")),
        ("schedule {repeat_state_json}", "model.pattern_repeat"),
        slow=True, child=True),
]


def _calibration(**point) -> dict:
    row = {"T": 64, "P": 1, "D": 0, "ctx": 0, "ms": 1.0}
    return {"schema": CALIBRATION_SCHEMA, "model": {"name": "m", "kind": "hybrid"}, "device": "cpu",
            "graphed": [{**row, **point}], "eager": [row]}


def result_doc(**keys) -> dict:
    return {"schema_version": 2, "metrics": {"throughput_tok_s": 1.0}, **keys}


def make_bad_files(d: Path) -> tuple[dict[str, Path], socket.socket]:
    """Write the corpus's files into ``d``, each bad in one way: {name: path} and the bound socket (the
    caller closes it). ``d`` should be a ``hostile_inputs/`` folder: the strict-JSON check of
    tests/conftest.py skips it, and some of these files are invalid JSON on purpose."""
    d.mkdir(parents=True, exist_ok=True)
    f: dict[str, Path] = {}

    def text(name: str, body: str, key: str | None = None) -> None:
        f[key or name.replace(".", "_").replace("-", "_")] = d / name
        (d / name).write_text(body)

    # -- plain broken files
    text("empty.jsonl", "", "empty_trace")
    text("bad.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3}\n{oops\n', "bad_json_trace")
    text("bad_value.jsonl", '{"arrival_s": 0, "prompt_tokens": "abc", "output_tokens": 3}\n', "bad_value_trace")
    text("neg.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,-4,3\n", "negative_trace")
    text("cols.csv", "arrival_s,prompt_tokens\n0,5\n", "missing_col_trace")
    text("not.json", "this is not json", "not_json")
    text("wrong.json", json.dumps({"hello": 1}), "wrong_schema")
    text("old.json", json.dumps({"schema_version": 99, "metrics": {}}), "old_schema")
    text("state.json", json.dumps({"model": {"kind": "hybrid"}, "engine": {}, "batch": {"decode": -1},
                                   "queue": []}), "bad_state")
    text("rules.yaml", "metrics: [1, 2\n", "bad_rules")
    text("a_file", "x")
    text("empty.log", "", "empty_log")
    text("malformed.log", "banner\n* rank 0 | step 1 | 00:00:00 ... time: 1.000 ms [decode + real config [1]: 0 P + 1 D"
                          " + cuda graph OFF] ... reqs: b 1/2\n", "malformed_log")
    text("bad_log_cal.json", json.dumps({"schema": "cgbench.log_calibration/1", "hardware": "h100",
                                         "model": {"name": "transformer", "kind": "transformer"},
                                         "fitted": {"hardware.bandwidth_efficiency": 1.5}}), "bad_log_calibration")
    f["empty_dir"] = d / "empty_dir"
    f["empty_dir"].mkdir()

    # -- special files
    for ext in ("jsonl", "json", "yaml", "csv"):
        os.mkfifo(d / f"pipe.{ext}")
        f[f"fifo_{ext}"] = d / f"pipe.{ext}"
    for ext in ("json", "jsonl"):
        (d / f"dir.{ext}").mkdir()
        f[f"dir_{ext}"] = d / f"dir.{ext}"
    f["zero_json"] = d / "zero.json"
    f["zero_json"].symlink_to("/dev/zero")
    f["zero_csv"] = d / "zero.csv"
    f["zero_csv"].symlink_to("/dev/zero")
    f["chardev"] = d / "chardev.json"
    if IS_ROOT:
        os.mknod(f["chardev"], stat.S_IFCHR | 0o666, os.makedev(1, 5))  # a private /dev/zero
    else:
        f["chardev"].symlink_to("/dev/zero")
    f["blockdev"] = d / "block.jsonl"
    if IS_ROOT:
        os.mknod(f["blockdev"], stat.S_IFBLK | 0o600, os.makedev(7, 0))  # a loop device node, never opened
    else:
        os.mkfifo(f["blockdev"])
    f["dev_link"] = d / "dev_link.json"  # never the system /dev/null: a broken writer would replace it
    f["dev_link"].symlink_to(f["chardev"])
    f["fifo_link"] = d / "fifo_link.json"
    f["fifo_link"].symlink_to(f["fifo_json"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    f["sock"] = d / "s.json"
    sock.bind(str(f["sock"]))
    f["big_jsonl"] = d / "big.jsonl"
    with open(f["big_jsonl"], "wb") as big:
        big.truncate(9 * 2**30)  # sparse: 9 GiB that take no disk (a trace streams: its limit is 8 GiB)

    # -- deep nesting, huge and non-finite numbers, oversized cells, YAML surprises
    text("deep.json", "[" * DEEP + "]" * DEEP)
    text("deep_result.json", '{"schema_version": 2, "metrics": {"x": ' + "[" * DEEP + "]" * DEEP + "}}")
    text("deep_state.json", '{"model": ' + "[" * DEEP + "]" * DEEP + "}")
    text("deep_rules.yaml", "rules: " + "[" * 20_000 + "]" * 20_000 + "\n")
    text("deep_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "x": '
         + "[" * DEEP + "]" * DEEP + "}\n")
    text("deep_calib.json", json.dumps(_calibration())[:-1] + ', "notes": ' + "[" * DEEP + "]" * DEEP + "}")
    big_int = "9" * 5000
    text("int_result.json", '{"schema_version": 2, "metrics": {"x": ' + big_int + "}}")
    text("int65_result.json", '{"schema_version": 2, "metrics": {"x": 36893488147419103232}}')
    text("int_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": ' + big_int + ', "output_tokens": 1}\n')
    text("int65_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": 36893488147419103232, "output_tokens": 1}\n')
    text("int_trace.csv", "arrival_s,prompt_tokens,output_tokens\n0," + big_int + ",1\n")
    text("int_rules.yaml", "rules:\n  throughput_tok_s: {better: higher, abs_tol: " + big_int + "}\n")
    text("int_calib.json", json.dumps(_calibration(T=2**70)))
    text("int_state.json", (ROOT / "tests/states/11_1_step1.json").read_text()
         .replace('"max_tokens": 16384', '"max_tokens": ' + big_int))
    state = json.loads((ROOT / "tests/states/11_1_step1.json").read_text())
    state["cg"].update(kind="sglang", padding=False, max_capture_size=10**9)
    text("big_grid_state.json", json.dumps(state))
    text("nan_result.json", '{"schema_version": 2, "metrics": {"x": NaN}}')
    text("inf_result.json", '{"schema_version": 2, "metrics": {"x": 1e400}}')
    text("inf_calib.json", json.dumps(_calibration())[:-1] + ', "tp_size": Infinity}')
    text("inf_rules.yaml", "rules:\n  throughput_tok_s: {better: higher, abs_tol: .inf}\n")
    text("late_trace.jsonl", '{"arrival_s": 1e308, "prompt_tokens": 5, "output_tokens": 1}\n')
    text("inf_trace.jsonl", '{"arrival_s": 1e400, "prompt_tokens": 5, "output_tokens": 1}\n')
    text("ok_trace.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n'
         '{"arrival_s": 1.5, "prompt_tokens": 7, "output_tokens": 2}\n')
    text("wide_trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,5," + "1" * 200_000 + "\n")
    text("long_line.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "pad": "'
         + "x" * (2 * 2**20) + '"}\n')
    text("dup_rules.yaml", "rules:\n  throughput_tok_s: {better: higher}\n  throughput_tok_s: {better: lower}\n")
    text("bomb_rules.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))
         + "rules: {}\n")

    # -- malformed result documents
    for name, doc in {
        "ovr_str": result_doc(overrides="model=hybrid"), "ovr_int": result_doc(overrides=[1, 2]),
        "config_list": result_doc(config=[1]), "env_int": result_doc(environment=5),
        "metrics_empty": {"schema_version": 2, "metrics": {}}, "config_model_str": result_doc(config={"model": "x"}),
        "steps_str": result_doc(steps="x"), "steps_bad": result_doc(steps=[{"step": 0}]),
        "usage_ints": result_doc(graph_usage=[1, 2]), "env_backend_list": result_doc(environment={"backend": [1]}),
    }.items():
        text(f"{name}.json", json.dumps(doc))

    # -- issue 32: inputs an output must not replace, failed and hand-edited sweeps, user config trees
    valid = next((ROOT / "results" / "baseline").glob("model-*.json")).read_text()  # a valid result
    text("res_a.json", valid)
    text("res_b.json", valid)
    f["trace_link_json"] = d / "trace_link.json"
    f["trace_link_json"].symlink_to(f["ok_trace_jsonl"])
    f["trace_hardlink_json"] = d / "trace_hardlink.json"
    os.link(f["ok_trace_jsonl"], f["trace_hardlink_json"])
    text("ok_calib.json", json.dumps(_calibration()))
    text("mean_calib.json", json.dumps({**_calibration(ms=1.7e308), "graphed": [{**_calibration()["graphed"][0],
                                                                                "ms": 1.7e308}] * 2}))
    text("huge_calib.json", json.dumps(_calibration(ms=1e308)))
    text("ctx_calib.json", json.dumps(_calibration(ctx=2**62)))
    f["advise_in"] = d / "advise_in"
    f["advise_in"].mkdir()
    for name in ("advise.json", "recommended_graphs.json"):
        (f["advise_in"] / name).write_text(f["ok_trace_jsonl"].read_text())
    (d / "latin_args.txt").write_bytes(b"--hidden-size caf\xe9\n")
    f["latin_args"] = d / "latin_args.txt"
    f["sweep_in"] = d / "sweep_in"
    f["sweep_in"].mkdir()
    (f["sweep_in"] / "summary.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,4,3\n")
    state = json.loads((ROOT / "tests/states/11_1_step1.json").read_text())
    state["model"]["pattern_repeat"] = 10**9
    text("repeat_state.json", json.dumps(state))
    for name, point in {"failed_sweep": {"status": "failed", "error": "boom"},
                        "int_ovr_sweep": {"status": "failed", "overrides": [5]},
                        "params_str_sweep": {"status": "done", "params": "seed=1"}}.items():
        f[name] = d / name
        f[name].mkdir()
        (f[name] / "p.json").write_text(json.dumps(result_doc(overrides=["seed=1"])))
        (f[name] / INDEX_NAME).write_text(json.dumps({
            "kind": INDEX_KIND, "schema_version": 2, "status": "failed", "cgbench_version": "0",
            "created_at": "2026-01-01T00:00:00Z", "name": name, "counts": {"done": 0, "failed": 1, "pending": 0},
            "points": [{"index": 0, "overrides": ["seed=1"], "file": "p.json", **point}]}))
    for key in ("tree_fifo", "tree_zero", "tree_dir", "tree_dangling", "tree_bomb", "tree_self", "tree_latin1",
                "tree_big"):
        f[key] = d / key
        (f[key] / "workload").mkdir(parents=True)
    os.mkfifo(f["tree_fifo"] / "workload" / "ff.yaml")
    (f["tree_zero"] / "workload" / "zero.yaml").symlink_to("/dev/zero")
    (f["tree_dir"] / "workload" / "d.yaml").mkdir()
    (f["tree_dangling"] / "workload" / "gone.yaml").symlink_to(d / "no_such_file")
    (f["tree_bomb"] / "workload" / "bomb.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9)))
    (f["tree_self"] / "workload" / "self.yaml").write_text("a: &a\n  b: *a\n")
    (f["tree_latin1"] / "workload" / "latin.yaml").write_bytes(b"name: caf\xe9\n")
    with open(f["tree_big"] / "workload" / "big.yaml", "wb") as big:
        big.truncate(2 * 2**20)

    # -- issue 44: a gzip'd trace of blank lines (past the default line bound), a deep file, a cycle
    f["blank_gz"] = d / "blank.jsonl.gz"
    f["blank_gz"].write_bytes(gzip.compress(b"\n" * 3_000_000))
    f["tree_deep"] = d / "tree_deep"
    (f["tree_deep"] / "workload").mkdir(parents=True)
    (f["tree_deep"] / "workload" / "deep.yaml").write_text("[" * 20_000 + "]" * 20_000 + "\n")
    f["tree_cycle"] = d / "tree_cycle"
    (f["tree_cycle"] / "model").mkdir(parents=True)
    (f["tree_cycle"] / "model" / "loop.yaml").write_text("defaults:\n  - loop\n  - _self_\n")

    # -- a config folder's plugins.yaml (Hydra _target_ plug-ins), each bad in one way
    for key, body in PLUGIN_FILES.items():
        f[key] = d / key
        f[key].mkdir()
        (f[key] / "plugins.yaml").write_text(body)

    # -- markup in paths
    f["markup"] = d
    (d / "m[").write_text("a file, so m[/]... has no folder")
    return f, sock


def files_under(*folders: Path) -> set[Path]:
    """Every file and link under the folders: what a refused command must leave unchanged."""
    return {p for d in folders if d.exists() for p in d.rglob("*") if p.is_file() or p.is_symlink()}


def folders_under(*folders: Path) -> set[Path]:
    """Every folder under the folders: a refused command creates none (output folders are made only
    when a file is written into them)."""
    return {p for d in folders if d.exists() for p in d.rglob("*") if p.is_dir() and not p.is_symlink()}


def invoke_bounded(runner, app, argv: list[str], seconds: int = TIME_LIMIT_S):
    """``runner.invoke(app, argv)`` under an alarm (a hang fails the case) and a peak-RSS growth bound
    (``RSS_GROWTH_LIMIT_KB``): the Click result."""
    import resource
    import signal

    def alarm(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        r = runner.invoke(app, argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not isinstance(r.exception, TimeoutError), f"hung: {argv}"
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown < RSS_GROWTH_LIMIT_KB, f"peak RSS grew {grown} kB: {argv}"
    return r


def run_in_child(argv: list[str], *, cwd: Path, timeout: float = TIME_LIMIT_S, fsize: int | None = None,
                 address_space: int = CHILD_ADDRESS_SPACE) -> subprocess.CompletedProcess:
    """The CLI in a child process with an address-space limit (a blow-up dies, not the machine)."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "CGBENCH_CONFIG_DIR": str(ROOT / "conf"), "OPENBLAS_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", "from cgbench.cli.app import main; main()", *argv],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limits, stdin=subprocess.DEVNULL)
