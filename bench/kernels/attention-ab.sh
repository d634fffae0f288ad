#!/usr/bin/env bash
# On the lent GPU machine: attention v2 vs v1 (src/kernels/cuda/attention.cu). Builds like
# scripts/gpu-kernels.sh, runs the attention tests with v2 (default) and with VRAM_ATTN_V1=1, then the
# kernel bench v2, v1, v2 (the repeat shows the noise) and prints the attention lines last.
#   bash bench/kernels/attention-ab.sh        # logs in $OUT (default ./out)
set -u -o pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu-build-prologue.sh
cmake --build build-gpu -j16 --target test_kernels_cuda > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
objs=$(find build-gpu/CMakeFiles/vram_util.dir build-gpu/CMakeFiles/vram_kcuda.dir -name '*.o')
cc -O2 -std=c11 -Wall -Wextra -Iinclude -Isrc -I/usr/local/cuda/include bench/kernels/bench_kernels_cuda.c \
   $objs -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -lm -lpthread \
   -o build-gpu/bench_kernels_cuda > "$OUT/bench_build.log" 2>&1 || { cat "$OUT/bench_build.log"; exit 1; }
echo "== build ok"
rc=0
VRAM_KCUDA_TEST=test_attention ./build-gpu/test_kernels_cuda > "$OUT/test_attention_v2.log" 2>&1 || rc=1
echo "== test_attention v2 rc=$rc"; grep -E "attention|FAIL|PASS|rel err.*>" "$OUT/test_attention_v2.log" | tail -45
rc1=0
VRAM_ATTN_V1=1 VRAM_KCUDA_TEST=test_attention ./build-gpu/test_kernels_cuda > "$OUT/test_attention_v1.log" 2>&1 || rc1=1
echo "== test_attention v1 rc=$rc1"; grep -E "FAIL|PASSED|FAILED" "$OUT/test_attention_v1.log" | tail -5
./build-gpu/bench_kernels_cuda > "$OUT/bench_v2.log" 2>&1 || rc=1
VRAM_ATTN_V1=1 ./build-gpu/bench_kernels_cuda > "$OUT/bench_v1.log" 2>&1 || rc=1
./build-gpu/bench_kernels_cuda > "$OUT/bench_v2b.log" 2>&1 || rc=1
for f in bench_v1 bench_v2 bench_v2b; do echo "== $f"; grep -E "attention|sum over" "$OUT/$f.log"; done
exit $((rc | rc1))
