#!/usr/bin/env bash
# Data parallel training, vram against PyTorch DDP and FSDP2 (both torch.compile), on 2-8 GPUs of one host.
# ONE command on the GPU machine, from the repo root:
#
#   bash bench/dist/run.sh [--xl] [--dry-run] [VRAM_BIN [N]]
#
#   VRAM_BIN   the vram binary (default build-carry/vram; when it is not there: built into build-gpu,
#              Release, sm_90, as bench/gpu/run.sh does)
#   N          GPUs (default: all that nvidia-smi lists); runs on 1 and N GPUs, 2 too when N >= 4, 4 when N >= 8
#   --xl       GPT-2 XL (L=48 C=1600 NH=25), B=8 per GPU, vram at --zero 0, 1, 2 and 3 (ZeRO 1-3 on more than
#              one GPU only) against DDP and FSDP2; default GPT-2 124M, B=16 per GPU, vram --zero 0
#   --dry-run  print the commands, run nothing (no GPU needed)
#
# For each GPU count n and each system: (a) vram train --device cuda --gpus n --zero z --preset gpt2|gpt2-xl
# --batch B --seq 1024 --precision bf16 --optim adamw --clip 1.0 --lr 6e-4 --warmup 0 --lr-schedule constant
# --eval-every -1 --steps 30 --json; (b) torchrun --standalone --nproc_per_node n bench/dist/torch_dist.py
# --mode ddp --compile; (c) the same with --mode fsdp2. Each under nvidia-smi sampling (memory.used of every
# GPU every 50 ms; peak per GPU above the idle baseline taken at the start), bounded by TIMEOUT seconds; a
# failed run is reported and the others go on. Then bench/dist/report.py: tokens/s, scaling efficiency
# against the system's own 1-GPU run, peak memory per GPU, MFU (6N + 6LCT flops per token over 989 TFLOP/s
# per GPU), and vram's ratios to DDP (and FSDP2).
#
# Outputs in ${OUT:-/tmp/out}: dist-[xl-]<system>-n<n>.json (the run's stdout: vram's JSON Lines, torch's
# JSON line), .err.txt (stderr), .smi.txt (the samples), dist-[xl-]manifest.txt, dist-[xl-]table.txt,
# dist-[xl-]summary.json, dist-gpu.txt, dist-baseline.txt, dist-vram-info.txt.
# Environment: COUNTS (the GPU counts to run, e.g. "2"; default as N says), STEPS (30), WARMUP (5: steps left out of the median), TIMEOUT (300 s per run), SYSTEMS
# ("vram ddp fsdp2"), ZEROS (vram's levels: "0", --xl "0 1 2 3"), BATCH, SEQ, COMPILE (1; 0: torch eager),
# VRAM_EXTRA / TORCH_EXTRA (more flags for every vram / torch run), TORCHRUN (torchrun), PEAK_TFLOPS (989).
set -u -o pipefail
# NVLink multicast stays off on the lent machines (NCCL NVLS, torch symmetric memory, NVSHMEM)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # cuda:i is nvidia-smi's GPU i (the per-GPU peaks)
export OMP_WAIT_POLICY=passive
cd "$(dirname "$0")/../.." || exit 1

XL=0 DRY=0 pos=()
for arg in "$@"; do
  case $arg in
    --xl) XL=1 ;;
    --dry-run|-n) DRY=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $arg (--xl, --dry-run)" >&2; exit 2 ;;
    *) pos+=("$arg") ;;
  esac
done
VRAM=${pos[0]:-build-carry/vram}
N=${pos[1]:-}
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-30} WARMUP=${WARMUP:-5} TIMEOUT=${TIMEOUT:-300} COMPILE=${COMPILE:-1}
SYSTEMS=${SYSTEMS:-vram ddp fsdp2}
read -r -a TORCHRUN_CMD <<< "${TORCHRUN:-torchrun}"
read -r -a VRAM_X <<< "${VRAM_EXTRA:-}"
read -r -a TORCH_X <<< "${TORCH_EXTRA:-}"
if [ "$XL" = 1 ]; then
  PRESET=gpt2-xl L=48 C=1600 H=25 B=${BATCH:-8} ZEROS=${ZEROS:-0 1 2 3} PFX=xl-
else
  PRESET=gpt2 L=12 C=768 H=12 B=${BATCH:-16} ZEROS=${ZEROS:-0} PFX=
fi
T=${SEQ:-1024}
mkdir -p "$OUT"

if [ -z "$N" ]; then
  N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${N:-0}" -lt 1 ]; then
    [ "$DRY" = 1 ] || { echo "run.sh: nvidia-smi lists no GPU (give N to say how many)" >&2; exit 1; }
    N=8
  fi
fi
counts=(1)
if [ "$N" -ge 8 ]; then counts+=(2 4); elif [ "$N" -ge 4 ]; then counts+=(2); fi
if [ "$N" -gt 1 ]; then counts+=("$N"); fi
if [ -n "${COUNTS:-}" ]; then read -r -a counts <<< "$COUNTS"; fi
echo "== data parallel benchmark: $([ "$XL" = 1 ] && echo "GPT-2 XL" || echo "GPT-2 124M"), B=$B per GPU, T=$T, $STEPS steps;" \
  "GPUs: ${counts[*]}; systems: $SYSTEMS; vram --zero: $ZEROS; out: $OUT"

# ---- vram: the carried binary, else a build; the carried .deps' libraries (cJSON, OpenBLAS) on the loader's path
if [ "$DRY" != 1 ]; then
  # shellcheck source=/dev/null
  if [ -d .deps ]; then . scripts/gpu-setup.sh; fi
  export PATH=/usr/local/cuda/bin:$PATH
  if [ ! -x "$VRAM" ] || ldd "$VRAM" | grep -q "not found"; then
    echo "== $VRAM missing or its libraries do not resolve: building build-gpu/vram"
    if ! { cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/dist-cmake.txt" 2>&1 &&
           cmake --build build-gpu -j16 --target vram_cli > "$OUT/dist-build.txt" 2>&1; }; then
      echo "run.sh: the build failed:"; tail -30 "$OUT/dist-cmake.txt" "$OUT/dist-build.txt" 2>/dev/null; exit 1
    fi
    VRAM=build-gpu/vram
  fi
  { nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
    nvidia-smi topo -m
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  } > "$OUT/dist-gpu.txt" 2>&1
  head -"$N" "$OUT/dist-gpu.txt"; grep "^torch" "$OUT/dist-gpu.txt"
  timeout 60 "$VRAM" info > "$OUT/dist-vram-info.txt" 2>&1; grep -E "^(dist|cuda)" "$OUT/dist-vram-info.txt"
  # idle baseline per GPU (MiB), before anything of ours runs
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits > "$OUT/dist-baseline.txt"
fi

# Waits (60 s at most) until no process computes on a GPU: a run's ranks must be gone before the next starts.
wait_idle() {
  local left
  for _ in $(seq 60); do
    left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr '\n' ' ')
    [ -z "${left// /}" ] && return 0
    sleep 1
  done
  echo "   WARNING: processes still on the GPUs after 60 s: $left (their memory counts in the next peaks)"
}

# run TAG SYSTEM N ZERO CMD...: CMD under nvidia-smi sampling and the timeout; a line in the manifest.
run() {
  local tag=$1 sys=$2 n=$3 zero=$4; shift 4
  local f="$OUT/dist-$tag"
  echo "== $tag: $*"
  if [ "$DRY" = 1 ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$sys" "$n" "$zero" dry 0 "$*" >> "$OUT/dist-${PFX}manifest.txt"
    return 0
  fi
  wait_idle
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 50 > "$f.smi.txt" 2>/dev/null &
  local mon=$! t0=$SECONDS
  # timeout signals its whole process group (vram's ranks, torchrun and its workers), SIGKILL 30 s later
  timeout -k 30 "$TIMEOUT" "$@" > "$f.json" 2> "$f.err.txt"
  local rc=$? secs=$((SECONDS - t0))
  kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$sys" "$n" "$zero" "$rc" "$secs" "$*" >> "$OUT/dist-${PFX}manifest.txt"
  if [ "$rc" = 0 ]; then
    echo "   ok, $secs s"
  else
    echo "   FAILED: rc $rc after $secs s$([ "$rc" = 124 ] || [ "$rc" = 137 ] && echo " (timed out at $TIMEOUT s)"); stderr's end:"
    # the errors themselves (a rank's exception, vram's message), then the end of stderr
    grep -E '(Error|Exception)(:|$)|^vram |torch_dist.py: ' "$f.err.txt" | awk '!seen[$0]++' | head -6 | sed 's/^/   ! /'
    grep -v '^\s*$' "$f.err.txt" | tail -4 | sed 's/^/   | /'
  fi
}

: > "$OUT/dist-${PFX}manifest.txt"
compile=(); [ "$COMPILE" = 1 ] && compile=(--compile)
for n in "${counts[@]}"; do
  for s in $SYSTEMS; do
    case $s in
      vram)
        for z in $ZEROS; do
          if [ "$n" = 1 ] && [ "$z" != 0 ]; then continue; fi  # one rank: ZeRO 1/2 shard nothing
          run "${PFX}vram-z$z-n$n" vram "$n" "$z" "$VRAM" train --device cuda --gpus "$n" --zero "$z" \
            --preset "$PRESET" --batch "$B" --seq "$T" --precision bf16 --optim adamw --clip 1.0 --lr 6e-4 \
            --warmup 0 --lr-schedule constant --eval-every -1 --steps "$STEPS" --json "${VRAM_X[@]}"
        done ;;
      ddp|fsdp2)
        run "${PFX}$s-n$n" "$s" "$n" - "${TORCHRUN_CMD[@]}" --standalone --nproc_per_node "$n" \
          bench/dist/torch_dist.py --mode "$s" "${compile[@]}" --layers "$L" --channels "$C" --heads "$H" \
          --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" "${TORCH_X[@]}" ;;
      *) echo "run.sh: unknown system $s (vram ddp fsdp2)" >&2 ;;
    esac
  done
done

[ "$DRY" = 1 ] && { echo "== dry run: nothing ran (manifest in $OUT/dist-${PFX}manifest.txt)"; exit 0; }
echo
python3 bench/dist/report.py "$OUT" --prefix "$PFX" --warmup "$WARMUP" --layers "$L" --channels "$C" --seq "$T" \
  --peak-tflops "${PEAK_TFLOPS:-989}" | tee "$OUT/dist-${PFX}table.txt"
