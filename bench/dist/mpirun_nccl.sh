#!/usr/bin/env bash
# NCCL under mpirun (issue #11): the same command as `--gpus N`, launched by mpirun instead (rank 0's NCCL id
# broadcast over MPI; each rank on the GPU of its local rank). Each launch twice (run-to-run repeatability) and
# the two launches against each other, fp32 (reductions then differ only in their order) and bf16.
#   bash bench/dist/mpirun_nccl.sh [VRAM]      (a vram built with MPI and CUDA for sm_90; default build-carry/vram)
set -uo pipefail
V=${1:-build-carry/vram}
. "$(dirname "$0")/mon.sh" # $out, $n, multicast off; mon NAME CMD..., losses FILE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=8
"$V" info | grep -E "^dist" || true
# --json: mpirun gives its ranks a terminal, where a human run would draw a progress bar
cmp_losses() { python3 - "$1" "$2" "$3" <<'PY'
import sys
a = [float(x) for x in sys.argv[2].split()]; b = [float(x) for x in sys.argv[3].split()]
if not a or len(a) != len(b):
    print(sys.argv[1], ": no losses to compare", len(a), len(b)); sys.exit(0)
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("%-40s %s (largest relative difference %.2e over %d steps)" % (sys.argv[1], "identical" if d == 0 else "differ", d, len(a)))
PY
}
for prec in fp32 bf16; do
  f="--device cuda --preset gpt2 --seq 1024 --batch 8 --precision $prec --clip 1.0 --lr 6e-4 --lr-schedule constant"
  f="$f --warmup 0 --attention vram --eval-every -1 --steps 10 --zero 1 --json"
  for r in 1 2; do
    timeout 120 "$V" train $f --gpus "$n" >"$out/g$prec$r.txt" 2>&1
    timeout 120 mpirun -np "$n" --bind-to none -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS "$V" train $f >"$out/m$prec$r.txt" 2>&1
  done
  cmp_losses "$prec --gpus $n, twice" "$(jl "$out/g${prec}1.txt")" "$(jl "$out/g${prec}2.txt")"
  cmp_losses "$prec mpirun -np $n, twice" "$(jl "$out/m${prec}1.txt")" "$(jl "$out/m${prec}2.txt")"
  cmp_losses "$prec --gpus $n vs mpirun -np $n" "$(jl "$out/g${prec}1.txt")" "$(jl "$out/m${prec}1.txt")"
  grep -o '"tokens_per_s":[0-9.]*' "$out/g${prec}1.txt" "$out/m${prec}1.txt" | tail -2
done
