# A gpt_dynamic_inference.py line with the arguments Megatron's inference scripts add (sampling,
# prompts, arrivals, output: megatron/inference/utils.py add_inference_args), as Megatron-LM's own
# dynamic-inference tests launch its 583M GPT (core_r0.19.0), paths filled in.
python examples/inference/advanced/gpt_dynamic_inference.py \
  --tiktoken-pattern v2 --use-mcore-models --tokenizer-type TikTokenizer \
  --tokenizer-model /models/583m/vocab.json --auto-detect-ckpt-format --max-tokens-to-oom 3600000 \
  --inference-max-seq-length 4096 --attention-backend flash --use-checkpoint-args --micro-batch-size 1 \
  --no-load-optim --load /models/583m --distributed-backend nccl --log-interval 1 \
  --transformer-impl transformer_engine --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --deterministic-mode --ckpt-format torch_dist --bf16 \
  --num-layers 24 --hidden-size 1152 --num-attention-heads 16 --max-position-embeddings 1024 --seq-length 1024 \
  --temperature 1.0 --top_k 1 --return-log-probs --num-tokens-to-generate 30 \
  --enable-cuda-graph --inference-dynamic-batching-buffer-size-gb 20 \
  --inference-dynamic-batching-max-tokens 64 --inference-dynamic-batching-max-requests 64 \
  --enable-chunked-prefill --dist-ckpt-strictness log_unexpected --inference-ckpt-non-strict \
  --output-path /tmp/out.json --prompts "Time travel to 2008." --incoming-requests-per-sec -1 \
  --inference-repeat-n 8 --inference-logging-step-interval 1
