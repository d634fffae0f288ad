#!/usr/bin/env bash
# Where a GPT-2 124M training step's GPU time goes, vram against torch.compile, in ONE command on the
# GPU machine (repo root, .deps carried):
#     bash bench/gpu/profile.sh          # logs in $OUT (default ./out/gpu-profile)
# vram: VRAM_PROFILE=1 (an event per node, src/exec/cuda_prof.h), B=16 T=1024 bf16 AdamW clip 1.0;
# torch: torch_gpt2.py --profile (torch.profiler, kernels' self GPU time). Both print ms per step.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/out/gpu-profile}; mkdir -p "$OUT"
STEPS=${STEPS:-12}
. bench/gpu/lib.sh
gpu_bin vram
echo "== vram (VRAM_PROFILE=1), $STEPS steps"
VRAM_PROFILE=1 timeout 120 $BIN/vram train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 \
  --warmup 0 --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json \
  > "$OUT/vram_profile.jsonl" 2> "$OUT/vram_profile.err"
echo "rc $?"; sed -n '/vram profile/,$p' "$OUT/vram_profile.err"
if [ -z "${SKIP_TORCH:-}" ]; then
  echo "== torch.compile (torch.profiler)"
  timeout 300 python3 bench/gpu/torch_gpt2.py --mode compile --steps 8 --profile 5 > "$OUT/torch_profile.json" \
    2> "$OUT/torch_profile.err"
  echo "rc $?"; sed -n '/torch profile/,$p' "$OUT/torch_profile.err"
fi
