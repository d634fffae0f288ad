#!/usr/bin/env bash
# On the lent GPU machine: build vram for Hopper, run the CUDA kernel tests (against the CPU kernels)
# and the per-kernel profile at GPT-2 124M shapes. Logs go to $OUT (default ./out).
#   bash scripts/gpu-kernels.sh            # build + test + bench
#   SKIP_BENCH=1 bash scripts/gpu-kernels.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-build-prologue.sh
cmake --build build-gpu -j16 --target test_kernels_cuda > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
echo "== build ok"
rc=0
./build-gpu/test_kernels_cuda 2>&1 | tee "$OUT/test_kernels_cuda.log" || rc=1
echo "== test_kernels_cuda rc=$rc"
if [ -z "${SKIP_BENCH:-}" ]; then
  # linked with the util and kcuda objects only, so other layers' state does not matter here
  objs=$(find build-gpu/CMakeFiles/vram_util.dir build-gpu/CMakeFiles/vram_kcuda.dir -name '*.o')
  cc -O2 -std=c11 -Wall -Wextra -Iinclude -Isrc -I/usr/local/cuda/include bench/kernels/bench_kernels_cuda.c \
     $objs -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -lm -lpthread \
     -o build-gpu/bench_kernels_cuda 2>&1 | tee "$OUT/bench_build.log"
  ./build-gpu/bench_kernels_cuda 2>&1 | tee "$OUT/bench_kernels_cuda.log" || rc=1
fi
exit $rc
