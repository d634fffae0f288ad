#!/usr/bin/env bash
# Step time of vram's allocator against PyTorch's own with the lent machine's drift taken out, on the GPU machine,
# from the repository root:
#     bash bench/torch_alloc/lockstep.sh            # WORKLOADS (gpt2 bert resnet50), MODE (vram_stitch), STEPS (40),
#                                                   # BATCH (each workload's default; e.g. larger, to be GPU-bound)
# For each workload, two processes on the one GPU, native and MODE, run bench/torch_alloc/workload.py in turn, a step
# each (workload.py --lockstep: each step, its batch too, runs while the other process waits on a FIFO), so that
# the two modes' steps are timed seconds apart under the same host and GPU speed; then again with MODE first.
# Machine speed on these VMs moves by up to 12 ms between runs minutes apart (bench/torch_alloc/README.md), which
# separate runs cannot tell from the allocator. Memory is not measured here (two processes share the GPU: run.sh
# measures it). Prints, per workload and order, the median per-step ratio MODE / native over the steps after
# WARMUP (8), its quartiles, the medians of both and every step; then both orders pooled (the first process of a pair
# was up to 5% slower on GPT-2, whichever mode: bench/torch_alloc/README.md) (bench/torch_alloc/lockstep.py). Raw
# JSON under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d /tmp/lockstep.XXXXXX)}; mkdir -p "$OUT"
export STEPS=${STEPS:-40} WARMUP=${WARMUP:-8} MODE=${MODE:-vram_stitch}
if ls .deps/*.deb >/dev/null 2>&1; then . scripts/gpu-setup.sh; fi
export CUBLAS_WORKSPACE_CONFIG=:4096:8 TOKENIZERS_PARALLELISM=false TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
export PYTHONPATH=$PWD/python:$PWD/bench/gpu:${PYTHONPATH:-}
if [ -z "${VRAM_TORCH_LIB:-}" ]; then
  for d in build-carry build-gpu; do
    if [ -f $d/libvram_torch.so ]; then export VRAM_TORCH_LIB=$PWD/$d/libvram_torch.so; break; fi
  done
fi
[ -n "${VRAM_TORCH_LIB:-}" ] || { echo "lockstep.sh: no libvram_torch.so in build-carry/ or build-gpu/ (bench/torch_alloc/run.sh builds one)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
fail=0
for w in ${WORKLOADS:-gpt2 bert resnet50}; do
  pairs=""
  for order in "native $MODE" "$MODE native"; do
    set -- $order
    rm -f "$OUT/a2b" "$OUT/b2a"; mkfifo "$OUT/a2b" "$OUT/b2a"
    fa="$OUT/$w.$1.first.json"; fb="$OUT/$w.$2.second.json"
    timeout 300 python3 bench/torch_alloc/workload.py $w $1 --batch "${BATCH:-0}" --lockstep a "$OUT/a2b" "$OUT/b2a" > "$fa" 2> "$fa.log" &
    pa=$!
    timeout 300 python3 bench/torch_alloc/workload.py $w $2 --batch "${BATCH:-0}" --lockstep b "$OUT/a2b" "$OUT/b2a" > "$fb" 2> "$fb.log"
    rb=$?; wait $pa; ra=$?
    if [ $ra -eq 3 ] || [ $rb -eq 3 ]; then echo "-- $w: skipped (torchvision not importable)"; break; fi
    if [ $ra -ne 0 ] || [ $rb -ne 0 ]; then
      echo "-- $w ($1 first): FAILED (rc $ra, $rb)"; tail -3 "$fa.log" "$fb.log"; fail=1; continue
    fi
    pairs="$pairs $fa $fb"
  done
  [ -n "$pairs" ] && { python3 bench/torch_alloc/lockstep.py "$MODE" $pairs || fail=1; }
done
rm -f "$OUT/a2b" "$OUT/b2a"
echo "raw results in $OUT"
exit $fail
