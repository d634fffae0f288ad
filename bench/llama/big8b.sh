#!/usr/bin/env bash
# The llama3.1-8b shape on one H100 (issue #10), in ONE command on the GPU machine (repo root, .deps and
# build-carry carried):   bash bench/llama/big8b.sh
# `vram fit --device cuda` picks the configuration (precision, recompute, optimizer state, master, micro-batch)
# that fits this GPU and is fastest by its cost model; then that configuration trains STEPS steps on
# generated tokens, T=2048: tokens/s, the plan == allocated lines, the peak by nvidia-smi (50 ms samples
# above the idle baseline). Outputs under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/big8b}; mkdir -p "$OUT"
STEPS=${STEPS:-4}
. scripts/gpu-setup.sh
V=build-carry/vram
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
m="--model llama --preset llama3.1-8b --seq 2048"
$V fit $m --device cuda --json >"$OUT/fit.json" 2>"$OUT/fit.err" || { cat "$OUT/fit.err"; exit 1; }
flags=$(python3 - "$OUT/fit.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); b = d["rows"][d["best"]]
print(f"--precision {b['precision']} --recompute {b['recompute']} --optim-state {b['optim_state']}"
      f" --master {b['master'] if b['master'] != '-' else 'fp32'} --offload {b['offload']} --batch {b['micro_batch']}"
      f" --accum {b['accum']}", file=sys.stdout)
print(f"fit: best row est. {b['tokens_per_s']:.0f} tokens/s, need {b['need'] / 2**30:.2f} GiB", file=sys.stderr)
PY
)
echo "configuration: $flags"
. bench/gpu/gpumon.sh
gpumon big8b timeout 400 $V train $m $flags --device cuda --clip 1.0 --lr 1e-4 --warmup 0 --steps "$STEPS" \
  --eval-every -1 > "$OUT/train.txt" 2>&1
echo "rc $? peak by nvidia-smi $(peak big8b) GiB above idle"
grep -E "^step|^summary|attention|^device|^process|DIFFERS|^peak" "$OUT/train.txt" | tail -14
