# Nemotron-H-8B on one 8-GPU node: TP 8, the dynamic engine, CUDA graphs, chunked prefill.
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 8 \
  examples/inference/gpt/gpt_dynamic_inference.py \
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 1 \
  --is-hybrid-model \
  --hybrid-override-pattern "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" \
  --num-layers 52 --hidden-size 4096 --ffn-hidden-size 21504 \
  --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 \
  --mamba-state-dim 128 --mamba-head-dim 64 --mamba-num-groups 8 --mamba-num-heads 128 \
  --squared-relu --position-embedding-type none --max-position-embeddings 8192 --seq-length 8192 \
  --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights \
  --tokenizer-type TikTokenizer --tokenizer-model /models/nemotron-h-8b/tokenizer.json \
  --padded-vocab-size 131072 --bf16 \
  --load /models/nemotron-h-8b --micro-batch-size 1 --seed 42 --log-interval 1 \
  --inference-dynamic-batching \
  --inference-dynamic-batching-buffer-size-gb 20 \
  --inference-dynamic-batching-block-size 256 \
  --inference-dynamic-batching-max-requests 256 \
  --inference-dynamic-batching-max-tokens 8192 \
  --inference-max-seq-length 8192 \
  --cuda-graph-impl local \
  --inference-dynamic-batching-num-cuda-graphs 16 \
  --inference-dynamic-batching-cuda-graph-mixed-prefill-count 16 \
  --enable-chunked-prefill
