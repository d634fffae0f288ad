#!/usr/bin/env bash
# One GPU command after a kernel change: build (Release, sm_90), the CUDA kernel and exec tests, then
# bench/gpu/profile.sh (SKIP_TORCH=1 unless TORCH=1). Repo root, .deps carried.
#     bash bench/gpu/check-profile.sh      # logs in $OUT (default ./out/gpu-check)
set -u -o pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/out/gpu-check}; mkdir -p "$OUT"
. scripts/gpu-build-prologue.sh
cmake --build build-gpu -j16 > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
rc=0
for t in ${TESTS:-test_kernels_cuda test_kernels_cuda_mt test_exec_cuda}; do
  timeout 300 ./build-gpu/$t > "$OUT/$t.log" 2>&1; r=$?; [ $r -ne 0 ] && rc=1
  echo "== $t rc=$r"; grep -E "FAILED|PASSED|\[  FAILED|rel err|differ" "$OUT/$t.log" | tail -8
done
[ -n "${TORCH:-}" ] || export SKIP_TORCH=1
BIN=build-gpu bash bench/gpu/profile.sh
exit $rc
