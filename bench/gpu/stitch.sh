#!/usr/bin/env bash
# The caching allocator's policies in vram's dynamic mode on the GPU, in ONE command (repo root, .deps
# carried; a build-carry/ with vram and test_alloc_cuda built for sm_90 is used when its libraries resolve):
#     bash bench/gpu/stitch.sh
# 1. tests/alloc/test_alloc_cuda: every policy's reserved bytes equal the process's device usage;
# 2. GPT-2 124M, B=16, T=1024, bf16, AdamW, clip 1.0, `vram train --memory dynamic --policy P` for P in
#    pytorch, expandable, stitch (STEPS steps each, the planned arena as the reference): median ms/step,
#    the ratio to pytorch (aim: stitch <= 1.02x), the allocator's peak reserved and device calls, and
#    the peak by nvidia-smi (memory.used every 50 ms above the idle baseline).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/stitch}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
BIN=build-carry
if [ ! -x $BIN/vram ] || [ ! -x $BIN/test_alloc_cuda ] || ldd $BIN/vram $BIN/test_alloc_cuda | grep -q "not found"; then
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build build-gpu -j16 --target vram_cli test_alloc_cuda > "$OUT/build.log" 2>&1 || { grep error "$OUT/build.log" | head; exit 1; }
  BIN=build-gpu
fi
. bench/gpu/gpumon.sh
echo "== test_alloc_cuda"
timeout 120 $BIN/test_alloc_cuda > "$OUT/test_alloc_cuda.log" 2>&1; echo "rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_alloc_cuda.log" | tr '\n' ' ')"
G="--preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --warmup 0 --lr-schedule constant --device cuda --eval-every -1 --json --steps $STEPS"
for p in planned pytorch expandable stitch; do
  if [ $p = planned ]; then f="--memory planned"; else f="--memory dynamic --policy $p"; fi
  gpumon "$p" timeout 200 $BIN/vram train $G $f > "$OUT/$p.jsonl" 2> "$OUT/$p.err"
  echo "$p rc $? $(tail -c 200 "$OUT/$p.err" | tr '\n' ' ')"
done
python3 - "$OUT" "$base" <<'PY' | tee "$OUT/table.txt"
import json, statistics, sys
out, base = sys.argv[1], float(sys.argv[2])
ref = None
print(f"{'memory':22s} {'ms/step':>8s} {'vs pytorch':>10s} {'peak smi GiB':>12s}  allocator")
for p in ("planned", "pytorch", "expandable", "stitch"):
    try:
        recs = [json.loads(l) for l in open(f"{out}/{p}.jsonl") if l.startswith("{")]
    except Exception as e:
        print(p, "no result", e); continue
    st = [r for r in recs if r.get("event") == "step"]
    sm = [r for r in recs if r.get("event") == "summary"]
    if not st: print(p, "no steps"); continue
    ms = statistics.median([s["ms"] for s in st[5:]] or [s["ms"] for s in st])
    if p == "pytorch": ref = ms
    smi = [float(x) for x in open(f"{out}/{p}.smi").read().split() if x.strip()]
    peak = (max(smi) - base) / 1024 if smi else float("nan")
    m = sm[-1]["memory"] if sm else {}
    name = "planned arena" if p == "planned" else f"dynamic {p}"
    extra = (f"reserved {m.get('run_peak_reserved')} / allocated {m.get('run_peak_allocated')}, "
             f"{m.get('run_device_calls')} driver calls ({m.get('run_device_maps')} cuMemMap) in {len(st)} steps" if p != "planned"
             else f"arena {m.get('run_arena')} (plan {m.get('plan_arena')})")
    print(f"{name:22s} {ms:8.2f} {(ms / ref if ref else float('nan')):10.3f} {peak:12.2f}  {extra}")
PY
