#!/usr/bin/env bash
# On the lent GPU machine: build everything for Hopper with CMake and run the
# whole test suite there (CUDA tests included), then `vram info`. Logs in $OUT.
# Run from the repo root with .deps carried:  bash scripts/gpu-all.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-build-prologue.sh
cmake --build build-gpu -j16 > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
echo "== build ok"
./build-gpu/vram info | tee "$OUT/info.txt"
(cd build-gpu && ctest --output-on-failure -j4 ${CTEST_ARGS:-} 2>&1) | tee "$OUT/ctest.log" | tail -40
./build-gpu/test_alloc_cuda 2>&1 | tee "$OUT/test_alloc_cuda.log" | grep -E "reserved|on cuda|PASSED|FAILED|OK|FAIL" 
