"""The default host cost of an eager step's op and its source: constants only, so that the CLI's help
text quotes them without importing the host profiles (and the schema they read)."""

# Megatron's eager path issues every op of its layers through PyTorch (Transformer Engine modules,
# Python per layer): the counts are the aten ops of cgbench's own unfused torch model (MLP 18, per
# step 34, counted by `cgbench calibrate --host`), with a fused attention kernel and fused scan
# kernels. The µs per op is DEFAULT_HOST_OP_SOURCE's (one statement, used by the docs and the run
# header); its range, HOST_OP_RANGE_US, is what `--sensitivity` varies.
DEFAULT_HOST_OP_US = 4.05
DEFAULT_HOST_OP_SOURCE = (
    "`cgbench calibrate --host model=tiny_transformer` on a 2-core AMD EPYC VM at a quiet moment (4.0-4.1 "
    "µs); on the same, shared VM 12 runs gave 5.1 / 6.6 / 34 µs (min / median / max). A DGX H100's Xeon "
    "Platinum 8480C is about as fast: a torch Linear costs 13.5 µs of CPU with its CUDA launch (Transformer "
    "Engine issue 2053), 2-4 aten ops after the 2.5 µs launch, 2.7-5.5 µs each; a Grace CPU (GH200) "
    "takes 33 µs, up to 15 µs per op. Megatron publishes no eager step time to check the product of op "
    "counts and µs per op against: measure yours with `cgbench calibrate --host` or `cgbench calibrate "
    "--megatron-log`")
HOST_OP_RANGE_US = (2.7, 15.0)  # the fastest x86 server core estimate .. a Grace CPU (DEFAULT_HOST_OP_SOURCE)
DEFAULT_HOST_OP_SUMMARY = (
    f"{DEFAULT_HOST_OP_US:g} us is calibrate --host on a 2-core AMD EPYC VM (5.1-34 us over 12 runs on the "
    "shared VM), about a DGX H100 Xeon's (2.7-5.5 us per aten op: Transformer Engine issue 2053); a Grace CPU "
    "takes up to 15 us. Megatron publishes no eager step time to check it: calibrate --host / --megatron-log")
