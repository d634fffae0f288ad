# shellcheck shell=bash
# Sourced by bench/gpu's scripts from the repository root on the GPU machine: the carried packages and CUDA's tools
# on PATH, and gpu_bin NAME... (binaries: vram, test_exec_cuda, ...), which sets BIN to a folder holding them all:
# $BIN when given and complete, else build-gpu (Release, sm_90), built for the missing ones (logs in $OUT).
[ -d .deps ] && . scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH
gpu_bin() {
  BIN=${BIN:-build-gpu}
  local n targets=() missing=0
  for n in "$@"; do
    [ -x "$BIN/$n" ] || missing=1
    [ "$n" = vram ] && targets+=(vram_cli) || targets+=("$n")
  done
  [ $missing = 0 ] && return 0
  BIN=build-gpu
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON > "$OUT/cmake.log" 2>&1
  cmake --build build-gpu -j16 --target "${targets[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
}
