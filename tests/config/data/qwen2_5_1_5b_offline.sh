# Megatron-LM's offline-inference example for Qwen2.5-1.5B (examples/inference/run_offline_inference.sh,
# core_r0.19.0), with the coordinator and async switches its options add and a checkpoint path filled in.
torchrun --nproc-per-node 8 \
    -m examples.inference.offline_inference --use-coordinator --async-mode \
    --load /checkpoints/qwen2.5-1.5b \
    --bf16 \
    --tensor-model-parallel-size 1 \
    --micro-batch-size 64 \
    --dist-ckpt-strictness log_unexpected \
    --inference-rng-tracker \
    --cuda-graph-impl local \
    --decode-only-cuda-graphs \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model Qwen/Qwen2.5-1.5B \
    --no-use-tokenizer-model-from-checkpoint-args \
    --num-layers 28 \
    --hidden-size 1536 \
    --num-attention-heads 12 \
    --max-position-embeddings 32768 \
    --num-query-groups 2 \
    --group-query-attention \
    --swiglu \
    --normalization RMSNorm \
    --disable-bias-linear \
    --position-embedding-type rope \
    --rotary-percent 1.0 \
    --rotary-base 1000000 \
    --seq-length 32768 \
    --ffn-hidden-size 8960
