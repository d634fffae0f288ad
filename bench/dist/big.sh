#!/usr/bin/env bash
# The largest GPT that vram's ZeRO-3 trains on the GPUs of one host, from the repo root on the GPU machine:
#   bash bench/dist/big.sh [VRAM] [N]     (VRAM: default build-carry/vram; N: GPUs, default all)
# For each shape in SHAPES ("L:C:NH" list; default the 6.7B GPT-3 shape with heads of 64: 32:4096:64), bf16
# weights with an fp32 master and AdamW state, GPT-2 vocabulary (50257), B=1 per GPU (BATCH), T=2048 (SEQ), recompute block, clip 1.0:
# `vram plan --gpus N --zero 3` (every rank's bytes), then `vram train --gpus N --zero 3` for STEPS (8) steps
# under nvidia-smi sampling (every 50 ms, peak per GPU above the idle baseline); prints tokens/s, MFU (6N +
# 6LCT flops per token over 989 TFLOP/s per GPU; both from the median step after the first), the plan's arena and rank 0's allocated arena, and the
# peaks. EXTRA: more flags for plan and train (e.g. "--optim-state 8bit"); LIMIT: seconds per run (480). Outputs under $OUT: big-<shape>.plan.txt, .train.txt, .smi.
set -uo pipefail
V=${1:-build-carry/vram}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
n=${2:-$(nvidia-smi -L | wc -l)}
B=${BATCH:-1} T=${SEQ:-2048} STEPS=${STEPS:-8}
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >"$out/big-idle.csv"
for shape in ${SHAPES:-32:4096:64}; do
  IFS=: read -r L C H <<<"$shape"
  tag=big-L${L}C${C}
  f=(--device cuda --layers "$L" --channels "$C" --heads "$H" --vocab 50257 --batch "$B" --seq "$T" --precision bf16 --optim adamw
     --recompute block --clip 1.0 --gpus "$n" --zero 3 ${EXTRA:-})
  "$V" plan "${f[@]}" >"$out/$tag.plan.txt" 2>&1
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 50 >"$out/$tag.smi" &
  mon=$!
  t0=$(date +%s)
  timeout "${LIMIT:-480}" "$V" train "${f[@]}" --lr 1e-4 --warmup 0 --lr-schedule constant --eval-every -1 --steps "$STEPS" \
    >"$out/$tag.train.txt" 2>&1
  rc=$? secs=$(($(date +%s) - t0))
  kill $mon; wait $mon 2>/dev/null
  params=$(grep -o '[0-9]* params' "$out/$tag.plan.txt" | head -1 | cut -d' ' -f1)
  # the median step after the first (which builds cuDNN's plans and NCCL's rings), tokens/s from it
  ms=$(grep -E '^step [0-9]+/' "$out/$tag.train.txt" | tail -n +2 | grep -o '| [0-9.]* ms |' | tr -d '|ms ' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  tps=$(awk -v ms="${ms:-0}" -v n="$n" -v B="$B" -v T="$T" 'BEGIN { if (ms > 0) printf "%.0f", n * B * T * 1000 / ms }')
  peaks=$(awk -F', ' 'NR==FNR { idle[$1] = $2; next } { d = $2 - idle[$1]; if (d > m[$1]) m[$1] = d }
    END { for (g in m) printf "gpu%s %.2f GiB  ", g, m[g] / 1024 }' "$out/big-idle.csv" "$out/$tag.smi")
  mfu=$(awk -v p="${params:-0}" -v L="$L" -v C="$C" -v T="$T" -v t="${tps:-0}" -v n="$n" \
    'BEGIN { printf "%.1f", 100 * t * (6 * p + 6 * L * C * T) / (n * 989e12) }')
  echo "$tag ($params params) on $n GPUs, ZeRO 3 ${EXTRA:-}, B=$B/GPU T=$T: rc $rc ($secs s), ${ms:-?} ms/step, ${tps:-?} tokens/s," \
    "MFU ${mfu}%; peak above idle: $peaks"
  grep -E "^rank|^[0-9]+ +[0-9.]+ [GMK]iB" "$out/$tag.plan.txt" | head -$((n + 1))
  grep -E "^arena|^device|allocated|rror" "$out/$tag.train.txt" | head -6
done
