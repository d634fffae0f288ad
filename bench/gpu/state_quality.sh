#!/usr/bin/env bash
# Training quality of the optimizer-state formats at GPT-2 124M's size on the GPU (MODEL, LR for another size): fp32, bf16 and 8-bit AdamW
# state, bf16 weights with the split master, same init and batches; a second fp32 run from another seed gives
# the run-to-run spread the formats' differences are read against. Byte-level (vocab 256) on the Python
# sources installed beside PyTorch (the GPU machine has no other large text), capped at CORPUS_MB.
#     bash bench/gpu/state_quality.sh        # VRAM=build-carry/vram STEPS=2000 EVAL=200 OUT=$OUT/quality
set -euo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-out/state-quality}; mkdir -p "$OUT"
CORPUS_MB=${CORPUS_MB:-64}
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
{ find "$site" -name '*.py' -size +1k | LC_ALL=C sort | xargs cat | head -c $((CORPUS_MB << 20)) > "$OUT/python.txt"; } || true
echo "corpus: $(wc -c < "$OUT/python.txt") bytes of .py files under $site"
export CORPUS="$OUT/python.txt" DEVICE=cuda STEPS=${STEPS:-2000} EVAL=${EVAL:-200} LR=${LR:-6e-4}
export MODEL=${MODEL:-"--preset gpt2 --vocab 256 --padded-vocab 256 --seq 1024 --batch 16"}
export EXTRA="--precision bf16 --warmup 100 ${EXTRA:-}"
export RUNS=${RUNS:-"fp32:--optim-state=fp32 bf16:--optim-state=bf16 8bit:--optim-state=8bit fp32-seed2:--optim-state=fp32,--seed=2024"}
bash bench/states/quality.sh
