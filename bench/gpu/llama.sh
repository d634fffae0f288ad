#!/usr/bin/env bash
# The llama3.2-1b shape on one GPU, vram against Hugging Face transformers (LlamaForCausalLM, SDPA, bf16
# autocast, fused AdamW, torch.compile), in ONE command on the GPU machine (repo root, .deps and build-carry
# carried):   bash bench/gpu/llama.sh
# Both: bf16 with fp32 master weights, AdamW, clip 1.0, T=2048, random/generated tokens; tokens/s (median of
# the steps after the first 3), peak device memory by nvidia-smi (50 ms samples minus the idle baseline), and
# for vram the plan == allocated line. BATCHES="4 8" (default) picks the batch sizes; RECOMPUTE="none selective"
# (default) vram's recompute policies; PEERS="compile" (or "compile eager") the peer's modes.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/llama}; mkdir -p "$OUT"
BATCHES=${BATCHES:-4 8}; PEERS=${PEERS:-compile}; RECOMPUTE=${RECOMPUTE:-none selective}; STEPS=${STEPS:-10}; PRESET=${PRESET:-llama3.2-1b}
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format='commit %H' 2>/dev/null | tee -a "$OUT/gpu.txt"
BIN=build-carry
[ -x $BIN/vram ] && ! ldd $BIN/vram | grep -q "not found" || {
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 &&
  cmake --build build-gpu -j16 --target vram_cli > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  BIN=build-gpu; }
. bench/gpu/gpumon.sh
rate() { # JSON Lines of vram train -> median tokens/s and ms of the steps after the first 3
  python3 -c "
import json, statistics, sys
st = [r for r in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith('{'))) if r.get('event') == 'step']
st = st[3:] if len(st) > 3 else st
print(f\"{statistics.median(r['tokens_per_s'] for r in st):.0f} {statistics.median(r['ms'] for r in st):.1f}\" if st else 'nan nan')" "$1"
}
printf "%-22s %6s %10s %9s %10s\n" system batch tokens/s ms/step peak_GiB | tee "$OUT/table.txt"
for b in $BATCHES; do
  for rc_policy in $RECOMPUTE; do
  n=vram_b${b}_$rc_policy
  gpumon $n timeout 300 $BIN/vram train --model llama --preset $PRESET --device cuda --precision bf16 --batch $b \
    --seq 2048 --steps $STEPS --clip 1.0 --lr 3e-4 --warmup 0 --lr-schedule constant --eval-every -1 --json \
    --recompute $rc_policy > "$OUT/$n.jsonl" 2> "$OUT/$n.err"
  rc=$?; read tps ms < <(rate "$OUT/$n.jsonl")
  printf "%-22s %6s %10s %9s %10s %s\n" "vram ($rc_policy)" $b "$tps" "$ms" "$(peak $n)" "$([ $rc = 0 ] || echo "rc $rc $(tail -1 $OUT/$n.err)")" | tee -a "$OUT/table.txt"
  python3 -c "
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
m = [r for r in recs if r.get('event') == 'summary']
if m:
    m = m[-1]['memory']
    same = all(v['plan_at_peak'] == v['run_at_peak'] and v['plan_max'] == v['run_max'] for v in m['roles'].values())
    print(f\"  vram plan {m['plan_arena']} B, allocated {m['run_arena']} B, per role {'equal' if same else 'DIFFERS'}\")
" "$OUT/$n.jsonl" | tee -a "$OUT/table.txt"
  done
  for mode in $PEERS; do
    n=hf_${mode}_b$b
    gpumon $n timeout 400 python3 bench/gpu/hf_llama.py --preset $PRESET --mode $mode --batch $b --seq 2048 \
      --steps $((STEPS + 2)) > "$OUT/$n.json" 2> "$OUT/$n.err"
    rc=$?
    python3 -c "
import json, sys
try: r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception: r = {}
print(f\"{'hf-' + sys.argv[2]:<22} {sys.argv[3]:>6} {r.get('tokens_per_s', 'nan'):>10} {r.get('ms', 'nan'):>9} {sys.argv[4]:>10}\")
" "$OUT/$n.json" $mode $b "$(peak $n)" | tee -a "$OUT/table.txt"
    [ $rc = 0 ] || echo "  rc $rc: $(tail -2 $OUT/$n.err)"
  done
done
python3 - "$OUT/table.txt" <<'PY' | tee -a "$OUT/table.txt"
import sys
vram, peer = [], {}
for l in open(sys.argv[1]):
    f = l.split()
    try:
        if f[0] == "vram" and f[1].startswith("("):
            vram.append((f[1], int(f[2]), float(f[3]), float(f[5])))
        elif f[0] == "hf-compile":
            peer[int(f[1])] = (float(f[2]), float(f[4]))
    except (IndexError, ValueError):
        pass
for pol, b, tps, mem in vram:
    if b in peer:
        print(f"ratio B={b} vram {pol} / hf-compile: tokens/s {tps / peer[b][0]:.3f}, peak memory {mem / peer[b][1]:.3f}")
PY
