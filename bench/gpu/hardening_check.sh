#!/usr/bin/env bash
# GPU checks of the hardening work (planned kernel scratch, device selection, CUDA-graph state), from the repo
# root on a GPU machine with build-carry/ holding vram, test_kernels_cuda and test_exec_cuda built for sm_90:
#   bash bench/gpu/hardening_check.sh
# Prints one line per check; outputs under $OUT.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
V=build-carry/vram
export NCCL_NVLS_ENABLE=0
ok() { echo "$1: rc $2 $(grep -o '[0-9]* tokens/s' "$out/$1.txt" | tail -1) $(grep -E 'cuda graph|rror|DIFFERS' "$out/$1.txt" | head -2 | tr '\n' ' ')"; }
t() { local name=$1; shift; timeout 120 "$@" >"$out/$name.txt" 2>&1; ok "$name" $?; }
t kernels build-carry/test_kernels_cuda
VRAM_ATTN_V1=bwd timeout 120 build-carry/test_kernels_cuda >"$out/kernels_v1.txt" 2>&1; ok kernels_v1 $?
t exec build-carry/test_exec_cuda
g="--device cuda --preset gpt2 --seq 1024 --clip 1.0 --steps 12"
t gpt2_bf16 $V train $g --batch 16 --precision bf16
t gpt2_fp32 $V train $g --batch 16 --precision fp32
t gpt2_b64 $V train $g --batch 64 --precision bf16 --recompute block
t gpt2_freeze_ln $V train $g --batch 16 --precision bf16 --freeze 'h.*.ln_1.w'
t graph_on $V train $g --batch 16 --precision bf16 --cuda-graph on
t graph_accum $V train $g --batch 8 --accum 2 --precision bf16 --cuda-graph on
t llama1b $V train --device cuda --model llama --preset llama3.2-1b --precision bf16 --batch 4 --seq 2048 --steps 6
n=$(nvidia-smi -L | wc -l)
[ "$n" -gt 1 ] && t gpus2_z3 $V train $g --batch 16 --precision bf16 --gpus 2 --zero 3
for f in gpt2_bf16 gpt2_fp32; do grep -E "^peak|^device +arena" "$out/$f.txt" | head -2; done
tail -3 "$out/kernels.txt"
