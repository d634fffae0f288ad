#!/usr/bin/env bash
# Shared start of gpu-all.sh and gpu-kernels.sh, on the lent GPU machine: $OUT
# (default ./out) for the logs, the carried .deps unpacked (gpu-setup.sh), nvcc
# on PATH, the GPU's name in $OUT/gpu.txt, and build-gpu configured for Hopper.
# Source it from the repo root:  . scripts/gpu-build-prologue.sh
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 \
  || { tail -30 "$OUT/cmake.log"; exit 1; }
