#!/usr/bin/env bash
# NCCL under mpirun (issue #11): the same command as `--gpus N`, launched by mpirun instead (rank 0's NCCL id
# broadcast over MPI; each rank on the GPU of its local rank): the losses equal the --gpus run's step for step
# (vram's attention kernels, which are deterministic; cuDNN's backward is not).
#   bash bench/dist/mpirun_nccl.sh [VRAM]      (a vram built with MPI and CUDA for sm_90; default build-carry/vram)
set -uo pipefail
V=${1:-build-carry/vram}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=8
n=$(nvidia-smi -L | wc -l)
f="--device cuda --preset gpt2 --seq 1024 --batch 8 --precision bf16 --clip 1.0 --lr 6e-4 --lr-schedule constant --warmup 0 --attention vram"
"$V" info | grep -E "^dist" || true
. "$(dirname "$0")/mon.sh"
for z in ${ZEROS:-1 3}; do
  mon gpus${n}z$z "$V" train $f --steps 20 --gpus "$n" --zero $z --json
  mon mpi${n}z$z mpirun -np "$n" -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS "$V" train $f --steps 20 --zero $z --json
  # --json: mpirun gives its ranks a terminal, where a human run would draw a progress bar
  jl() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([-0-9.e]*\).*/\1/' | tr '\n' ' '; }
  a=$(jl "$out/gpus${n}z$z.txt"); b=$(jl "$out/mpi${n}z$z.txt")
  echo "ZeRO $z --gpus $n:      $a"
  echo "ZeRO $z mpirun -np $n: $b"
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "ZeRO $z: identical losses" || echo "ZeRO $z: losses DIFFER"
  grep -o '"tokens_per_s":[0-9.e+]*' "$out/mpi${n}z$z.txt" | tail -1
done
