#!/bin/sh
# CPU kernels against PyTorch, same machine, same run, same thread count.
# Usage: bench/kcpu/run.sh BUILD_DIR [B T REPS THREADS]
# BUILD_DIR is a CMake build of this repository (the vram_kcpu objects are linked from it).
# Prints per op: vram ms, torch ms, and torch/vram (> 1: vram faster).
# PYTHON picks the interpreter with torch (default /usr/bin/python3). The thread-pool settings in
# the environment (OPENBLAS_THREAD_TIMEOUT, GOMP_SPINCOUNT, OMP_WAIT_POLICY) apply to both sides;
# see "Threads" in src/kernels/cpu/kernels_cpu.h.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$1
B=${2:-4} T=${3:-1024} REPS=${4:-3} THREADS=${5:-$(nproc)}
py=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c11 -fopenmp -I"$src/src" -I"$src/include" "$here/bench_kcpu.c" \
   "$build"/CMakeFiles/vram_kcpu.dir/src/kernels/cpu/*.o -lopenblas -lm -o "$tmp/bench_kcpu"
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
echo "# B=$B T=$T C=768 NH=12 V=50257, threads=$THREADS, best of $REPS; $(uname -m), $(nproc) cpus"
echo "# torch $("$py" -c 'import torch; print(torch.__version__)')"
echo "# OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
"$tmp/bench_kcpu" "$B" "$T" "$REPS" > "$tmp/vram.txt"
"$py" - "$B" "$T" "$REPS" "$THREADS" > "$tmp/torch.txt" <<PYEOF
import runpy, sys, torch
torch.set_num_threads(int(sys.argv[4]))
sys.argv = ["bench_torch.py"] + sys.argv[1:4]
runpy.run_path("$here/bench_torch.py", run_name="__main__")
PYEOF
printf "%-20s %12s %12s %10s\n" op vram_ms torch_ms torch/vram
awk 'NR == FNR { t[$1] = $2; next }
     { if ($1 in t) printf "%-20s %12.2f %12.2f %10.2f\n", $1, $2, t[$1], t[$1] / $2;
       else printf "%-20s %12.2f %12s %10s\n", $1, $2, "-", "-" }' "$tmp/torch.txt" "$tmp/vram.txt"
