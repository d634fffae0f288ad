#!/usr/bin/env bash
# Data parallel on the GPUs of one host (issue #11's checks), from the repo root on the GPU machine:
#   bash bench/dist/check.sh [VRAM]      (VRAM: a vram built for sm_90, default build-carry/vram)
# GPT-2 124M, bf16, AdamW, clip 1.0, constant lr: a plain run; --gpus 1 with ZeRO 0/1/2/3 (an NCCL world of one:
# losses equal to the plain run's); --gpus N (all GPUs) with ZeRO 0/1/2/3 at B=16 per GPU (tokens/s, memory per GPU
# by nvidia-smi every 50 ms above the idle baseline, plan vs allocated per rank); N GPUs at B=16/N vs one GPU at
# B=16 (the same global batch: the losses agree as bf16 allows; CURVE_STEPS of them, plotted by loss_plot.py into
# $OUT/loss-curves.svg). Outputs under $OUT.
set -uo pipefail
V=${1:-build-carry/vram}
. "$(dirname "$0")/mon.sh" # $out, $n, multicast off; mon NAME CMD..., losses FILE
f="--device cuda --preset gpt2 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --lr-schedule constant --warmup 0"
"$V" info >"$out/info.txt" 2>&1
mon plain "$V" train $f --batch 16 --steps ${CURVE_STEPS:-20}
for z in ${ZEROS:-0 1 2 3}; do mon g1z$z "$V" train $f --batch 16 --steps 20 --gpus 1 --zero $z; done
echo "losses plain: $(losses "$out/plain.txt")"
for z in ${ZEROS:-0 1 2 3}; do echo "losses g1z$z: $(losses "$out/g1z$z.txt")"; done
if [ "$n" -gt 1 ]; then
  for z in ${ZEROS:-0 1 2 3}; do mon g${n}z$z "$V" train $f --batch 16 --steps 30 --gpus "$n" --zero $z; done
  mon g${n}same "$V" train $f --batch $((16 / n)) --steps ${CURVE_STEPS:-20} --gpus "$n"
  echo "losses plain (B=16, 1 GPU):   $(losses "$out/plain.txt")"
  echo "losses $n GPUs (B=$((16 / n)) each):   $(losses "$out/g${n}same.txt")"
  mon g${n}samez3 "$V" train $f --batch $((16 / n)) --steps ${CURVE_STEPS:-20} --gpus "$n" --zero 3 --save "$out/z3.bin"
  python3 "$(dirname "$0")/loss_plot.py" "$out/loss-curves.svg" "1 GPU, B=16=$out/plain.txt" \
    "$n GPUs, B=$((16 / n)) each=$out/g${n}same.txt" "$n GPUs ZeRO 3=$out/g${n}samez3.txt"
  echo "losses $n GPUs ZeRO 3 (B=$((16 / n)) each):   $(losses "$out/g${n}samez3.txt")"
  "$V" plan --preset gpt2 --batch 16 --precision bf16 --clip 1.0 --device cuda --gpus "$n" --zero 2 >"$out/plan${n}z2.txt" 2>&1
fi
