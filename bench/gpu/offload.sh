#!/usr/bin/env bash
# --offload optim on the GPU, in ONE command on the GPU machine (repo root, .deps and build-carry carried):
#     bash bench/gpu/offload.sh
# 1. correctness: a GPT (L4 C256, T=256, fp32, AdamW, clip 1.0, accum 2) trained STEPS_C steps on the device
#    and offloaded: the weights' relative L2 difference and largest difference (aim: within 1e-6 relative);
#    plan == run per role on the device and the host (no DIFFERS line).
# 2. GPT-2 XL (1.56B), B=16, T=1024, bf16, AdamW: fully on the device vs --offload optim, at accum 1 and 8
#    (tokens per step 16k and 131k): tokens/s (median of the steps after the first), the ratio (aim >= 0.8),
#    peak device memory by nvidia-smi (50 ms samples minus the idle baseline), host bytes pinned.
# 3. a trace of an offloaded step (accum 1, XL) drawn as bench/offload/timeline.svg: the copies and the host's
#    updates beside the backward.
# PARTS="1 2 3" (default) picks the parts.
set -u -o pipefail
cd "$(dirname "$0")/../.."
PARTS=${PARTS:-1 2 3}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT=${OUT:-$PWD/out/offload}; mkdir -p "$OUT"
STEPS=${STEPS:-6}; STEPS_C=${STEPS_C:-8}
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format='commit %H' 2>/dev/null | tee -a "$OUT/gpu.txt"
echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)" | tee -a "$OUT/gpu.txt"
BIN=build-carry
[ -x $BIN/vram ] && ! ldd $BIN/vram | grep -q "not found" || {
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 &&
  cmake --build build-gpu -j16 --target vram_cli > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  BIN=build-gpu; }
VRAM=$BIN/vram
. bench/gpu/gpumon.sh

if part 1; then
echo "== 1. fp32 on the device vs offloaded: weights after $STEPS_C steps (clip 1.0, accum 2)"
C="--device cuda --layers 4 --channels 256 --heads 4 --vocab 512 --max-seq 256 --seq 256 --batch 8 --accum 2 --clip 1.0 --lr-schedule constant --warmup 0 --steps $STEPS_C --eval-every -1"
$VRAM train $C --save "$OUT/c_dev.bin" > "$OUT/c_dev.out" 2>&1; echo "device rc $?"
$VRAM train $C --offload optim --save "$OUT/c_off.bin" > "$OUT/c_off.out" 2>&1; echo "offload rc $?"
grep -E "^(host|peak|device)" "$OUT/c_off.out"
grep -q DIFFERS "$OUT/c_off.out" "$OUT/c_dev.out" && echo "plan != run: DIFFERS" || echo "plan == run per role (device and host)"
for os in 8bit bf16; do
  $VRAM train ${C/--steps $STEPS_C/--steps 4} --precision bf16 --optim-state $os --offload optim > "$OUT/c_$os.out" 2>&1
  echo "bf16 + $os state offloaded: rc $? $(grep -c DIFFERS "$OUT/c_$os.out") DIFFERS, last $(grep '^step 4/4' "$OUT/c_$os.out" | cut -c1-60)"
done
python3 - "$OUT/c_dev.bin" "$OUT/c_off.bin" <<'PY' | tee "$OUT/c_compare.txt"
import sys, numpy as np
a, b = (np.fromfile(f, dtype=np.float32, offset=1024) for f in sys.argv[1:3])
d = a.astype(np.float64) - b
print(f"weights: {a.size} values; relative L2 difference {np.linalg.norm(d) / np.linalg.norm(a):.3e}; "
      f"largest |difference| {np.abs(d).max():.3e} (largest |weight| {np.abs(a).max():.3e}); "
      f"identical values {np.mean(a == b) * 100:.2f}%")
PY
fi

X="--preset gpt2-xl --batch 16 --seq 1024 --precision bf16 --lr 1e-4 --warmup 0 --lr-schedule constant --device cuda --eval-every -1 --json"
if part 2; then
echo "== 2. GPT-2 XL B=16 T=1024 bf16 AdamW: on the device vs offloaded ($STEPS steps)"
for acc in 1 8; do
  for mode in dev off; do
    f=""; [ $mode = off ] && f="--offload optim"
    n="xl_${mode}_a$acc"
    gpumon $n timeout 420 $VRAM train $X --accum $acc --steps $STEPS $f > "$OUT/$n.jsonl" 2> "$OUT/$n.err"
    echo "$n rc $? peak $(peak $n) GiB $(tail -c 200 "$OUT/$n.err" | tr '\n' ' ' | cut -c1-160)"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/xl_table.txt"
import json, statistics, sys
out = sys.argv[1]
def rate(n):
    try:
        recs = [json.loads(l) for l in open(f"{out}/{n}.jsonl") if l.startswith("{")]
    except Exception:
        return None, None
    st = [r for r in recs if r.get("event") == "step"]
    sm = [r for r in recs if r.get("event") == "summary"]
    if len(st) < 2:
        return None, None
    return statistics.median(r["tokens_per_s"] for r in st[1:]), statistics.median(r["ms"] for r in st[1:])
N = 1557611200; L, C, T = 48, 1600, 1024
for acc in (1, 8):
    d, dm = rate(f"xl_dev_a{acc}"); o, om = rate(f"xl_off_a{acc}")
    if d and o:
        mfu = lambda r: r * (6 * N + 6 * L * C * T) / 989e12 * 100
        print(f"accum {acc}: device {d:,.0f} tok/s ({dm:.0f} ms/step, MFU {mfu(d):.1f}%), offloaded {o:,.0f} tok/s "
              f"({om:.0f} ms/step, MFU {mfu(o):.1f}%): ratio {o / d:.3f}")
    else:
        print(f"accum {acc}: device {d} offloaded {o} (a run failed)")
PY
grep -h '"host"' "$OUT"/xl_off_a1.jsonl | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); h=d['memory']['host']; print('host pinned (plan/run):', {k:v for k,v in h.items()})" 2>/dev/null
fi

if part 3; then
echo "== 3. trace of an offloaded XL step (accum 1)"
timeout 300 $VRAM train ${X/--json/} --steps 3 --offload optim --trace "$OUT/xl_off.trace.json" > "$OUT/xl_trace.out" 2>&1
echo "rc $?"
python3 bench/offload/timeline_svg.py "$OUT/xl_off.trace.json" "$OUT/timeline.svg"
fi
