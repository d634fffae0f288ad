#!/usr/bin/env bash
# Offload with ranks on the GPUs of one host (issue #11), from the repo root on the GPU machine:
#   bash bench/dist/offload.sh [VRAM]      (VRAM: a vram built for sm_90, default build-carry/vram)
# GPT-2 124M, bf16, AdamW, clip 1.0: one GPU at B=16 with --offload optim, then 2 GPUs at B=8 each with
# --offload optim and ZeRO 0/1/2/3 (each rank's share of master and state in pinned host memory): the losses of
# the same global batch agree as bf16 allows; plan = allocated on every rank. Then GPT-2 XL at B=8 per GPU under
# ZeRO 2 with and without --offload optim: tokens/s and memory per GPU. Outputs under $OUT.
set -uo pipefail
V=${1:-build-carry/vram}
. "$(dirname "$0")/mon.sh" # $out, $n, multicast off; mon NAME CMD..., losses FILE
f="--device cuda --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --lr-schedule constant --warmup 0"
mon off1 "$V" train $f --preset gpt2 --batch 16 --steps 20 --offload optim
for z in ${ZEROS:-0 1 2 3}; do
  mon off${n}z$z "$V" train $f --preset gpt2 --batch $((16 / n)) --steps 20 --gpus "$n" --zero $z --offload optim
done
echo "losses 1 GPU offloaded: $(losses "$out/off1.txt")"
for z in ${ZEROS:-0 1 2 3}; do
  echo "losses $n GPUs z$z offloaded: $(losses "$out/off${n}z$z.txt")"
  grep -E "^(device|host) +arena" "$out/off${n}z$z.txt" | head -2
done
if [ "$n" -gt 1 ]; then
  for o in none optim; do
    mon xl${n}z2$o "$V" train $f --preset gpt2-xl --batch 8 --steps 12 --gpus "$n" --zero 2 --offload $o
  done
  "$V" plan --preset gpt2-xl --batch 8 --precision bf16 --clip 1.0 --device cuda --gpus "$n" --zero 2 --offload optim \
    >"$out/planxl.txt" 2>&1
  tail -12 "$out/planxl.txt"
fi
